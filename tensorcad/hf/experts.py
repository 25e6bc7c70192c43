"""The mixture-of-experts families read into designs (issue 44): Qwen3-MoE, Qwen2-MoE, Mixtral and OLMoE.

Each is Llama's skeleton with a ``moe`` in place of every block's MLP, dropless as
transformers computes it (its experts take every token routed to them):

- ``qwen3_moe``: softmax router, top-k normalised by ``norm_topk_prob``, q and k
  normed per head (Qwen3's);
- ``qwen2_moe``: Qwen2's biased q, k, v, and a shared expert every token runs
  through, its output gated by ``sigmoid(x . g)`` (``shared_expert_gate``);
- ``mixtral``: softmax over the top-k logits (normalised), maybe a window;
- ``olmoe``: q and k normed over the whole projection (OLMo's), top-k not normalised.

What the language cannot say is refused by its key: dense layers among the routed
ones (``mlp_only_layers``, ``decoder_sparse_step``), Mixtral's router jitter,
OLMoE's clipped q, k and v. The router's auxiliary loss is the design's ``aux_loss``
where the config asks for router logits (``output_router_logits``), 0 where not.
"""

from __future__ import annotations

from typing import Any

from ..errors import shown
from .config import _DROPOUT, Reader
from .decoders import _attention, _design, _silu
from .families import _layer_windows, _place_windows, _windows, reader
from .rope import rope_of

_BLOCK = "nodes[1].params.block.params"
_ATTN = f"{_BLOCK}.attention"
_MLP = f"{_BLOCK}.mlp"
# the dense families whose windows each reads as (families._windows)
_WINDOWS_AS = {"qwen3_moe": "qwen3", "qwen2_moe": "qwen2", "mixtral": "mistral", "olmoe": "olmoe"}


def _shapes(r: Reader, model_type: str) -> dict[str, int]:
    """Llama's numbers, the experts' width in place of the MLP's."""
    out = {"vocab": r.int("vocab_size", "nodes[0].params.vocab"), "dim": r.int("hidden_size", "nodes[0].params.dim"),
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
    if model_type in ("qwen3_moe", "qwen2_moe"):
        out["hidden"] = r.int("moe_intermediate_size", f"{_MLP}.hidden")
        r.ignore("intermediate_size", "the dense MLP of the layers in mlp_only_layers, which here are none")
    else:
        out["hidden"] = r.int("intermediate_size", f"{_MLP}.hidden")
    return out


def _every_layer_routes(r: Reader) -> None:
    """Qwen's dense layers among the routed ones: a stack of one block cannot say them."""
    dense = r.map("mlp_only_layers", "none: every layer's MLP is routed", [])
    if dense not in ([], None):
        r.refuse("mlp_only_layers", f"{shown(dense)}: dense layers among routed ones are not one repeated block")
    step = r.map("decoder_sparse_step", "1: every layer's MLP is routed", 1)
    if step != 1:
        r.refuse("decoder_sparse_step", f"{shown(step)}: a routed MLP every {shown(step)} layers is not one "
                                        "repeated block")


def _moe(r: Reader, model_type: str, hidden: int) -> dict[str, Any]:
    experts_key = "num_local_experts" if r.has("num_local_experts") or model_type == "mixtral" else "num_experts"
    moe: dict[str, Any] = {"kind": "moe", "experts": r.int(experts_key, f"{_MLP}.experts"),
                           "top_k": r.int("num_experts_per_tok", f"{_MLP}.top_k"), "hidden": hidden,
                           "activation": "swiglu", "router": "softmax"}
    if moe["top_k"] > moe["experts"]:
        r.refuse("num_experts_per_tok", f"{moe['top_k']} is more than the {moe['experts']} experts")
    if model_type == "mixtral":  # softmax over the top-k logits: the top-k of the softmax, normalised
        moe["normalize"] = True
        jitter = r.float("router_jitter_noise", "none: the router's scores are not jittered", 0.0)
        if jitter != 0:
            r.refuse("router_jitter_noise", f"{jitter}: a router's multiplicative noise in training is not in the "
                                            "design language")
    else:
        moe["normalize"] = r.flag("norm_topk_prob", f"{_MLP}.normalize", default=False)
    if model_type == "qwen2_moe":
        shared = r.int("shared_expert_intermediate_size", f"{_MLP}.shared.hidden", low=0)
        if shared:
            moe.update(shared={"hidden": shared}, shared_gate=True)
    routed = r.flag("output_router_logits", f"{_MLP}.aux_loss: the coefficient when true, 0 when false")
    coef = r.float("router_aux_loss_coef", f"{_MLP}.aux_loss", default=0.001)
    if coef < 0:
        r.refuse("router_aux_loss_coef", f"expected a coefficient of at least 0, got {shown(coef)}")
    moe["aux_loss"] = coef if routed else 0.0
    return moe


@reader("qwen3_moe", "qwen2_moe", "mixtral", "olmoe")
def experts_family(r: Reader, model_type: str, name: str, documents: bool, positions: bool) -> dict[str, Any]:
    """A decoder whose every MLP is a dropless mixture of experts."""
    shapes = _shapes(r, model_type)
    _silu(r)
    context = r.int("max_position_embeddings", "context", default=4096)
    eps = r.float("rms_norm_eps", f"{_BLOCK}.eps and nodes[2].params.eps", default=1e-6)
    tied = r.flag("tie_word_embeddings", "nodes[3].params.tie", default=False)
    r.carry("attention_dropout", _DROPOUT)
    if model_type in ("qwen3_moe", "qwen2_moe"):
        _every_layer_routes(r)
    attention = _attention(shapes, rope=rope_of(r, f"{_ATTN}.rope", shapes["head_dim"]))
    if model_type == "qwen2_moe":
        attention["qkv_bias"] = r.flag("qkv_bias", f"{_ATTN}.qkv_bias", default=True)
    elif model_type in ("qwen3_moe", "olmoe"):
        attention["bias"] = r.flag("attention_bias", f"{_ATTN}.bias")
    if model_type == "qwen3_moe":
        attention["qk_norm"] = {"eps": eps}
    elif model_type == "olmoe":
        attention["qk_norm"] = {"eps": eps, "scope": "all"}
        r.must_be("clip_qkv", (None,), "q, k and v clamped to a bound are not in the design language")
    stack: dict[str, Any] = {}
    if model_type == "qwen2_moe" and r.get("sliding_window") == 0 and not r.get("use_sliding_window"):
        # Qwen2MoeConfig writes 0 for the window where no layer slides
        r.map("sliding_window", "none: Qwen2-MoE writes 0 where use_sliding_window is false")
        r.flag("use_sliding_window", "no window")
        r.ignore("max_window_layers", "which layers slide; none does")
        cycle = _layer_windows(r, shapes["layers"], None)
        cycle = None if cycle is None or all(w is None for w in cycle) else cycle
    else:
        cycle = _windows(r, _WINDOWS_AS[model_type], shapes["layers"])
    _place_windows(r, cycle, attention, stack)
    block = {"dim": shapes["dim"], "norm": "rmsnorm", "eps": eps, "mlp": _moe(r, model_type, shapes["hidden"]),
             "attention": attention}
    return _design(name, context, documents, positions, shapes, block, {"kind": "rmsnorm", "params": {"eps": eps}},
                   head={"tie": "embed"} if tied else None, stack=stack)


__all__ = ("experts_family",)
