"""Each supported `model_type` read into a design: Llama's family, Gemma 2 and GPT-2 here; the
other decoders (`decoders`) and the hybrids Mamba-2, Bamba and LFM2 (`hybrid_families`) register
their readers through `reader`.

A family takes every key its config class writes (`transformers.<X>Config().to_dict()`)
and says where it goes; `Reader.finish` refuses the rest. The designs use the ids the
shipped presets use (`embed`, `layers`, `norm`, `head`; GPT-2's `wte`, `wpe`, `ln_f`,
`lm_head`), so an imported Llama 3 8B is the `llama-3-8b` preset node for node.
"""

from __future__ import annotations

from typing import Any

from ..errors import TensorcadError, shown
from .config import Reader
from .rope import rope_of

DOCUMENT_MASK = "doc(b, q) == doc(b, kv)"
_BLOCK = "nodes[1].params.block.params"
_ATTN = f"{_BLOCK}.attention"

# pre-norm RMSNorm blocks, SwiGLU and rotary GQA, differing in biases, q/k norms and windows
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "phi3")
SUPPORTED = LLAMA_LIKE + ("gemma2", "gpt2")  # read here; `READERS` holds the rest
# Families transformers has that the design language cannot say yet, with what it lacks.
NOT_YET = {
    "gemma3": "a vision-language model (its vision tower is not in the design language): import its text_config, "
              "model_type gemma3_text",
    # issue 44: the moe kind says their experts, not their attention
    "deepseek_v3": "n_group / topk_group: routing limited to the best expert groups is not in the design language; "
                   "its attention is (gqa_attention with latent, the deepseek-v3 preset) and its experts are (moe "
                   "with router sigmoid, router_bias, routed_scale)",
    "gpt_oss": "attention sinks (a learned per-head logit each query's softmax also normalises over) are not in "
               "the design language; its experts are (moe with bias true)",
}
# Readers other modules register (`reader`): model_type -> the function reading it.
READERS: dict[str, Any] = {}


def reader(*model_types: str):
    """Register a family's reader for these model types (as `rules.rule` registers a rule)."""
    def register(fn):
        for model_type in model_types:
            READERS[model_type] = fn
        return fn

    return register


def _rope(r: Reader, head_dim: int, context: int, partial: bool = False) -> tuple[dict[str, Any], int]:
    """(the attention's rope, the design's context): a dynamic scaling is meant to reach factor x the context."""
    rope = rope_of(r, f"{_ATTN}.rope", head_dim, partial=partial)
    scaling = rope.get("scaling")
    if scaling is not None and scaling["type"] == "dynamic":
        context = int(context * scaling["factor"])
    return rope, context


MAX_CYCLE = 16  # the most blocks a stack takes in turn (catalog: stack.windows)
MAX_WINDOW = 2**31  # a sliding window past any context a config states (Qwen2.5 writes 131,072)


def _layer_windows(r: Reader, layers: int, window) -> list | None:
    """Each layer's window from `layer_types`, as the shortest cycle that repeats to all of them."""
    types = r.map("layer_types", "nodes[1].params.windows, or the attention's window when every layer has the same")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
        r.refuse("layer_types", f"expected a list of {layers} layer types")
    kinds = set(types)
    if not kinds <= {"full_attention", "sliding_attention"}:
        r.refuse("layer_types", f"{sorted(kinds)}: only full_attention and sliding_attention are known")
    if "sliding_attention" in kinds and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        r.refuse("sliding_window", f"sliding layers need a positive window, got {shown(window)}")
    per_layer = [window if t == "sliding_attention" else None for t in types]
    cycle = shortest_cycle(per_layer)
    if cycle is not None:
        return cycle
    r.refuse("layer_types", f"no cycle of at most {MAX_CYCLE} layers repeats to these {layers}; "
                            "a stack takes at most that many blocks in turn")


def shortest_cycle(per_layer: list) -> list | None:
    """The fewest blocks that, taken in turn, give every layer its own (the last turn may be cut short)."""
    for n in range(1, min(len(per_layer), MAX_CYCLE) + 1):
        if per_layer == [per_layer[i % n] for i in range(len(per_layer))]:
            return per_layer[:n]
    return None


