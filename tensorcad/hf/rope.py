"""A Hugging Face config's rotary settings as a design's rope: its base, its scaling, the part of a head it turns.

transformers 5 writes them as ``rope_parameters`` (``{"rope_type", "rope_theta",
"factor", ...}``, or one such object per layer type, Gemma 3's); older files as
``rope_theta`` beside ``rope_scaling`` (whose type may be spelt ``type``). Each key
becomes a parameter of the design's ``rope.scaling``
(`tensorcad.design.rope_scaling`), with transformers' defaults where a file leaves
one out (the original context is ``max_position_embeddings``; yarn's and longrope's
factor the ratio of the two contexts). A rope type or key the language cannot say
is refused in one line naming it.
"""

from __future__ import annotations

from typing import Any

from ..design.rope_scaling import SCALINGS
from ..errors import shown
from .config import Reader

# transformers' names for the scaling's parameters that the design spells otherwise
_RENAMED = {"original_max_position_embeddings": "original_context"}
_DEFAULT_THETA = 10000.0  # transformers' default base


def rope_of(r: Reader, where: str, head_dim: int, *, partial: bool = False, theta: float | None = None) -> dict[str, Any]:
    """The rope of a config with one rotary setting for every layer (``where``: the design path it goes to)."""
    parameters = r.map("rope_parameters", where)
    old = r.map("rope_scaling", f"{where} (older files' name for rope_parameters' scaling)")
    if parameters is not None and not isinstance(parameters, dict):
        r.refuse("rope_parameters", f"expected an object, got {type(parameters).__name__}")
    if old is not None and not isinstance(old, dict):
        r.refuse("rope_scaling", f"expected an object or null, got {type(old).__name__}")
    # transformers takes rope_scaling over rope_parameters when a file has both
    origin = {**{k: "rope_parameters" for k in parameters or {}}, **{k: "rope_scaling" for k in old or {}}}
    merged = {**(parameters or {}), **(old or {})}
    if "type" in merged:  # the oldest files' spelling of rope_type
        spelt = merged.pop("type")
        if old and "type" in old:
            merged["rope_type"], origin["rope_type"] = spelt, "rope_scaling"
        else:
            merged.setdefault("rope_type", spelt)
    if r.has("rope_theta"):
        merged.setdefault("rope_theta", r.float("rope_theta", f"{where}.theta"))
    if r.has("partial_rotary_factor"):
        merged.setdefault("partial_rotary_factor", r.float("partial_rotary_factor", f"{where}.rotary_dim"))
    if r.has("original_max_position_embeddings"):  # Phi-3 writes it beside the rope, and it wins
        if merged.get("rope_type") in ("llama3", "yarn", "longrope"):
            merged["original_max_position_embeddings"] = r.int("original_max_position_embeddings",
                                                               f"{where}.scaling.original_context")
        else:
            r.ignore("original_max_position_embeddings", "the pretraining context, read by llama3, yarn and "
                                                         "longrope scalings only, and this rope has none")
    return rope_from(r, merged, "rope_parameters" if parameters is not None else "rope_scaling", head_dim,
                     partial=partial, theta=theta, origin=origin)


def rope_from(r: Reader, parameters: dict[str, Any], key: str, head_dim: int, *, partial: bool = False,
              theta: float | None = None, origin: dict[str, str] | None = None) -> dict[str, Any]:
    """A design's rope from one rotary setting (``key``, or ``origin[name]``: where the config holds each
    parameter, for a refusal)."""
    origin = origin or {}
    rope: dict[str, Any] = {"theta": theta if theta is not None else _DEFAULT_THETA}
    kind = parameters.get("rope_type", "default")
    if kind != "default" and kind not in SCALINGS:
        r.refuse(f"{origin.get('rope_type', key)}.rope_type", f"{shown(kind)} rope scaling is not in the design language "
                                     f"(rope scalings: default, {', '.join(SCALINGS)})")
    allowed = {p.name for p in SCALINGS[kind].params} if kind != "default" else set()
    scaling: dict[str, Any] = {"type": kind}
    for name, value in parameters.items():
        where = f"{origin.get(name, key)}.{name}"
        if name == "rope_type":
            continue
        if name == "rope_theta":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 1e12:
                r.refuse(where, f"expected a number in 1..1e12, got {shown(value)}")
            rope["theta"] = float(value)
        elif name == "partial_rotary_factor":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                r.refuse(where, f"expected a number in (0, 1], got {shown(value)}")
            if value != 1.0 and not partial:
                r.refuse(where, f"{shown(value)}: this family's transformers code rotates every feature of a head")
            if value != 1.0:
                rope["rotary_dim"] = int(head_dim * value)
        elif _RENAMED.get(name, name) in allowed:
            scaling[_RENAMED.get(name, name)] = value
        elif value is not None:
            r.refuse(where, f"{shown(name)} belongs to no {shown(kind)} rope scaling the design language can say")
    if kind == "default":
        return rope
    context = r.get("max_position_embeddings")
    if kind in ("llama3", "yarn", "longrope"):
        scaling.setdefault("original_context", context)
    if kind == "dynamic":
        scaling["original_context"] = context  # dynamic scales from the context the config states
    if kind in ("yarn", "longrope") and scaling.get("factor") is None and context and scaling.get("original_context"):
        scaling["factor"] = context / scaling["original_context"]
    rope["scaling"] = {k: v for k, v in scaling.items() if v is not None}
    return rope
