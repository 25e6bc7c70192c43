"""The hybrid families read into designs: Mamba-2, Bamba and LFM2.

Their layers carry state (Mamba-2's scan, LFM2's short convolution) where a Llama's
attend, so their designs are stacks of `mixer_block`s, with `transformer_block`s where
`layer_types` (or Bamba's `attn_layer_indices`) put attention: a stack's named
`blocks`, taken in turn by `layers`. With `--documents` every mixer's `doc` reads the
documents (its state resets at each document's first token) and every attention
masks them. The ids are the presets': `embed`, `layers`, `norm`, `head`.
"""

from __future__ import annotations

import math

from typing import Any

from tensorcad.errors import TensorcadError, shown
from ..config import Reader
from ..families import DOCUMENT_MASK, reader
from ..rope import rope_of

_STACK = "nodes[1].params"
_NO_LIMIT = (0.0, float("inf"))
_INIT = "how transformers initialises untrained weights; loaded weights replace them"


def _cycle(types: list[str]) -> list[str]:
    """The shortest prefix of ``types`` that repeats to all of them."""
    for n in range(1, len(types) + 1):
        if len(types) % n == 0 and types == types[:n] * (len(types) // n):
            return types[:n]
    return types


def _ssm(r: Reader, prefix: str, heads: str, head_dim: str, state: str, groups: str, kernel: str, chunk: str,
         bias: str, conv_bias: str, expand: str, dim: int, eps: float) -> dict[str, Any]:
    """A Mamba-2 mixer's params, under the family's key names."""
    where = f"{prefix}.mixer.params"
    p = {"heads": r.int(heads, f"{where}.heads"), "head_dim": r.int(head_dim, f"{where}.head_dim"),
         "state": r.int(state, f"{where}.state"), "groups": r.int(groups, f"{where}.groups"),
         "kernel": r.int(kernel, f"{where}.kernel"), "chunk": r.int(chunk, f"{where}.chunk"),
         "bias": r.flag(bias, f"{where}.bias"), "conv_bias": r.flag(conv_bias, f"{where}.conv_bias"), "eps": eps}
    factor = r.int(expand, f"{where}.heads x head_dim (its expand x hidden_size)")
    if factor * dim != p["heads"] * p["head_dim"]:
        r.refuse(expand, f"{expand} x hidden_size is {factor * dim}, but {heads} x {head_dim} is "
                         f"{p['heads'] * p['head_dim']}: the inner width must agree")
    r.must_be("time_step_limit", ([0.0, float("inf")], _NO_LIMIT, None), "the step dt is never clamped", _NO_LIMIT)
    return p


def _design(name: str, context: int, documents: bool, positions: bool, vocab: int, dim: int, eps: float,
            blocks: dict[str, Any], layer_types: list[str], tied: bool) -> dict[str, Any]:
    cycle = _cycle(layer_types)
    inputs: dict[str, Any] = {"ids": {"role": "tokens"}, **({"documents": {"role": "documents"}} if documents else {}),
                              **({"positions": {"role": "positions"}} if positions else {})}
    stack_in: dict[str, str] = {"x": "embed", **({"doc": "documents"} if documents else {}),
                                **({"pos": "positions"} if positions else {})}
    used = {k: v for k, v in blocks.items() if k in cycle}
    return {
        "name": name,
        "context": context,
        "inputs": inputs,
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
            {"id": "layers", "kind": "stack", "in": stack_in,
             "params": {"repeat": len(layer_types), "blocks": used, "layers": cycle}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}, "params": {"eps": eps}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"},
             "params": {"out": vocab, **({"tie": "embed"} if tied else {})}},
        ],
        "output": "head",
    }


