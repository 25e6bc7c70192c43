"""The loss under its reduction: the packed loss equals the documents' own, run alone and reduced as declared.

The packed step's loss is computed as the loop computes it (`training_step`);
the reference runs each document by itself, takes the cross-entropy of each
of its targets, and reduces them as declared (`reductions`: ``token``,
``document``, ``sequence``, or the user's callable). The two add the same
terms in different orders and shapes, so they agree to rounding: the
tolerance is rtol x (1 + |loss|), rtol from the dtype (float32 1e-5), stated.

When the packed loss is not the declared reduction, each named one is tried:
a per-row mean declared as ``document`` is found to be the ``sequence`` mean,
and the message shows what each weighs a document's targets (exact
fractions). When it is none of them, the step computes something the
documents alone do not: a target across a boundary, a forward that reads
across documents, a loss that counts another document's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .reductions import REDUCTIONS, Reduction, describe_weights, name_of, reduce, weights_json
from .step_batch import StepBatch
from .training_step import DocumentLosses, TrainingStep, document_losses, loss_tolerance


@dataclass(frozen=True)
class LossResult:
    """A packed loss against its documents' own, under the declared reduction and every named one."""

    packed: float
    reduction: str  # the declared reduction's name (a callable's own)
    reference: float  # the documents' loss under it
    references: dict  # every named reduction's loss of the documents
    tolerance: float
    counts: tuple[int, ...]  # each document's targets
    pieces: tuple[tuple[int, int, int, int], ...]
    named: bool = True  # the declared reduction is a named one (its weights are known)
    what: str = "the packed loss"
    against: str = "the documents run alone"
    note: str = ""

    @property
    def gap(self) -> float:
        return abs(self.packed - self.reference)

    @property
    def passed(self) -> bool:
        return self.gap <= self.tolerance  # NaN fails

    @property
    def matched(self) -> tuple[str, ...]:
        """The named reductions other than the declared one that the packed loss equals."""
        return tuple(n for n in REDUCTIONS if n != self.reduction and abs(self.packed - self.references[n])
                     <= self.tolerance)

    def _weights(self, name: str) -> str:
        return describe_weights(name, self.counts, self.pieces)

    def message(self) -> str:
        note = f" ({self.note})" if self.note else ""
        figures = f"gap {self.gap:.3g}, tolerance {self.tolerance:.3g}"
        if self.passed:
            alike = [n for n in REDUCTIONS if n != self.reduction
                     and abs(self.references[n] - self.reference) <= self.tolerance]
            blind = (f"; on this batch {', '.join(f'`{n}`' for n in alike)} gives the same loss within the tolerance, "
                     "so the batch cannot tell them apart" if alike else "")
            return (f"{self.what} {self.packed:.6g} equals {self.against} under `{self.reduction}` "
                    f"({self.reference:.6g}; {figures}){blind}{note}")
        head = (f"{self.what} {self.packed:.6g} is not {self.against} under `{self.reduction}` "
                f"({self.reference:.6g}; {figures})")
        matched = self.matched
        if matched:
            also = f", which on this batch is also the {', '.join(f'`{n}`' for n in matched[1:])} mean" if matched[1:] else ""
            declared = f"; {self._weights(self.reduction)}" if self.named else ""
            return (f"{head}: it is the `{matched[0]}` mean ({self.references[matched[0]]:.6g}){also}: "
                    f"{self._weights(matched[0])}{declared}{note}")
        others = ", ".join(f"{n} {self.references[n]:.6g}" for n in REDUCTIONS)
        return (f"{head}, nor under any named reduction ({others}): the packed step computes something the "
                "documents alone do not (a target across a boundary, a forward that reads across documents, or a "
                f"loss that counts another document's tokens){note}")

    def to_json(self) -> dict:
        rows = [piece[0] for piece in self.pieces]
        return {"passed": self.passed, "packed": self.packed, "reduction": self.reduction,
                "reference": self.reference, "references": dict(self.references), "gap": self.gap,
                "tolerance": self.tolerance, "matched": list(self.matched), "documents": len(self.pieces),
                "targets": sum(self.counts), "note": self.note,
                "weights": {n: weights_json(n, self.counts, rows) for n in REDUCTIONS},
                "message": self.message()}


def compared(packed: float, losses: DocumentLosses, reduction: Reduction, dtype: torch.dtype, *,
             atol: float | None, rtol: float | None, **words) -> LossResult:
    """The packed loss held to ``losses`` reduced as declared, and to every named reduction."""
    name = name_of(reduction)
    references = {n: float(reduce(n, losses.tokens, losses.rows)) for n in REDUCTIONS}
    reference = references[name] if isinstance(reduction, str) else float(reduce(reduction, losses.tokens,
                                                                                  losses.rows))
    tolerance = loss_tolerance(dtype, reference, atol, rtol)
    return LossResult(packed, name, reference, references, tolerance, losses.counts, losses.pieces,
                      isinstance(reduction, str), **words)


def check_loss(step: TrainingStep, batch: StepBatch, reduction: Reduction = "token", *,
               atol: float | None = None, rtol: float | None = None) -> LossResult:
    """The packed step's loss (train mode) against each document run alone, reduced as declared."""
    name_of(reduction)
    with step.mode(train=True) as note, torch.no_grad():
        packed = float(step.packed_loss(batch))
        losses = document_losses(step, [batch])
    dtype = step.named_parameters()[0][1].dtype
    return compared(packed, losses, reduction, dtype, atol=atol, rtol=rtol, note=note)
