"""Weight names both ways: transformers' state_dict keys and a generated model's.

Data only (no torch): each `Entry` says that transformers' tensor `hf` is ours `ours`,
or, for a fused tensor (Phi-3's qkv_proj and gate_up_proj, GPT-2's c_attn), ours laid
end to end along dim 0. GPT-2's Conv1D stores a weight as (in, out), the transpose of
nn.Linear's (out, in), so its entries say `transpose`. A key with `{i}` stands for
every layer of the stack. `tied` lists transformers' keys for a table it shares with
the embedding: accepted when present, written back as the embedding's tensor.

Our names follow codegen's fixed attribute names (`attention.q`, `mlp.gate`,
`attention_norm`, ...) under the top-level ids the import gave the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..design.model import Design, Node
from ..errors import TensorcadError
from .hybrid.weights import CLASSES as HYBRID_CLASSES
from .hybrid.weights import embedding_key, hybrid_rows


@dataclass(frozen=True)
class Entry:
    hf: str
    ours: tuple[str, ...]
    transpose: bool = False
    block: str | None = None  # a hybrid stack's layer type the row is for; None: every layer (or none)


@dataclass(frozen=True)
class WeightMap:
    model_type: str
    hf_class: str  # the transformers class whose state_dict these names are
    entries: tuple[Entry, ...]
    tied: tuple[tuple[str, str], ...]  # (their key for a shared table, their embedding's key)


_CLASSES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gpt2": "GPT2LMHeadModel",
    "gemma3_text": "Gemma3ForCausalLM", "olmo2": "Olmo2ForCausalLM", "granite": "GraniteForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM", "smollm3": "SmolLM3ForCausalLM", "cohere": "CohereForCausalLM",
    "stablelm": "StableLmForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
    "mixtral": "MixtralForCausalLM", "olmoe": "OlmoeForCausalLM", **HYBRID_CLASSES,
}
# Our names of a block's norms -> transformers' (Gemma's norm before the MLP is pre_feedforward_layernorm).
_BLOCK_NORMS = {"attention_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                "post_attention_norm": "post_attention_layernorm", "post_mlp_norm": "post_feedforward_layernorm"}


def _kinds(norm: Node) -> list[str]:
    """A norm's tensors: its scale, and its bias when it is a layernorm with one."""
    return ["weight", "bias"] if norm.kind == "layernorm" and norm.params.get("bias", True) else ["weight"]


def _top(design: Design, kind: str) -> Node:
    found = [n for n in design.nodes if n.kind == kind]
    if len(found) != 1:
        raise TensorcadError("hf", f"a Hugging Face {design.source['hf']['model_type']} design has one {kind} node, "
                                   f"this one {len(found)}")
    return found[0]


def _parts(attention: Node, mlp: Node) -> dict[str, bool]:
    qkv_bias = attention.child("q").params["bias"]
    return {"qkv_bias": qkv_bias, "o_bias": attention.child("o").params["bias"],
            "mlp_bias": mlp.params["bias"], "qk_norm": attention.params["qk_norm"] is not None}