def _attention(r: Reader, documents: bool, dim: int, partial: bool = False) -> dict[str, Any]:
    """The attention layers' heads (kv_heads: heads when null), rotary (part of each head with ``partial``,
    Bamba's) and, with documents, the mask."""
    where = f"{_STACK}.blocks.attention.params.attention"
    heads = r.int("num_attention_heads", f"{where}.heads")
    kv_heads = (r.int("num_key_value_heads", f"{where}.kv_heads") if r.get("num_key_value_heads") is not None
                else heads)
    if dim % heads:
        r.refuse("num_attention_heads", f"{heads} heads do not divide hidden_size {dim}")
    attention: dict[str, Any] = {"heads": heads, "kv_heads": kv_heads, "head_dim": dim // heads, "causal": True,
                                 "rope": rope_of(r, f"{where}.rope", dim // heads, partial=partial)}
    if documents:
        attention["mask"] = DOCUMENT_MASK
    return attention


@reader("mamba2")
def mamba2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Mamba-2: pre-norm blocks of the selective scan alone (no MLP), the final RMSNorm, the head."""
    block = f"{_STACK}.blocks.ssm.params"
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("hidden_size", "nodes[0].params.dim")
    layers = _layers(r)
    eps = r.float("layer_norm_epsilon", f"{block}.eps, its mixer's eps and nodes[2].params.eps", default=1e-5)
    ssm = _ssm(r, block, "num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size",
               "use_bias", "use_conv_bias", "expand", dim, eps)
    r.must_be("hidden_act", ("silu",), "the convolution's activation is SiLU", "silu")
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    r.carry("residual_in_fp32", "the residual stream's dtype; the generated model keeps the weights' dtype "
                                "(the same at float32)")
    r.ignore("time_step_rank", "unused by Mamba-2's mixer (a Mamba-1 setting)")
    for key in ("time_step_min", "time_step_max", "time_step_floor", "rescale_prenorm_residual"):
        r.ignore(key, _INIT)
    if positions:
        raise TensorcadError("positions", "Mamba-2 reads no positions (no attention, no rotary): "
                                          "import it without --positions")
    blocks = {"ssm": {"kind": "mixer_block", "params": {"dim": dim, "norm": "rmsnorm", "eps": eps,
                                                         "mixer": {"kind": "ssm", "params": ssm}}}}
    # no max_position_embeddings: a scan holds any length; the design's context is the resolver's default
    return _design(name, 2048, documents, False, vocab, dim, eps, blocks, ["ssm"] * layers, tied)


@reader("bamba")
def bamba(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """Bamba: Mamba-2 layers with attention at `attn_layer_indices`, a SwiGLU MLP after each,
    attention rotating half of each head (transformers sets partial_rotary_factor 0.5)."""
    blocks_at = f"{_STACK}.blocks"
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("hidden_size", "nodes[0].params.dim")
    layers = _layers(r)
    hidden = r.int("intermediate_size", f"{blocks_at}.*.params.mlp.hidden")
    eps = r.float("rms_norm_eps", f"{blocks_at}.*.params.eps, the mixers' eps and nodes[2].params.eps", default=1e-5)
    context = r.int("max_position_embeddings", "context", default=262144)
    r.must_be("hidden_act", ("silu",), "the MLP's gate and the convolution's activation are SiLU", "silu")
    ssm = _ssm(r, f"{blocks_at}.mamba.params", "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups",
               "mamba_d_conv", "mamba_chunk_size", "mamba_proj_bias", "mamba_conv_bias", "mamba_expand", dim, eps)
    mlp = {"hidden": hidden, "activation": "swiglu", "bias": r.flag("mlp_bias", f"{blocks_at}.*.params.mlp.bias")}
    attention = _attention(r, documents, dim, partial=True)
    attention["bias"] = r.flag("attention_bias", f"{blocks_at}.attention.params.attention.bias")
    indices = r.map("attn_layer_indices", f"{_STACK}.layers (the attention layers)")
    # null (transformers' own default): no attention layer. 0, false, "", {} and [] were read so too, and [true] as
    # layer 1: anything else is a non-empty list of indices, or refused
    if indices is not None and (not isinstance(indices, list) or not indices or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in indices)):
        r.refuse("attn_layer_indices", f"expected layer indices in 0..{layers - 1}, got {shown(indices)}")
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    r.ignore("num_logits_to_keep", "how many logits generation computes; a forward pass computes them all")
    r.ignore("z_loss_coefficient", "a term of the training loss, not of the logits")
    blocks = {
        "mamba": {"kind": "mixer_block", "params": {"dim": dim, "norm": "rmsnorm", "eps": eps, "mlp": mlp,
                                                    "mixer": {"kind": "ssm", "params": ssm}}},
        "attention": {"kind": "transformer_block", "params": {"dim": dim, "norm": "rmsnorm", "eps": eps,
                                                              "mlp": mlp, "attention": attention}},
    }
    types = ["attention" if i in (indices or ()) else "mamba" for i in range(layers)]
    return _design(name, context, documents, positions, vocab, dim, eps, blocks, types, tied)


MAX_LAYERS = 4_096  # the design's repeats (design/schema.py): 2**31 layers took 20 s and 1.5 GB, 2**70 overflowed
MAX_WIDTH = 1 << 20  # the design's widths


def _layers(r: Reader) -> int:
    layers = r.int("num_hidden_layers", f"{_STACK}.repeat")
    if layers > MAX_LAYERS:
        r.refuse("num_hidden_layers", f"expected at most {MAX_LAYERS:,} layers, got {shown(layers, 40)}")
    return layers


def _lfm2_hidden(r: Reader, where: str) -> int:
    """LFM2's MLP width: intermediate_size, or (block_auto_adjust_ff_dim) 2/3 of it, times the
    multiplier, rounded up to block_multiple_of, as Lfm2MLP computes it."""
    hidden = r.int("intermediate_size", where)
    if not r.flag("block_auto_adjust_ff_dim", f"{where} (2/3 of intermediate_size, rounded)", default=True):
        r.ignore("block_ffn_dim_multiplier", "read only when block_auto_adjust_ff_dim is true")
        r.ignore("block_multiple_of", "read only when block_auto_adjust_ff_dim is true")
        return hidden
    hidden = int(2 * hidden / 3)
    multiplier = r.map("block_ffn_dim_multiplier", where)
    if multiplier is not None:
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not math.isfinite(multiplier) \
                or not 0 < multiplier * hidden <= MAX_WIDTH:
            # NaN, inf and 1e308 gave tracebacks (int() of them, or a width past the design's limit)
            r.refuse("block_ffn_dim_multiplier", f"expected a positive finite number (at most {MAX_WIDTH:,} over "
                                                 f"2/3 of intermediate_size) or null, got {shown(multiplier)}")
        multiple = r.int("block_multiple_of", where)
        hidden = int(multiplier * hidden)
        hidden = multiple * ((hidden + multiple - 1) // multiple)
    else:
        r.ignore("block_multiple_of", "read only with block_ffn_dim_multiplier")
    return hidden


@reader("lfm2")
def lfm2(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """LFM2: gated short convolutions with grouped-query attention where layer_types say
    full_attention (q and k RMS-normalised), a SwiGLU MLP after each, a final RMSNorm (its
    `embedding_norm`), a tied head."""
    blocks_at = f"{_STACK}.blocks"
    vocab = r.int("vocab_size", "nodes[0].params.vocab")
    dim = r.int("hidden_size", "nodes[0].params.dim")
    layers = _layers(r)
    eps = r.float("norm_eps", f"{blocks_at}.*.params.eps, the q/k norms' eps and nodes[2].params.eps", default=1e-5)
    context = r.int("max_position_embeddings", "context", default=128000)
    hidden = _lfm2_hidden(r, f"{blocks_at}.*.params.mlp.hidden")
    conv = {"kernel": r.int("conv_L_cache", f"{blocks_at}.conv.params.mixer.params.kernel"),
            "bias": r.flag("conv_bias", f"{blocks_at}.conv.params.mixer.params.bias")}
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=True)
    types = r.map("layer_types", f"{_STACK}.layers")
    indices = r.map("full_attn_idxs", f"{_STACK}.layers (older files' name for the attention layers)")
    if types is None:
        types = ["full_attention" if indices is None or i in indices else "conv" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"conv", "full_attention"}:
        r.refuse("layer_types", f"expected {layers} layer types, each conv or full_attention")
    if indices is not None and indices != [i for i, t in enumerate(types) if t == "full_attention"]:
        r.refuse("full_attn_idxs", "disagrees with layer_types")
    mlp = {"hidden": hidden, "activation": "swiglu"}
    attention = _attention(r, documents, dim)
    attention["qk_norm"] = {"eps": eps}
    blocks = {
        "conv": {"kind": "mixer_block", "params": {"dim": dim, "norm": "rmsnorm", "eps": eps, "mlp": mlp,
                                                   "mixer": {"kind": "short_conv", "params": conv}}},
        "attention": {"kind": "transformer_block", "params": {"dim": dim, "norm": "rmsnorm", "eps": eps,
                                                              "mlp": mlp, "attention": attention}},
    }
    names = ["attention" if t == "full_attention" else "conv" for t in types]
    return _design(name, context, documents, positions, vocab, dim, eps, blocks, names, tied)

