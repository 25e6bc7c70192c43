"""Vision-language rows certified: each packed sample (its text and its images) as if it ran alone.

A vision-language model (Qwen2-VL, Qwen2.5-VL) is called the way the user calls it:
``model(**inputs, **call)`` with the packed row's ``input_ids``, ``position_ids``,
``pixel_values``, ``image_grid_thw`` and the user's keywords (``use_cache``). Two
certificates, each over every sample of the row:

- **faithful**: each sample's logits in the packed row equal the sample run alone
  through the model's own forward (its tokens, its images, nothing packed, the
  model counting its own positions), to the dtype's tolerance;
- **isolation**: a sample's text tokens and pixels changed move no logit of any
  other sample (bitwise), and move its own.

A failure names the sample and, read off the call (``tensorcad.hf.vision``), its
cause: the positions' rows (three mRoPE rows, no text row), positions over the whole
row (none given), a cache, a 2-D mask, or the first axis of the 4-row positions that
differs from ``get_rope_index`` on the sample alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tensorcad.errors import TensorcadError
from tensorcad.hf.vision import AxisDifference, diagnose_vision_call, positions_differences, samples_of

from .calls import outputs_of
from .faithful import default_tolerance, largest_difference


def _cached(value: Any) -> bool:
    """Whether a call returned a cache: what use_cache (given, or the config's default) really did."""
    # A ModelOutput is a dict of what is not None; reading it as one skips the deprecated attribute's warning.
    if isinstance(value, Mapping):
        return any(value.get(name) is not None for name in ("cache", "past_key_values"))
    return any(getattr(value, name, None) is not None for name in ("cache", "past_key_values"))


def _call(model: Any, inputs: Mapping[str, Any], call: Mapping[str, Any], who: str) -> tuple[torch.Tensor, bool]:
    try:
        value = model(**{**inputs, **call})  # the call's keywords over the batch's (use_cache given twice)
    except TensorcadError:
        raise
    except Exception as error:  # noqa: BLE001 - the model's error, as one line naming the run
        raise TensorcadError(who, f"raised {type(error).__name__}: {str(error).strip()[:200]}") from error
    return outputs_of(value, who), _cached(value)


def _alone(model: Any, sample: Mapping[str, Any], index: int) -> torch.Tensor:
    """A sample through the model's own forward by itself: nothing packed, no positions, no cache."""
    return _call(model, sample, {"use_cache": False}, f"model (sample {index} run alone)")[0]


@dataclass(frozen=True)
class SampleGap:
    """Sample ``sample`` (``length`` tokens from ``first``) against itself alone: ``largest`` at its ``token``."""

    sample: int
    first: int
    length: int
    token: int
    largest: float

    def to_json(self) -> dict:
        return {"sample": self.sample, "first": self.first, "length": self.length, "token": self.token,
                "largest": self.largest}


@dataclass(frozen=True)
class VisionFaithfulResult:
    gaps: tuple[SampleGap, ...]  # every sample, in row order
    tolerance: float
    cause: str | None  # what the call does wrong, read off it (tensorcad.hf.vision.CAUSES)
    why: str | None
    axes: tuple[AxisDifference, ...]  # the 4-row positions' differences from get_rope_index, axis by axis

    @property
    def largest(self) -> float:
        return max((g.largest for g in self.gaps), default=0.0)

    @property
    def differing(self) -> tuple[SampleGap, ...]:
        return tuple(g for g in self.gaps if not g.largest <= self.tolerance)

    @property
    def passed(self) -> bool:
        return bool(self.gaps) and not self.differing and self.cause is None

    def message(self) -> str:
        if not self.gaps:
            return "no sample was compared"
        cause = f"; cause: {self.cause}: {self.why}" if self.cause else ""
        worst = max(self.differing, key=lambda g: (g.largest != g.largest, g.largest), default=None)
        if worst is not None:
            return (f"sample {worst.sample} ({worst.length} tokens from position {worst.first}) differs from itself "
                    f"run alone by {worst.largest:.3g} at its token {worst.token} (tolerance {self.tolerance:g})"
                    + cause)
        if self.cause:
            return f"every sample equals itself alone on this batch, but the call cannot keep samples apart{cause}"
        return (f"faithful: {len(self.gaps)} samples each equal to itself run alone, largest difference "
                f"{self.largest:.3g} (tolerance {self.tolerance:g})")

    def to_json(self) -> dict:
        return {"passed": self.passed, "tolerance": self.tolerance, "largest": self.largest, "cause": self.cause,
                "gaps": [g.to_json() for g in self.gaps], "axes": [a.message() for a in self.axes],
                "message": self.message()}


def _read(model: Any, inputs: Mapping[str, Any], documents: torch.Tensor) -> list[dict[str, Any]]:
    if not isinstance(inputs, Mapping) or "input_ids" not in inputs:
        raise TensorcadError("inputs", "expected the packed row's keyword arguments, input_ids among them")
    if not isinstance(documents, torch.Tensor) or documents.dtype.is_floating_point:
        raise TensorcadError("documents", "expected a (1, T) integer tensor: each token's sample")
    return samples_of(model, inputs, documents)


def check_vision_faithful(model: Any, inputs: Mapping[str, Any], documents: torch.Tensor, *,
                          atol: float | None = None, **call: Any) -> VisionFaithfulResult:
    """Each sample of the packed row, in ``model(**inputs, **call)``, against the model's own forward on it alone."""
    samples = _read(model, inputs, documents)
    with torch.no_grad():
        packed, cached = _call(model, inputs, call, "model (the packed row)")
        tolerance = default_tolerance(packed.dtype) if atol is None else float(atol)
        gaps = []
        for index, s in enumerate(samples):
            first, end = s["first"], s["end"]
            alone = _alone(model, s["inputs"], index)[0]
            largest, token = largest_difference(packed[0, first:end], alone)
            gaps.append(SampleGap(index, first, end - first, token, largest))
        found = diagnose_vision_call(model, inputs, documents, cached)
        axes = positions_differences(model, inputs, documents)
    cause, why = found if found else (None, None)
    return VisionFaithfulResult(tuple(gaps), tolerance, cause, why, axes)


@dataclass(frozen=True)
class SampleLeak:
    """Changing sample ``changed`` moved sample ``moved``'s logits by up to ``largest``, first at ``position``."""

    changed: int
    moved: int
    largest: float
    position: int


@dataclass(frozen=True)
class VisionIsolationResult:
    leaks: tuple[SampleLeak, ...]
    perturbed: int
    own_change: float  # the smallest, over changed samples, of the largest move of their own logits
    cause: str | None
    why: str | None

    @property
    def passed(self) -> bool:
        return self.perturbed > 0 and not self.leaks and self.own_change > 0 and self.cause is None

    def message(self) -> str:
        cause = f"; cause: {self.cause}: {self.why}" if self.cause else ""
        if self.leaks:
            worst = max(self.leaks, key=lambda leak: leak.largest)
            return (f"changing sample {worst.changed} (its text and pixels) moved sample {worst.moved} by up to "
                    f"{worst.largest:.3g}, first at position {worst.position}" + cause)
        if not self.own_change > 0:
            return "changing a sample moved none of its own logits: isolation would pass vacuously"
        if self.cause:
            return f"no sample moved another on this batch, but the call cannot keep samples apart{cause}"
        return (f"isolated: {self.perturbed} samples changed (text and pixels), every other logit bitwise equal "
                f"(own logits moved by at least {self.own_change:.3g})")


def _changed(model: Any, inputs: Mapping[str, Any], sample: Mapping[str, Any], generator: torch.Generator,
             pixels_at: int) -> dict[str, Any]:
    """The packed inputs with one sample's text tokens redrawn (never a vision token) and its pixels redrawn."""
    config = model.config
    text_config = getattr(config, "text_config", config)
    vocab = int(text_config.vocab_size)
    special = torch.tensor([v for v in (getattr(config, n, None) for n in
                            ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"))
                            if v is not None], dtype=torch.long)
    ids = inputs["input_ids"].clone()
    first, end = sample["first"], sample["end"]
    piece = ids[0, first:end]
    text = ~torch.isin(piece, special)
    fresh = piece.clone()
    # Redraw until every text token differs from its old value and is no vision token (few are special).
    todo = text.clone()
    while bool(todo.any()):
        fresh[todo] = torch.randint(0, vocab, (int(todo.sum()),), generator=generator).to(fresh.dtype)
        todo = text & ((fresh == piece) | torch.isin(fresh, special))
    ids[0, first:end] = fresh
    changed = dict(inputs)
    changed["input_ids"] = ids
    own = sample["inputs"].get("pixel_values")
    if own is not None:
        pixels = inputs["pixel_values"].clone()
        noise = torch.randn(own.shape, generator=generator).to(pixels.dtype)
        pixels[pixels_at:pixels_at + len(own)] = own + noise
        changed["pixel_values"] = pixels
    return changed


def check_vision_isolation(model: Any, inputs: Mapping[str, Any], documents: torch.Tensor, *, seed: int = 0,
                           **call: Any) -> VisionIsolationResult:
    """Change each sample's text and pixels in turn; every logit of every other sample must stay bitwise equal."""
    samples = _read(model, inputs, documents)
    generator = torch.Generator().manual_seed(seed)
    leaks, own_changes, pixels_at = [], [], 0
    with torch.no_grad():
        base, cached = _call(model, inputs, call, "model (the packed row)")
        for index, s in enumerate(samples):
            changed = _changed(model, inputs, s, generator, pixels_at)
            own_pixels = s["inputs"].get("pixel_values")
            pixels_at += 0 if own_pixels is None else len(own_pixels)
            out, _ = _call(model, changed, call, f"model (sample {index} changed)")
            first, end = s["first"], s["end"]
            own_changes.append(float((out[0, first:end] - base[0, first:end]).abs().max()))
            moved = (out[0] != base[0]).reshape(out.shape[1], -1).any(dim=-1)
            moved[first:end] = False
            for other, t in enumerate(samples):
                where = moved[t["first"]:t["end"]].nonzero()
                if len(where):
                    span = slice(t["first"], t["end"])
                    leaks.append(SampleLeak(index, other, float((out[0, span] - base[0, span]).abs().max()),
                                            t["first"] + int(where[0])))
        found = diagnose_vision_call(model, inputs, documents, cached)
    cause, why = found if found else (None, None)
    return VisionIsolationResult(tuple(leaks), len(samples), min(own_changes, default=0.0), cause, why)


__all__ = ("SampleGap", "SampleLeak", "VisionFaithfulResult", "VisionIsolationResult", "check_vision_faithful",
           "check_vision_isolation")