def weight_map(design: Design, attr: Callable[[str], str] = lambda id: id) -> WeightMap:
    """The map for a design imported from Hugging Face (`design.source['hf']`)."""
    hf = design.source.get("hf")
    if hf is None:
        raise TensorcadError("hf", "this design was not imported from Hugging Face; it has no weight map")
    model_type = hf["model_type"]
    if model_type not in _CLASSES:
        raise TensorcadError("hf.model_type", f"no weight map for {model_type!r} (maps: {', '.join(_CLASSES)})")
    embed, stack = _top(design, "embedding"), _top(design, "stack")
    if model_type in HYBRID_CLASSES:  # layers of different kinds: each row says which (hybrid_weights)
        head = design.node(design.output)
        entries = tuple(Entry(hf_key, (ours,), block=block) for hf_key, ours, block in hybrid_rows(design, attr))
        tied = (("lm_head.weight", embedding_key(model_type)),) if head.params["tie"] is not None else ()
        return WeightMap(model_type, _CLASSES[model_type], entries, tied)
    head = design.node(design.output)
    norm = design.node(head.sources["x"])
    block = stack.children[0]
    if block.kind != "transformer_block":
        raise TensorcadError("hf", "a Hugging Face design's stack repeats a transformer_block")
    attention, mlp = block.child("attention"), block.child("mlp")
    p = _parts(attention, mlp)
    E, L, N, H = attr(embed.id), f"{attr(stack.id)}.{{i}}", attr(norm.id), attr(head.id)
    tied = head.params["tie"] is not None
    out: list[Entry] = []

    def add(hf_key: str, *ours: str, transpose: bool = False) -> None:
        out.append(Entry(hf_key, tuple(ours), transpose))

    if model_type == "gpt2":
        add("transformer.wte.weight", f"{E}.weight")
        add("transformer.wpe.weight", f"{attr(_top(design, 'pos_embedding').id)}.table.weight")
        h, a = "transformer.h.{i}", f"{L}.attention"
        for ln, ours in (("ln_1", "attention_norm"), ("ln_2", "mlp_norm")):
            add(f"{h}.{ln}.weight", f"{L}.{ours}.weight")
            add(f"{h}.{ln}.bias", f"{L}.{ours}.bias")
        add(f"{h}.attn.c_attn.weight", f"{a}.q.weight", f"{a}.k.weight", f"{a}.v.weight", transpose=True)
        add(f"{h}.attn.c_attn.bias", f"{a}.q.bias", f"{a}.k.bias", f"{a}.v.bias")
        add(f"{h}.attn.c_proj.weight", f"{a}.o.weight", transpose=True)
        add(f"{h}.attn.c_proj.bias", f"{a}.o.bias")
        add(f"{h}.mlp.c_fc.weight", f"{L}.mlp.fc.weight", transpose=True)
        add(f"{h}.mlp.c_fc.bias", f"{L}.mlp.fc.bias")
        add(f"{h}.mlp.c_proj.weight", f"{L}.mlp.proj.weight", transpose=True)
        add(f"{h}.mlp.c_proj.bias", f"{L}.mlp.proj.bias")
        add("transformer.ln_f.weight", f"{N}.weight")
        add("transformer.ln_f.bias", f"{N}.bias")
    else:
        add("model.embed_tokens.weight", f"{E}.weight")
        h, a = "model.layers.{i}", f"{L}.attention"
        for child in block.children:
            if child.id in _BLOCK_NORMS:
                theirs = _BLOCK_NORMS[child.id]
                if child.id == "mlp_norm" and block.params["post_norms"]:  # Gemma: a norm each side of each half
                    theirs = "pre_feedforward_layernorm"
                for kind in _kinds(child):
                    add(f"{h}.{theirs}.{kind}", f"{L}.{child.id}.{kind}")
        kinds = ["weight"] + (["bias"] if p["qkv_bias"] else [])
        if model_type == "phi3":  # one fused projection, q then k then v; gate then up
            for kind in kinds:
                add(f"{h}.self_attn.qkv_proj.{kind}", f"{a}.q.{kind}", f"{a}.k.{kind}", f"{a}.v.{kind}")
        else:
            for which in "qkv":
                for kind in kinds:
                    add(f"{h}.self_attn.{which}_proj.{kind}", f"{a}.{which}.{kind}")
        add(f"{h}.self_attn.o_proj.weight", f"{a}.o.weight")
        if p["o_bias"]:
            add(f"{h}.self_attn.o_proj.bias", f"{a}.o.bias")
        if p["qk_norm"]:
            add(f"{h}.self_attn.q_norm.weight", f"{a}.q_norm.weight")
            add(f"{h}.self_attn.k_norm.weight", f"{a}.k_norm.weight")
        mlp_kinds = ["weight"] + (["bias"] if p["mlp_bias"] else [])
        if mlp.kind == "moe":  # the router, the experts as transformers 5 stores them (one tensor each), shared
            add(f"{h}.mlp.gate.weight", f"{L}.mlp.gate.weight")
            add(f"{h}.mlp.experts.gate_up_proj", f"{L}.mlp.gate_up_proj")
            add(f"{h}.mlp.experts.down_proj", f"{L}.mlp.down_proj")
            if mlp.params["shared"] is not None:
                for which in ("gate", "up", "down"):
                    add(f"{h}.mlp.shared_expert.{which}_proj.weight", f"{L}.mlp.shared.{which}.weight")
            if mlp.params["shared_gate"]:
                add(f"{h}.mlp.shared_expert_gate.weight", f"{L}.mlp.shared_gate.weight")
            mlp_kinds = []
        for kind in mlp_kinds:
            if model_type == "phi3":
                add(f"{h}.mlp.gate_up_proj.{kind}", f"{L}.mlp.gate.{kind}", f"{L}.mlp.up.{kind}")
            elif mlp.params["activation"] not in ("swiglu", "geglu"):  # StarCoder 2's two matrices
                add(f"{h}.mlp.c_fc.{kind}", f"{L}.mlp.fc.{kind}")
                add(f"{h}.mlp.c_proj.{kind}", f"{L}.mlp.proj.{kind}")
                continue
            else:
                add(f"{h}.mlp.gate_proj.{kind}", f"{L}.mlp.gate.{kind}")
                add(f"{h}.mlp.up_proj.{kind}", f"{L}.mlp.up.{kind}")
            add(f"{h}.mlp.down_proj.{kind}", f"{L}.mlp.down.{kind}")
        for kind in _kinds(norm):
            add(f"model.norm.{kind}", f"{N}.{kind}")
    if not tied:
        add("lm_head.weight", f"{H}.weight")
    if head.params["bias"]:
        add("lm_head.bias", f"{H}.bias")
    embedding = "transformer.wte.weight" if model_type == "gpt2" else "model.embed_tokens.weight"
    return WeightMap(model_type, _CLASSES[model_type], tuple(out), (("lm_head.weight", embedding),) if tied else ())
