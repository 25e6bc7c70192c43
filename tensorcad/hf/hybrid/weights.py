"""Weight names of the hybrid families (Mamba-2, Bamba, LFM2), both ways: data only, no torch.

A hybrid's layers differ, so each row names the layer type (the stack's block) whose
layers it is for: `(their key, our keys, block)`, `{i}` standing for each layer of
that block and `block` None for a row outside the stack. `weights.weight_map` wraps
them into its `Entry` rows. Our names follow the generated classes' attributes
(`mixer.in_proj`, `mixer.conv_weight`, `attention.q`, `mlp.gate`, ...).
"""

from __future__ import annotations

from tensorcad.design.model import Design, Node

CLASSES = {"mamba2": "Mamba2ForCausalLM", "bamba": "BambaForCausalLM", "lfm2": "Lfm2ForCausalLM"}
# transformers' key prefix of the model under the head, and its embedding's key
_BASE = {"mamba2": ("backbone", "backbone.embeddings.weight"), "bamba": ("model", "model.embed_tokens.weight"),
         "lfm2": ("model", "model.embed_tokens.weight")}
_FINAL_NORM = {"mamba2": "norm_f", "bamba": "final_layernorm", "lfm2": "embedding_norm"}
# their name of a layer's parts: the norm before the mixer, the norm before the MLP, the MLP's three matrices
_LAYER = {
    "mamba2": {"mixer": "mixer", "norm": "norm"},
    "bamba": {"mixer": "mamba", "norm": "input_layernorm", "mlp_norm": "pre_ff_layernorm",
              "mlp": ("feed_forward", "gate_proj", "up_proj", "down_proj"), "attention": "self_attn",
              "o": "o_proj"},
    "lfm2": {"mixer": "conv", "norm": "operator_norm", "mlp_norm": "ffn_norm",
             "mlp": ("feed_forward", "w1", "w3", "w2"), "attention": "self_attn", "o": "out_proj"},
}


def embedding_key(model_type: str) -> str:
    return _BASE[model_type][1]


def _ssm(mixer: Node, theirs: str, ours: str) -> list[tuple[str, str]]:
    p = mixer.params
    rows = [("in_proj.weight", "in_proj.weight"), ("conv1d.weight", "conv_weight")]
    rows += [("in_proj.bias", "in_proj.bias"), ("out_proj.bias", "out_proj.bias")] if p["bias"] else []
    rows += [("conv1d.bias", "conv_bias")] if p["conv_bias"] else []
    rows += [("dt_bias", "dt_bias"), ("A_log", "A_log"), ("D", "D"), ("norm.weight", "norm.weight"),
             ("out_proj.weight", "out_proj.weight")]
    return [(f"{theirs}.{a}", f"{ours}.{b}") for a, b in rows]


def _short_conv(mixer: Node, theirs: str, ours: str) -> list[tuple[str, str]]:
    rows = [("in_proj.weight", "in_proj.weight"), ("conv.weight", "conv_weight"), ("out_proj.weight", "out_proj.weight")]
    if mixer.params["bias"]:
        rows += [("in_proj.bias", "in_proj.bias"), ("conv.bias", "conv_bias"), ("out_proj.bias", "out_proj.bias")]
    return [(f"{theirs}.{a}", f"{ours}.{b}") for a, b in rows]


def _block(model_type: str, block: Node, theirs: str, ours: str) -> list[tuple[str, str]]:
    """One layer's rows: its norms, its mixer or attention, its MLP."""
    names = _LAYER[model_type]
    if block.kind == "mixer_block":
        mixer = block.child("mixer")
        rows = [(f"{theirs}.{names['norm']}.weight", f"{ours}.mixer_norm.weight")]
        build = _ssm if mixer.kind == "ssm" else _short_conv
        rows += build(mixer, f"{theirs}.{names['mixer']}", f"{ours}.mixer")
    else:  # a transformer_block: q, k, v, o and (LFM2) the q/k norms
        attention = block.child("attention")
        a, t = f"{ours}.attention", f"{theirs}.{names['attention']}"
        rows = [(f"{theirs}.{names['norm']}.weight", f"{ours}.attention_norm.weight")]
        kinds = ["weight"] + (["bias"] if attention.params["bias"] else [])
        for which, their in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", names["o"])):
            rows += [(f"{t}.{their}.{kind}", f"{a}.{which}.{kind}") for kind in kinds]
        if attention.params["qk_norm"] is not None:
            rows += [(f"{t}.q_layernorm.weight", f"{a}.q_norm.weight"), (f"{t}.k_layernorm.weight", f"{a}.k_norm.weight")]
    if block.params["mlp"] is not None:
        mlp = block.child("mlp")
        rows.append((f"{theirs}.{names['mlp_norm']}.weight", f"{ours}.mlp_norm.weight"))
        part, gate, up, down = names["mlp"]
        for kind in ["weight"] + (["bias"] if mlp.params["bias"] else []):
            rows += [(f"{theirs}.{part}.{gate}.{kind}", f"{ours}.mlp.gate.{kind}"),
                     (f"{theirs}.{part}.{up}.{kind}", f"{ours}.mlp.up.{kind}"),
                     (f"{theirs}.{part}.{down}.{kind}", f"{ours}.mlp.down.{kind}")]
    return rows


def hybrid_rows(design: Design, attr) -> list[tuple[str, str, str | None]]:
    """(their key, our key, the block it is for) of every tensor but a tied head's."""
    model_type = design.source["hf"]["model_type"]
    base, embedding = _BASE[model_type]
    embed = next(n for n in design.nodes if n.kind == "embedding")
    stack = next(n for n in design.nodes if n.kind == "stack")
    head = design.node(design.output)
    norm = design.node(head.sources["x"])
    out: list[tuple[str, str, str | None]] = [(embedding, f"{attr(embed.id)}.weight", None)]
    done = set()
    for name, block in zip(stack.params["layers"], stack.children):
        if name not in done:
            done.add(name)
            out += [(t, o, name) for t, o in _block(model_type, block, f"{base}.layers.{{i}}", f"{attr(stack.id)}.{{i}}")]
    out.append((f"{base}.{_FINAL_NORM[model_type]}.weight", f"{attr(norm.id)}.weight", None))
    if head.params["tie"] is None:
        out.append(("lm_head.weight", f"{attr(head.id)}.weight", None))
    return out