def _windows(r: Reader, model_type: str, layers: int) -> list | None:
    """The windows a stack takes in turn ([w] for one window everywhere), or None for none."""
    if model_type in ("qwen2", "qwen3", "gemma2"):
        if model_type != "gemma2":
            r.flag("use_sliding_window", "nodes[1] windows (transformers writes it into layer_types)")
            r.ignore("max_window_layers", "which layers slide; transformers already wrote it into layer_types")
        window = r.map("sliding_window", "the window of the layer_types marked sliding_attention")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                                   or not 1 <= window <= MAX_WINDOW):
            # Checked even where no layer slides: a value no model could use is a broken config, not a default.
            r.refuse("sliding_window", f"expected null or an integer in 1..{MAX_WINDOW:,}, got {shown(window)}")
        cycle = _layer_windows(r, layers, window)
        if cycle is None:  # an older file without layer_types
            if model_type == "gemma2":
                cycle = [window, None]
            elif r.get("use_sliding_window") and r.get("max_window_layers", 0) == 0:
                cycle = [window]  # layers from max_window_layers on slide: all of them
            elif r.get("use_sliding_window") and r.get("max_window_layers", 0) < layers:
                r.refuse("max_window_layers", "full layers, then sliding ones: not a cycle a stack can repeat")
        return None if cycle is None or all(w is None for w in cycle) else cycle
    if model_type in ("mistral", "phi3"):
        window = r.map("sliding_window", f"{_ATTN}.window")
        return None if window is None else [window]
    return None


def _place_windows(r: Reader, cycle: list | None, attention: dict, stack: dict) -> None:
    if cycle is None:
        return
    if len(cycle) == 1:
        if isinstance(cycle[0], bool) or not isinstance(cycle[0], int) or cycle[0] < 1:
            r.refuse("sliding_window", f"expected a positive integer or null, got {shown(cycle[0])}")
        attention["window"] = cycle[0]
    else:
        stack["windows"] = cycle


def _inputs(documents: bool, positions: bool) -> dict[str, Any]:
    inputs: dict[str, Any] = {"ids": {"role": "tokens"}}
    if documents:
        inputs["documents"] = {"role": "documents"}
    if positions:
        inputs["positions"] = {"role": "positions"}
    return inputs


