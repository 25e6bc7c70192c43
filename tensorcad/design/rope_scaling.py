"""Rope scalings: the ways a rotary embedding's frequencies are stretched past the context it was trained at.

A `rope` node's ``scaling`` is ``{"type": T, ...}`` with T's parameters (the names
transformers' ``rope_parameters`` use, its ``original_max_position_embeddings``
written ``original_context``):

- ``linear``: every frequency divided by ``factor`` (positions interpolated);
- ``dynamic``: NTK scaling recomputed from the longest position of a call: past
  ``original_context`` the base grows to ``theta * (factor * L / original_context
  - (factor - 1)) ** (d / (d - 2))``; within it, plain rotary;
- ``llama3``: Llama 3.1's, long wavelengths divided by ``factor``, short ones kept,
  those between smoothed (``low_freq_factor``, ``high_freq_factor``);
- ``yarn``: frequencies blended between extrapolated and interpolated by a ramp over
  ``beta_fast``..``beta_slow`` rotations, cos and sin scaled by ``attention_factor``;
- ``longrope``: each frequency divided by its own factor, ``short_factor`` while the
  longest position of a call is within ``original_context``, ``long_factor`` past it;
  cos and sin scaled by ``attention_factor``.

None changes a parameter or a FLOP: they change the angles only (and, for yarn and
longrope, multiply cos and sin by one number). ``dynamic`` and ``longrope`` read the
longest position of the whole batch, so under packing a document's rotation depends
on the row beside it (rule ROPE-03). No torch here: the frequencies are computed by
the generated module (``codegen/rotary_runtime.py``), as transformers computes them.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import TensorcadError, join, shown
from .schema import Kind, Param, check_params

_FACTOR = Param("factor", "float", "how much longer than original_context", low=1e-6, high=1e6)
_ORIGINAL = Param("original_context", "int", "the context the frequencies were trained at", low=1, high=1 << 24)
_ATTENTION = Param("attention_factor", "float", "multiplies cos and sin; default from factor", None, 1e-6, 1e6,
                   nullable=True)

SCALINGS: dict[str, Kind] = {k.name: k for k in (
    Kind("linear", "every frequency divided by factor", (), (_FACTOR,)),
    Kind("dynamic", "NTK-aware base recomputed from the longest position of a call, past original_context", (),
         (Param("factor", "float", "the NTK factor the base grows by as calls grow past original_context", low=1.0,
                high=1e6), _ORIGINAL)),
    Kind("llama3", "Llama 3.1's: long wavelengths divided by factor, short ones kept, those between smoothed", (),
         (_FACTOR, Param("low_freq_factor", "float", "wavelengths past original_context / it are divided", low=1e-6,
                         high=1e6),
          Param("high_freq_factor", "float", "wavelengths under original_context / it are kept", low=1e-6, high=1e6),
          _ORIGINAL)),
    Kind("yarn", "frequencies blended between extrapolation and interpolation, cos and sin scaled", (),
         (_FACTOR, _ORIGINAL, Param("beta_fast", "float", "rotations where extrapolation ends", 32.0, 1e-6, 1e6),
          Param("beta_slow", "float", "rotations where interpolation begins", 1.0, 1e-6, 1e6), _ATTENTION,
          Param("mscale", "float", "with mscale_all_dim, the attention factor's numerator", None, 1e-6, 1e6,
                nullable=True),
          Param("mscale_all_dim", "float", "with mscale, its denominator", None, 1e-6, 1e6, nullable=True),
          Param("truncate", "bool", "round the ramp's ends to whole features", True))),
    Kind("longrope", "per-frequency factors, short within original_context and long past it, cos and sin scaled", (),
         (Param("short_factor", "floats", "one factor a frequency (rotated features / 2)"),
          Param("long_factor", "floats", "one factor a frequency, once the longest position passes original_context"),
          _FACTOR, _ORIGINAL, _ATTENTION)),
)}
# Scalings whose frequencies depend on the longest position of the call: a packed row's longest document.
ROW_DEPENDENT = ("dynamic", "longrope")


def check_scaling(raw: Any, path: str, rotary_dim: int) -> dict[str, Any]:
    """The scaling's params, checked and filled with defaults, or a TensorcadError naming the bad value."""
    if not isinstance(raw, dict):
        raise TensorcadError(path, f"expected an object {{type, ...}}, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind not in SCALINGS:
        raise TensorcadError(join(path, "type"), f"{shown(kind)} is not one of {', '.join(map(repr, SCALINGS))}")
    params = check_params(SCALINGS[kind], {k: v for k, v in raw.items() if k != "type"}, path)
    for name in ("short_factor", "long_factor"):
        if name in params and len(params[name]) != rotary_dim // 2:
            raise TensorcadError(join(path, name), f"{len(params[name])} factors for {rotary_dim // 2} frequencies "
                                                   f"(rotated features / 2)")
    return {"type": kind, **params}


def rotary_params(params: dict[str, Any], path: str) -> dict[str, Any]:
    """A rope node's params with ``rotary_dim`` resolved (default: every feature) and its scaling checked."""
    head_dim = params["head_dim"]
    rotary_dim = head_dim if params.get("rotary_dim") is None else params["rotary_dim"]
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise TensorcadError(join(path, "rotary_dim"), f"{rotary_dim} must be even and at most head_dim {head_dim}")
    scaling = params.get("scaling")
    if scaling is not None:
        scaling = check_scaling(scaling, join(path, "scaling"), rotary_dim)
    return {**params, "rotary_dim": rotary_dim, "scaling": scaling}


def is_plain(params: dict[str, Any]) -> bool:
    """Whether a rope node is plain rotary: every feature, in halves, no scaling (what every design had)."""
    return (params.get("scaling") is None and not params.get("interleaved")
            and params.get("rotary_dim") in (None, params["head_dim"]))


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def attention_factor(scaling: dict[str, Any] | None) -> float:
    """What cos and sin are multiplied by, as transformers derives it when the scaling does not say."""
    if scaling is None or scaling["type"] not in ("yarn", "longrope"):
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = scaling["factor"]
    if scaling["type"] == "yarn":
        if scaling.get("mscale") and scaling.get("mscale_all_dim"):
            return float(_mscale(factor, scaling["mscale"]) / _mscale(factor, scaling["mscale_all_dim"]))
        return _mscale(factor)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(scaling["original_context"]))
