"""More decoder families read into designs: Gemma 3, OLMo 2, Granite, StarCoder 2, SmolLM3, Cohere, StableLM.

Each is Llama's skeleton (an embedding, a stack of attention-and-MLP blocks, a final
norm, a head) with what makes it itself said in the design language:

- ``gemma3_text``: Gemma 2's block, q and k normed (``1 + weight``), and a rotary base
  for each layer type (local layers 10,000, global ones 1,000,000, maybe scaled):
  ``stack.ropes`` beside ``stack.windows``;
- ``olmo2``: norms after each half only (``pre_norms: false``), q and k normed over
  the whole projection (``qk_norm.scope: all``);
- ``granite``: multipliers on the embedding, the scores, each residual and the logits;
- ``starcoder2``: LayerNorms, a two-matrix tanh-GELU MLP, biases, a tied head;
- ``smollm3``: every ``no_rope_layer_interval``-th layer without rope (``stack.ropes`` null);
- ``cohere``: attention and MLP side by side on one bias-free LayerNorm, rotary pairs
  side by side, scaled logits;
- ``stablelm``: LayerNorms, a quarter of each head rotated (``rope.rotary_dim``).

Each reader takes every key its config class writes; what the language cannot say is
refused in one line naming the key (StableLM's per-head q/k LayerNorms, Cohere's q/k norm).
"""

from __future__ import annotations

from typing import Any

from ..errors import shown
from .config import _DROPOUT, Reader
from .families import DOCUMENT_MASK, _inputs, reader, shortest_cycle
from .rope import rope_from, rope_of

_BLOCK = "nodes[1].params.block.params"
_ATTN = f"{_BLOCK}.attention"


def _shapes(r: Reader) -> dict[str, int]:
    """The numbers every Llama-shaped config has: vocab, width, MLP width, layers, heads, head width."""
    out = {"vocab": r.int("vocab_size", "nodes[0].params.vocab"), "dim": r.int("hidden_size", "nodes[0].params.dim"),
           "hidden": r.int("intermediate_size", f"{_BLOCK}.mlp.hidden"),
           "layers": r.int("num_hidden_layers", "nodes[1].params.repeat"),
           "heads": r.int("num_attention_heads", f"{_ATTN}.heads")}
    if r.get("num_key_value_heads") is None:
        r.map("num_key_value_heads", f"{_ATTN}.kv_heads (num_attention_heads when null)")
        out["kv_heads"] = out["heads"]
    else:
        out["kv_heads"] = r.int("num_key_value_heads", f"{_ATTN}.kv_heads")
    if r.get("head_dim") is not None:
        out["head_dim"] = r.int("head_dim", f"{_ATTN}.head_dim")
    else:
        r.map("head_dim", f"{_ATTN}.head_dim (hidden_size / num_attention_heads when null)")
        if out["dim"] % out["heads"]:
            r.refuse("num_attention_heads", f"{out['heads']} heads do not divide hidden_size {out['dim']}")
        out["head_dim"] = out["dim"] // out["heads"]
    return out


def _design(name: str, context: int, documents: bool, positions: bool, shapes: dict[str, int], block: dict,
            norm: dict[str, Any], *, embed: dict | None = None, head: dict | None = None,
            stack: dict | None = None) -> dict[str, Any]:
    """The design: embed, layers, norm, head (the presets' ids), the documents and positions wired in."""
    if documents:
        block["attention"]["mask"] = DOCUMENT_MASK
    stack_in = {"x": "embed", **({"doc": "documents"} if documents else {}), **({"pos": "positions"} if positions else {})}
    return {
        "name": name, "context": context, "inputs": _inputs(documents, positions),
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"},
             "params": {"vocab": shapes["vocab"], "dim": shapes["dim"], **(embed or {})}},
            {"id": "layers", "kind": "stack", "in": stack_in,
             "params": {"repeat": shapes["layers"], **(stack or {}),
                        "block": {"kind": "transformer_block", "params": block}}},
            {"id": "norm", "kind": norm["kind"], "in": {"x": "layers"}, "params": norm["params"]},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": shapes["vocab"], **(head or {})}},
        ],
        "output": "head",
    }


def _attention(shapes: dict[str, int], **more: Any) -> dict[str, Any]:
    return {"heads": shapes["heads"], "kv_heads": shapes["kv_heads"], "head_dim": shapes["head_dim"], "causal": True,
            **more}


def _silu(r: Reader) -> None:
    r.must_be("hidden_act", ("silu",), "the design's swiglu gates with SiLU", "silu")


