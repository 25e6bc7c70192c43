"""The step's gradients: every parameter's gradient from the packed step equals the documents' alone.

The loss can match while the gradient does not (a backward that mixes what
the forward kept apart, a loss whose value is right but whose graph is not),
and a gradient norm is what a run logs: TRL's padding-free DPO reported 197.5
packed where the same documents gave 28.7. Here the packed loss is taken back
once through the packed step, and the reference loss (each document run
alone, reduced as declared: `reductions`) once through the lone runs; each
parameter's two gradients are compared by the norm of their difference over
the norm of the reference's (floored at a thousandth of the largest, so a
parameter that gets almost nothing is not judged by its own rounding).
The tolerance is relative, from the dtype (float32 1e-3), and stated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .reductions import Reduction, name_of, reduce
from .batch import StepBatch
from .loop import GRADIENT_RTOL, TrainingStep, document_losses


@dataclass(frozen=True)
class ParameterGap:
    """How far one parameter's packed gradient is from the documents' alone, relative to the latter."""

    name: str
    gap: float  # |packed - reference| / |reference| (norms; NaN counts as infinite)
    packed_norm: float
    reference_norm: float

    def to_json(self) -> dict:
        return {"name": self.name, "gap": self.gap, "packedNorm": self.packed_norm,
                "referenceNorm": self.reference_norm}


@dataclass(frozen=True)
class GradientComparison:
    """Every parameter's gap, and the gradients' norms over all parameters."""

    gaps: tuple[ParameterGap, ...]
    tolerance: float
    packed_norm: float
    reference_norm: float
    total_gap: float  # |packed - reference| / |reference| over every parameter together

    @property
    def beyond(self) -> tuple[ParameterGap, ...]:
        return tuple(g for g in self.gaps if not g.gap <= self.tolerance)

    @property
    def passed(self) -> bool:
        return not self.beyond

    def worst(self) -> ParameterGap:
        return max(self.gaps, key=lambda g: g.gap)

    def to_json(self) -> dict:
        return {"parameters": len(self.gaps), "beyond": len(self.beyond), "tolerance": self.tolerance,
                "packedNorm": self.packed_norm, "referenceNorm": self.reference_norm, "gap": self.total_gap,
                "worst": self.worst().to_json()}


def compare_gradients(names: Sequence[str], packed: Sequence[torch.Tensor | None],
                      reference: Sequence[torch.Tensor | None], params: Sequence[torch.Tensor],
                      tolerance: float) -> GradientComparison:
    """Each parameter's packed gradient against its reference (None: no gradient, zeros)."""
    def dense(grads):
        return [torch.zeros_like(p) if g is None else g.detach() for g, p in zip(grads, params)]

    packed, reference = dense(packed), dense(reference)
    norms = [float(r.double().norm()) for r in reference]
    floor = max(1e-3 * max(norms, default=0.0), 1e-300)
    gaps = []
    for name, p, r, norm in zip(names, packed, reference, norms):
        diff = float((p.double() - r.double()).norm())
        gap = diff / max(norm, floor) if diff else 0.0
        gaps.append(ParameterGap(name, float("inf") if gap != gap else gap, float(p.double().norm()), norm))
    total = lambda grads: torch.cat([g.double().reshape(-1) for g in grads])  # noqa: E731
    reference_norm = float(total(reference).norm())
    total_gap = float((total(packed) - total(reference)).norm()) / max(reference_norm, 1e-300)
    return GradientComparison(tuple(gaps), tolerance, float(total(packed).norm()), reference_norm, total_gap)


def gradient_tolerance(step: TrainingStep, rtol: float | None) -> float:
    dtype = step.named_parameters()[0][1].dtype
    return GRADIENT_RTOL.get(dtype, 1e-4) if rtol is None else float(rtol)


def reference_gradients(step: TrainingStep, batches: list[StepBatch], reduction: Reduction) -> list:
    """The gradient of the documents' loss, each run alone and reduced as declared, over ``batches`` together."""
    params = [p for _, p in step.named_parameters()]
    with torch.enable_grad():
        losses = document_losses(step, batches)
        loss = reduce(reduction, losses.tokens, losses.rows)
        return list(torch.autograd.grad(loss, params, allow_unused=True))


@dataclass(frozen=True)
class StepGradientResult:
    comparison: GradientComparison
    reduction: str
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    def message(self) -> str:
        c = self.comparison
        worst = c.worst()
        note = f" ({self.note})" if self.note else ""
        norms = f"gradient norm {c.packed_norm:.6g} packed, {c.reference_norm:.6g} alone"
        if self.passed:
            return (f"gradients equal the documents' alone under `{self.reduction}`: {len(c.gaps)} parameters, "
                    f"the largest relative gap {worst.gap:.3g} ({worst.name}; tolerance {c.tolerance:g}); "
                    f"{norms}{note}")
        more = len(c.beyond) - 1
        return (f"the packed step's gradient is not the documents' alone under `{self.reduction}`: {worst.name} "
                f"differs by {worst.gap:.3g} of its norm (tolerance {c.tolerance:g})"
                + (f", and {more} more parameter{'s' if more != 1 else ''} beyond the tolerance" if more else "")
                + f"; {norms} (relative gap {c.total_gap:.3g}){note}")

    def to_json(self) -> dict:
        return {"passed": self.passed, "reduction": self.reduction, "note": self.note, **self.comparison.to_json(),
                "message": self.message()}


def check_step_gradients(step: TrainingStep, batch: StepBatch, reduction: Reduction = "token", *,
                         rtol: float | None = None) -> StepGradientResult:
    """One backward through the packed step, one through the documents alone: every parameter's gradient equal."""
    name = name_of(reduction)
    named = step.named_parameters()
    params = [p for _, p in named]
    with step.mode(train=True) as note:
        with torch.enable_grad():
            packed = torch.autograd.grad(step.packed_loss(batch), params, allow_unused=True)
        reference = reference_gradients(step, [batch], reduction)
    comparison = compare_gradients([n for n, _ in named], packed, reference, params, gradient_tolerance(step, rtol))
    return StepGradientResult(comparison, name, note)