def llama_like(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Llama, Mistral, Qwen2, Qwen3 and Phi-3: pre-norm RMSNorm blocks, SwiGLU, rotary GQA."""
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("hidden_size", "nodes[0].params.dim")
    hidden = r.int("intermediate_size", f"{_BLOCK}.mlp.hidden")
    layers = r.int("num_hidden_layers", "nodes[1].params.repeat")
    heads = r.int("num_attention_heads", f"{_ATTN}.heads")
    if r.get("num_key_value_heads") is None:
        r.map("num_key_value_heads", f"{_ATTN}.kv_heads (num_attention_heads when null)")
        kv_heads = heads
    else:
        kv_heads = r.int("num_key_value_heads", f"{_ATTN}.kv_heads")
    head_dim = r.get("head_dim")
    if head_dim is not None:
        head_dim = r.int("head_dim", f"{_ATTN}.head_dim")
    else:
        r.map("head_dim", f"{_ATTN}.head_dim (hidden_size / num_attention_heads when null)")
        if dim % heads:
            r.refuse("num_attention_heads", f"{heads} heads do not divide hidden_size {dim}; give head_dim")
        head_dim = dim // heads
    r.must_be("hidden_act", ("silu",), "the design's swiglu gates with SiLU", "silu")
    context = r.int("max_position_embeddings", "context", default=2048)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps and nodes[2].params.eps", default=1e-6)
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    rope, context = _rope(r, head_dim, context, partial=model_type == "phi3")  # Phi-3 turns part of a head
    cycle = _windows(r, model_type, layers)

    attention: dict[str, Any] = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "causal": True}
    stack_params: dict[str, Any] = {"repeat": layers}
    _place_windows(r, cycle, attention, stack_params)
    attention["rope"] = rope
    mlp: dict[str, Any] = {"hidden": hidden, "activation": "swiglu"}
    if model_type == "llama":
        attention["bias"] = r.flag("attention_bias", f"{_ATTN}.bias")
        mlp["bias"] = r.flag("mlp_bias", f"{_BLOCK}.mlp.bias")
    elif model_type == "qwen2":
        attention["qkv_bias"] = True  # Qwen2Attention: q, k, v biased, o not (no config key says so)
    elif model_type == "qwen3":
        attention["bias"] = r.flag("attention_bias", f"{_ATTN}.bias")
        attention["qk_norm"] = {"eps": eps}
    elif model_type == "phi3":
        r.must_be("attention_bias", (False,), "Phi-3's projections have no biases", False)
    if documents:
        attention["mask"] = DOCUMENT_MASK
    stack_in: dict[str, str] = {"x": "embed"}
    if documents:
        stack_in["doc"] = "documents"
    if positions:
        stack_in["pos"] = "positions"
    head: dict[str, Any] = {"out": vocab}
    if tied:
        head["tie"] = "embed"
    block = {"dim": dim, "norm": "rmsnorm", "eps": eps, "mlp": mlp, "attention": attention}
    return {
        "name": name,
        "context": context,
        "inputs": _inputs(documents, positions),
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
            {"id": "layers", "kind": "stack", "in": stack_in,
             "params": {**stack_params, "block": {"kind": "transformer_block", "params": block}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}, "params": {"eps": eps}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": head},
        ],
        "output": "head",
    }


def gemma2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Gemma 2: Llama's skeleton with a sqrt(dim)-scaled embedding, (1 + weight) RMSNorms after
    each half as well as before, a GeGLU MLP, soft-capped scores and logits, and local
    (sliding) and global layers in turn."""
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("hidden_size", "nodes[0].params.dim")
    hidden = r.int("intermediate_size", f"{_BLOCK}.mlp.hidden")
    layers = r.int("num_hidden_layers", "nodes[1].params.repeat")
    heads = r.int("num_attention_heads", f"{_ATTN}.heads")
    kv_heads = r.int("num_key_value_heads", f"{_ATTN}.kv_heads")
    head_dim = r.int("head_dim", f"{_ATTN}.head_dim")
    gate = "Gemma 2's MLP gates with tanh-approximated GELU (the design's geglu)"
    r.must_be("hidden_activation", ("gelu_pytorch_tanh",), gate, "gelu_pytorch_tanh")
    if r.has("hidden_act"):  # older files wrote both
        r.must_be("hidden_act", ("gelu_pytorch_tanh",), gate)
    context = r.int("max_position_embeddings", "context", default=8192)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps and nodes[2].params.eps", default=1e-6)
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    rope, context = _rope(r, head_dim, context)
    cycle = _windows(r, model_type, layers)
    scalar = r.float("query_pre_attn_scalar", f"{_ATTN}.scale (its -1/2 power)", default=head_dim)
    if scalar <= 0:
        r.refuse("query_pre_attn_scalar", f"{scalar} is not positive")
    cap = r.map("attn_logit_softcapping", f"{_ATTN}.score (cap x tanh(score / cap))")
    final_cap = r.map("final_logit_softcapping", "nodes[3].params.softcap")
    for key, value in (("attn_logit_softcapping", cap), ("final_logit_softcapping", final_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            r.refuse(key, f"expected a positive number or null, got {shown(value)}")
    r.must_be("use_bidirectional_attention", (None, False), "a causal LM attends to earlier keys only", None)
    r.ignore("cache_implementation", "which KV cache generation uses; the logits are the same")
    attention: dict[str, Any] = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "causal": True,
                                 "scale": scalar ** -0.5, "rope": rope,
                                 "bias": r.flag("attention_bias", f"{_ATTN}.bias")}
    if cap is not None:
        attention["score"] = f"tanh(score * {1.0 / cap!r}) * {float(cap)!r}"
    if documents:
        attention["mask"] = DOCUMENT_MASK
    stack_params: dict[str, Any] = {"repeat": layers}
    _place_windows(r, cycle, attention, stack_params)
    stack_in: dict[str, str] = {"x": "embed", **({"doc": "documents"} if documents else {}),
                                **({"pos": "positions"} if positions else {})}
    head: dict[str, Any] = {"out": vocab, **({"tie": "embed"} if tied else {}),
                            **({"softcap": float(final_cap)} if final_cap is not None else {})}
    block = {"dim": dim, "norm": "rmsnorm", "eps": eps, "norm_offset": 1.0, "post_norms": True,
             "mlp": {"hidden": hidden, "activation": "geglu"}, "attention": attention}
    return {
        "name": name,
        "context": context,
        "inputs": _inputs(documents, positions),
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"},
             "params": {"vocab": vocab, "dim": dim, "scale": dim ** 0.5}},
            {"id": "layers", "kind": "stack", "in": stack_in,
             "params": {**stack_params, "block": {"kind": "transformer_block", "params": block}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}, "params": {"eps": eps, "offset": 1.0}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": head},
        ],
        "output": "head",
    }


_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """GPT-2: learned positions, LayerNorm, a GELU MLP, biases everywhere, tied head."""
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("n_embd", "nodes[0].params.dim")
    context = r.int("n_positions", "context and nodes[1].params.context")
    layers = r.int("n_layer", "nodes[2].params.repeat")
    if r.has("n_ctx"):  # older files' name for n_positions
        r.must_be("n_ctx", (context,), "it is the older name of n_positions, and must agree with it")
    heads = r.int("n_head", f"nodes[2].params.block.params.attention.heads")
    if dim % heads:
        r.refuse("n_head", f"{heads} heads do not divide n_embd {dim}")
    inner = r.get("n_inner")
    if inner is None:
        r.map("n_inner", "nodes[2].params.block.params.mlp.hidden (4 x n_embd when null)")
        inner = 4 * dim
    else:
        inner = r.int("n_inner", "nodes[2].params.block.params.mlp.hidden")
    activation = r.map("activation_function", "nodes[2].params.block.params.mlp.activation", "gelu_new")
    if not isinstance(activation, str) or activation not in _GPT2_ACTIVATIONS:
        r.refuse("activation_function", f"{shown(activation)} is not one of {', '.join(_GPT2_ACTIVATIONS)}")
    eps = r.float("layer_norm_epsilon", "nodes[2].params.block.params.eps and nodes[3].params.eps", 1e-5)
    tied = r.flag("tie_word_embeddings", "nodes[4].params.tie", default=True)
    r.must_be("scale_attn_weights", (True,), "scores are scaled by 1/sqrt(head_dim)", True)
    r.must_be("scale_attn_by_inverse_layer_idx", (False,), "a per-layer score scale is not in the design language", False)
    r.must_be("reorder_and_upcast_attn", (False,), "the design computes attention one way", False)
    for key in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels"):
        r.ignore(key, "the sequence-summary head of GPT2DoubleHeadsModel, not part of a causal LM")
    attention: dict[str, Any] = {"heads": heads, "causal": True, "bias": True}
    if documents:
        attention["mask"] = DOCUMENT_MASK
    wpe_in = {"x": "wte", **({"pos": "positions"} if positions else {})}
    stack_in = {"x": "wpe", **({"doc": "documents"} if documents else {})}
    head: dict[str, Any] = {"out": vocab}
    if tied:
        head["tie"] = "wte"
    return {
        "name": name,
        "context": context,
        "inputs": _inputs(documents, positions),
        "nodes": [
            {"id": "wte", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
            {"id": "wpe", "kind": "pos_embedding", "in": wpe_in, "params": {"context": context}},
            {"id": "layers", "kind": "stack", "in": stack_in, "params": {"repeat": layers, "block": {
                "kind": "transformer_block", "params": {
                    "dim": dim, "norm": "layernorm", "eps": eps,
                    "mlp": {"hidden": inner, "activation": _GPT2_ACTIVATIONS[activation], "bias": True},
                    "attention": attention}}}},
            {"id": "ln_f", "kind": "layernorm", "in": {"x": "layers"}, "params": {"eps": eps}},
            {"id": "lm_head", "kind": "linear", "in": {"x": "ln_f"}, "params": head},
        ],
        "output": "lm_head",
    }


def family(model_type: Any, where: str):
    if not isinstance(model_type, str):
        raise TensorcadError(where, f"model_type must be a string, got {shown(model_type)}")
    if model_type in NOT_YET:
        raise TensorcadError(where, f"{shown(model_type)}: {NOT_YET[model_type]}")
    if model_type == "gpt2":
        return gpt2
    if model_type == "gemma2":
        return gemma2
    if model_type in LLAMA_LIKE:
        return llama_like
    if model_type in READERS:  # registered: decoders, hybrid_families (layers that carry state)
        return READERS[model_type]
    raise TensorcadError(where, f"unknown model_type {shown(model_type)} (supported: "
                                f"{', '.join(SUPPORTED + tuple(READERS))})")