def _positive(r: Reader, key: str, where: str, default: float) -> float:
    value = r.float(key, where, default)
    if not value > 0:
        r.refuse(key, f"expected a positive number, got {shown(value)}")
    return value


@reader("olmo2")
def olmo2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """OLMo 2: an RMSNorm after each half (none before), q and k normed over the whole projection."""
    shapes = _shapes(r)
    _silu(r)
    context = r.int("max_position_embeddings", "context", default=2048)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps", default=1e-5)
    attention = _attention(shapes, bias=r.flag("attention_bias", f"{_ATTN}.bias"),
                           qk_norm={"eps": eps, "scope": "all"}, rope=rope_of(r, f"{_ATTN}.rope", shapes["head_dim"]))
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    block = {"dim": shapes["dim"], "norm": "rmsnorm", "eps": eps, "pre_norms": False, "post_norms": True,
             "mlp": {"hidden": shapes["hidden"], "activation": "swiglu"}, "attention": attention}
    return _design(name, context, documents, positions, shapes, block, {"kind": "rmsnorm", "params": {"eps": eps}},
                   head={"tie": "embed"} if tied else None)


@reader("granite")
def granite(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Granite: Llama's, with multipliers on the embedding, the scores, each residual and the logits."""
    shapes = _shapes(r)
    _silu(r)
    context = r.int("max_position_embeddings", "context", default=2048)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps", default=1e-6)
    attention = _attention(shapes, bias=r.flag("attention_bias", f"{_ATTN}.bias"),
                           scale=_positive(r, "attention_multiplier", f"{_ATTN}.scale", 1.0),
                           rope=rope_of(r, f"{_ATTN}.rope", shapes["head_dim"]))
    block = {"dim": shapes["dim"], "norm": "rmsnorm", "eps": eps,
             "residual_scale": _positive(r, "residual_multiplier", f"{_BLOCK}.residual_scale", 1.0),
             "mlp": {"hidden": shapes["hidden"], "activation": "swiglu", "bias": r.flag("mlp_bias", f"{_BLOCK}.mlp.bias")},
             "attention": attention}
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    logits = _positive(r, "logits_scaling", "nodes[3].params.scale (its inverse)", 1.0)
    return _design(name, context, documents, positions, shapes, block, {"kind": "rmsnorm", "params": {"eps": eps}},
                   embed={"scale": _positive(r, "embedding_multiplier", "nodes[0].params.scale", 1.0)},
                   head={**({"tie": "embed"} if tied else {}), "scale": 1.0 / logits})


@reader("starcoder2")
def starcoder2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """StarCoder 2: LayerNorms, a two-matrix tanh-GELU MLP, biases everywhere (use_bias), a tied head."""
    shapes = _shapes(r)
    r.must_be("hidden_act", ("gelu_pytorch_tanh",), "the design's gelu_tanh MLP", "gelu_pytorch_tanh")
    context = r.int("max_position_embeddings", "context", default=4096)
    eps = r.float("norm_epsilon", f"{_BLOCK}.eps", default=1e-5)
    bias = r.flag("use_bias", f"{_ATTN}.bias and {_BLOCK}.mlp.bias", default=True)
    attention = _attention(shapes, bias=bias, rope=rope_of(r, f"{_ATTN}.rope", shapes["head_dim"]))
    window = r.map("sliding_window", f"{_ATTN}.window")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            r.refuse("sliding_window", f"expected a positive integer or null, got {shown(window)}")
        attention["window"] = window
    for key in ("residual_dropout", "embedding_dropout"):
        r.carry(key, _DROPOUT)
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    block = {"dim": shapes["dim"], "norm": "layernorm", "eps": eps, "attention": attention,
             "mlp": {"hidden": shapes["hidden"], "activation": "gelu_tanh", "bias": bias}}
    return _design(name, context, documents, positions, shapes, block, {"kind": "layernorm", "params": {"eps": eps}},
                   head={"tie": "embed"} if tied else None)


@reader("smollm3")
def smollm3(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """SmolLM3: Llama's, with some layers (no_rope_layers: 0) attending without rope."""
    shapes = _shapes(r)
    _silu(r)
    layers = shapes["layers"]
    context = r.int("max_position_embeddings", "context", default=32768)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps", default=1e-6)
    rope = rope_of(r, "nodes[1].params.ropes", shapes["head_dim"])
    uses = r.map("no_rope_layers", "nodes[1].params.ropes (null for the layers marked 0)")
    r.ignore("no_rope_layer_interval", "how transformers wrote no_rope_layers, which says each layer")
    if not isinstance(uses, list) or len(uses) != layers or not set(uses) <= {0, 1}:
        r.refuse("no_rope_layers", f"expected a list of {layers} zeros and ones")
    slide = r.flag("use_sliding_window", "the window of the layer_types marked sliding_attention")
    window = r.map("sliding_window", f"{_ATTN}.window of the sliding layers")
    types = r.map("layer_types", "the sliding layers, when use_sliding_window")
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"full_attention", "sliding_attention"}:
        r.refuse("layer_types", f"expected a list of {layers} full_attention or sliding_attention")
    if slide and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        r.refuse("sliding_window", f"sliding layers need a positive window, got {shown(window)}")
    per_layer = [(window if slide and t == "sliding_attention" else None, rope if u else None)
                 for t, u in zip(types, uses)]
    cycle = shortest_cycle(per_layer)
    if cycle is None:
        r.refuse("no_rope_layers", "no cycle of at most 16 layers repeats to these; a stack takes at most that many "
                                   "blocks in turn")
    attention = _attention(shapes, bias=r.flag("attention_bias", f"{_ATTN}.bias"))
    stack: dict[str, Any] = {"ropes": [rope for _, rope in cycle]}
    if any(w is not None for w, _ in cycle):
        stack["windows"] = [w for w, _ in cycle]
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    block = {"dim": shapes["dim"], "norm": "rmsnorm", "eps": eps, "attention": attention,
             "mlp": {"hidden": shapes["hidden"], "activation": "swiglu", "bias": r.flag("mlp_bias", f"{_BLOCK}.mlp.bias")}}
    return _design(name, context, documents, positions, shapes, block, {"kind": "rmsnorm", "params": {"eps": eps}},
                   head={"tie": "embed"} if tied else None, stack=stack)


@reader("cohere")
def cohere(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Cohere (Command R): attention and MLP side by side on one bias-free LayerNorm, rotary pairs side by side,
    logits scaled by logit_scale, a tied head."""
    shapes = _shapes(r)
    _silu(r)
    context = r.int("max_position_embeddings", "context", default=8192)
    eps = r.float("layer_norm_eps", f"{_BLOCK}.eps", default=1e-5)
    r.must_be("use_qk_norm", (False,), "Cohere's q/k LayerNorms (one scale per head) are not in the design language",
              False)
    rope = {**rope_of(r, f"{_ATTN}.rope", shapes["head_dim"]), "interleaved": True}
    attention = _attention(shapes, bias=r.flag("attention_bias", f"{_ATTN}.bias"), rope=rope)
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    block = {"dim": shapes["dim"], "norm": "layernorm", "eps": eps, "norm_bias": False, "parallel": True,
             "mlp": {"hidden": shapes["hidden"], "activation": "swiglu"}, "attention": attention}
    return _design(name, context, documents, positions, shapes, block,
                   {"kind": "layernorm", "params": {"eps": eps, "bias": False}},
                   head={**({"tie": "embed"} if tied else {}),
                         "scale": _positive(r, "logit_scale", "nodes[3].params.scale", 0.0625)})


@reader("stablelm")
def stablelm(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """StableLM: LayerNorms, SwiGLU, q/k/v biased or not (use_qkv_bias), a part of each head rotated."""
    shapes = _shapes(r)
    _silu(r)
    context = r.int("max_position_embeddings", "context", default=4096)
    eps = r.float("layer_norm_eps", f"{_BLOCK}.eps", default=1e-5)
    r.must_be("qk_layernorm", (False,), "StableLM's per-head q/k LayerNorms are not in the design language", False)
    parallel = r.flag("use_parallel_residual", f"{_BLOCK}.parallel")
    r.carry("hidden_dropout", _DROPOUT)
    attention = _attention(shapes, qkv_bias=r.flag("use_qkv_bias", f"{_ATTN}.qkv_bias"),
                           rope=rope_of(r, f"{_ATTN}.rope", shapes["head_dim"], partial=True))
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    block = {"dim": shapes["dim"], "norm": "layernorm", "eps": eps, "parallel": parallel,
             "mlp": {"hidden": shapes["hidden"], "activation": "swiglu"}, "attention": attention}
    return _design(name, context, documents, positions, shapes, block, {"kind": "layernorm", "params": {"eps": eps}},
                   head={"tie": "embed"} if tied else None)


@reader("gemma3_text")
def gemma3_text(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Gemma 3's text model: Gemma 2's block with q and k normed (1 + weight), local and global layers in turn,
    each kind with its own rotary base (and scaling)."""
    shapes = _shapes(r)
    gate = "Gemma 3's MLP gates with tanh-approximated GELU (the design's geglu)"
    r.must_be("hidden_activation", ("gelu_pytorch_tanh",), gate, "gelu_pytorch_tanh")
    if r.has("hidden_act"):
        r.must_be("hidden_act", ("gelu_pytorch_tanh",), gate)
    context = r.int("max_position_embeddings", "context", default=131072)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps and nodes[2].params.eps", default=1e-6)
    scalar = _positive(r, "query_pre_attn_scalar", f"{_ATTN}.scale (its -1/2 power)", shapes["head_dim"])
    r.must_be("use_bidirectional_attention", (None, False), "a causal LM attends to earlier keys only", None)
    for key in ("_sliding_window_pattern", "sliding_window_pattern"):
        r.ignore(key, "how transformers wrote layer_types, which says each layer")
    r.ignore("cache_implementation", "which KV cache generation uses; the logits are the same")
    cycle = _gemma3_layers(r, shapes)
    attention = _attention(shapes, scale=scalar ** -0.5, bias=r.flag("attention_bias", f"{_ATTN}.bias"),
                           qk_norm={"eps": eps, "offset": 1.0})
    cap = r.map("attn_logit_softcapping", f"{_ATTN}.score (cap x tanh(score / cap))")
    final_cap = r.map("final_logit_softcapping", "nodes[3].params.softcap")
    for key, value in (("attn_logit_softcapping", cap), ("final_logit_softcapping", final_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            r.refuse(key, f"expected a positive number or null, got {shown(value)}")
    if cap is not None:
        attention["score"] = f"tanh(score * {1.0 / cap!r}) * {float(cap)!r}"
    stack: dict[str, Any] = {"ropes": [rope for _, rope in cycle]}
    if any(w is not None for w, _ in cycle):
        stack["windows"] = [w for w, _ in cycle]
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    block = {"dim": shapes["dim"], "norm": "rmsnorm", "eps": eps, "norm_offset": 1.0, "post_norms": True,
             "mlp": {"hidden": shapes["hidden"], "activation": "geglu"}, "attention": attention}
    return _design(name, context, documents, positions, shapes, block,
                   {"kind": "rmsnorm", "params": {"eps": eps, "offset": 1.0}},
                   embed={"scale": shapes["dim"] ** 0.5}, stack=stack,
                   head={**({"tie": "embed"} if tied else {}),
                         **({"softcap": float(final_cap)} if final_cap is not None else {})})


_GEMMA3_THETA = {"sliding_attention": 10000.0, "full_attention": 1000000.0}  # transformers' defaults


def _gemma3_layers(r: Reader, shapes: dict[str, int]) -> list:
    """(window, rope) of each block taken in turn, from layer_types and the rope of each layer type."""
    layers = shapes["layers"]
    types = r.map("layer_types", "nodes[1].params.windows and ropes, taken in turn")
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_GEMMA3_THETA):
        r.refuse("layer_types", f"expected a list of {layers} sliding_attention or full_attention")
    window = r.map("sliding_window", "the window of the layers marked sliding_attention")
    if "sliding_attention" in types and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        r.refuse("sliding_window", f"sliding layers need a positive window, got {shown(window)}")
    parameters = r.map("rope_parameters", "nodes[1].params.ropes, one a layer type")
    old = r.map("rope_scaling", "the global layers' rope scaling (older files)")
    theta = r.float("rope_theta", "the global layers' rotary base (older files)") if r.has("rope_theta") else None
    local = r.float("rope_local_base_freq", "the local layers' rotary base (older files)") if r.has(
        "rope_local_base_freq") else None
    if parameters is None:
        parameters = {"full_attention": {**(old or {}), **({"rope_theta": theta} if theta else {})},
                      "sliding_attention": {"rope_type": "default", **({"rope_theta": local} if local else {})}}
    if not isinstance(parameters, dict) or not set(parameters) <= set(_GEMMA3_THETA):
        r.refuse("rope_parameters", "expected one rope object for each of sliding_attention and full_attention")
    ropes = {}
    for kind in set(types):
        given = parameters.get(kind) or {}
        if not isinstance(given, dict):
            r.refuse(f"rope_parameters.{kind}", f"expected an object, got {type(given).__name__}")
        given = dict(given)
        if "type" in given:
            given.setdefault("rope_type", given.pop("type"))
        ropes[kind] = rope_from(r, given, f"rope_parameters.{kind}", shapes["head_dim"], theta=_GEMMA3_THETA[kind])
    per_layer = [(window if t == "sliding_attention" else None, ropes[t]) for t in types]
    cycle = shortest_cycle(per_layer)
    if cycle is None:
        r.refuse("layer_types", "no cycle of at most 16 layers repeats to these; a stack takes at most that many "
                                "blocks in turn")
    return cycle
