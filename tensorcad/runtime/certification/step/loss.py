"""The loss under its reduction: the packed loss equals the documents' own, run alone and reduced as declared.

The packed step's loss is computed as the loop computes it (`training_step`);
the reference runs each document by itself, takes the cross-entropy of each
of its targets, and reduces them as declared (`reductions`: ``token``,
``document``, ``sequence``, or the user's callable). Two things are held:

- the value: the two add the same terms in different orders and shapes, so
  they agree to rounding, rtol x (1 + |loss|), rtol from the dtype (float32
  1e-5), stated; a difference with the right weights is the forward's;
- what it trains (`loss_weights`, read from the loss's gradient at the
  logits): every position on the documents' own target, weighted as the
  declared reduction weighs it. A value can agree by coincidence; this
  cannot, and it names the position trained across a boundary, or the
  reduction the weights are (a per-row mean declared as ``document`` is the
  ``sequence`` mean), with what each weighs a document's targets.

A loss that is not a weighted cross-entropy is held by its value alone, and
then the named reductions are tried by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .loss_weights import Trained, WeightCheck, check_weights, expected_grid, fraction, trained_by
from .reductions import REDUCTIONS, Reduction, describe_weights, name_of, reduce, weights, weights_json
from .batch import StepBatch
from .loop import DocumentLosses, TrainingStep, document_losses, loss_tolerance, padded_images, padded_rows
from .router import AuxCheck, RouterAux, held_aux


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
    weights: WeightCheck | None = None  # what the loss trains, against the declared reduction (None: not read)
    alike: tuple[str, ...] = ()  # the named reductions whose weights the loss's are
    declared: tuple[float, ...] = ()  # the declared reduction's weight of each document's targets
    router: AuxCheck | None = None  # a router's auxiliary loss, held apart (None: the loss adds none)

    @property
    def gap(self) -> float:
        return abs(self.packed - self.reference)

    @property
    def value_passed(self) -> bool:
        return self.gap <= self.tolerance  # NaN fails

    @property
    def passed(self) -> bool:
        return (self.value_passed and (self.weights is None or self.weights.passed)
                and (self.router is None or self.router.passed))

    @property
    def matched(self) -> tuple[str, ...]:
        """The named reductions other than the declared one that the packed loss is."""
        if self.weights is not None:
            return tuple(n for n in self.alike if n != self.reduction)
        return tuple(n for n in REDUCTIONS if n != self.reduction and abs(self.packed - self.references[n])
                     <= self.tolerance)

    def _per_document(self, shown: int = 3) -> str:
        told = []
        for w, mine, n, (row, document, _, _) in zip(self.weights.per_document, self.declared, self.counts,
                                                      self.pieces):
            if n and len(told) < shown:
                told.append(f"a target of document {document} of row {row} ({n} target{'s' if n != 1 else ''}) "
                            f"weighs {fraction(w)} (`{self.reduction}`: {fraction(mine)})")
        more = sum(1 for n in self.counts if n) - len(told)
        return ", ".join(told) + (f", and {more} more" if more > 0 else "")

    def message(self) -> str:
        return self._message() if self.router is None else f"{self._message()}; {self.router.message()}"

    def _message(self) -> str:
        # with a router's term taken out, what is compared is the loss's cross-entropy
        what = self.what if self.router is None else f"{self.what}'s cross-entropy (its loss less the router's term)"
        note = f" ({self.note})" if self.note else ""
        figures = f"gap {self.gap:.3g}, tolerance {self.tolerance:.3g}"
        w = self.weights
        if self.value_passed and (w is None or w.passed):
            if w is not None:
                how = (f"; its {sum(self.counts)} targets are the documents' own, each weighed as `{self.reduction}` "
                       "weighs it")
            else:
                alike = [n for n in REDUCTIONS if n != self.reduction
                         and abs(self.references[n] - self.reference) <= self.tolerance]
                how = ("; not a weighted cross-entropy, so its value alone is compared"
                       + (f", and on this batch {', '.join(f'`{n}`' for n in alike)} gives the same value" if alike
                          else ""))
            return (f"{what} {self.packed:.6g} equals {self.against} under `{self.reduction}` "
                    f"({self.reference:.6g}; {figures}){how}{note}")
        head = (f"{what} {self.packed:.6g} is not {self.against} under `{self.reduction}` "
                f"({self.reference:.6g}; {figures})")
        if w is not None and w.mistrained:
            more = len(w.mistrained) - 1
            return (f"{head}: {w.mistrained[0].message()}"
                    + (f" ({more} more position{'s' if more != 1 else ''} trained otherwise)" if more else "") + note)
        matched = self.matched
        if w is not None and not w.passed:
            also = f" (and, on this batch, the {', '.join(f'`{n}`' for n in matched[1:])} mean)" if matched[1:] else ""
            like = f"as the `{matched[0]}` mean does{also}" if matched else "as no named reduction does"
            return f"{head}: it weighs the documents' targets {like}: {self._per_document()}{note}"
        if w is not None:
            return (f"{head}, though its targets are the documents' own, weighed as `{self.reduction}` weighs them: "
                    f"the packed forward computes them otherwise than {self.against}{note}")
        if matched:
            declared = f"; {describe_weights(self.reduction, self.counts, self.pieces)}" if self.named else ""
            return (f"{head}: it is the `{matched[0]}` mean ({self.references[matched[0]]:.6g}): "
                    f"{describe_weights(matched[0], self.counts, self.pieces)}{declared}{note}")
        others = ", ".join(f"{n} {self.references[n]:.6g}" for n in REDUCTIONS)
        return (f"{head}, nor under any named reduction ({others}): the packed step computes something the "
                f"documents alone do not{note}")

    def to_json(self) -> dict:
        rows = [piece[0] for piece in self.pieces]
        return {"passed": self.passed, "packed": self.packed, "reduction": self.reduction,
                "reference": self.reference, "references": dict(self.references), "gap": self.gap,
                "tolerance": self.tolerance, "matched": list(self.matched), "documents": len(self.pieces),
                "targets": sum(self.counts), "note": self.note,
                "trained": self.weights.to_json() if self.weights is not None else None,
                "weights": {n: weights_json(n, self.counts, rows) for n in REDUCTIONS},
                "router": self.router.to_json() if self.router is not None else None,
                "message": self.message()}


def measured(step: TrainingStep, batch: StepBatch) -> tuple[float, Trained | None, RouterAux | None]:
    """The packed loss as the loop computes it less any router term, what it trains (None where its logits are
    not its graph's), and the router's term (`RouterAux`, None where the loss adds none)."""
    with torch.enable_grad():
        loss, logits, router = step.packed_parts(batch)
        if not (isinstance(logits, torch.Tensor) and logits.requires_grad and logits.shape[:2] == batch.ids.shape):
            return float(loss.detach()), None, router
        (gradient,) = torch.autograd.grad(loss, logits, allow_unused=True)
    return float(loss.detach()), None if gradient is None else trained_by(logits, gradient), router


def _declared_weights(reduction: Reduction, losses: DocumentLosses) -> tuple:
    """What the declared reduction weighs each target: a number a document for a name (exactly), one a
    target for a callable (its gradient at each target's loss)."""
    if isinstance(reduction, str):
        return tuple(float(w) for w in weights(reduction, losses.counts, losses.rows))
    leaves = [t.detach().double().requires_grad_() for t in losses.tokens]
    with torch.enable_grad():
        grads = torch.autograd.grad(reduce(reduction, leaves, losses.rows), leaves, allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves))


def compared(packed: float, trained: Trained | None, losses: DocumentLosses, batch: StepBatch, reduction: Reduction,
             dtype: torch.dtype, *, atol: float | None, rtol: float | None, **words: Any) -> LossResult:
    """The packed loss and what it trains, held to ``losses`` reduced as declared and to every named reduction."""
    name = name_of(reduction)
    references = {n: float(reduce(n, losses.tokens, losses.rows)) for n in REDUCTIONS}
    reference = references[name] if isinstance(reduction, str) else float(reduce(reduction, losses.tokens,
                                                                                  losses.rows))
    tolerance = loss_tolerance(dtype, reference, atol, rtol)
    declared = _declared_weights(reduction, losses)
    check, alike = None, ()
    if trained is not None and trained.exact:
        targets = batch.targets.cpu()
        grid = lambda ws: expected_grid(batch.ids.shape, losses.where, ws, targets)  # noqa: E731
        check = check_weights(trained, *grid(declared), batch.documents, losses.pieces)
        alike = tuple(n for n in REDUCTIONS if check_weights(
            trained, *grid([float(x) for x in weights(n, losses.counts, losses.rows)]), batch.documents,
            losses.pieces).passed)
    per_document = tuple(float(torch.as_tensor(w).double().mean()) if n else 0.0
                         for w, n in zip(declared, losses.counts))
    return LossResult(packed, name, reference, references, tolerance, losses.counts, losses.pieces,
                      isinstance(reduction, str), weights=check, alike=alike, declared=per_document, **words)


def check_loss(step: TrainingStep, batch: StepBatch, reduction: Reduction = "token", *,
               atol: float | None = None, rtol: float | None = None) -> LossResult:
    """The packed step's loss (train mode) against each document run alone, reduced as declared."""
    name_of(reduction)
    with step.mode(train=True) as note:
        packed, trained, router = measured(step, batch)
        with torch.no_grad():
            losses = document_losses(step, [batch])
            # the auxiliary loss pools the batch: its reference is the documents padded one a row, not each alone
            if router is not None:
                ids, real = padded_rows(step, batch)
                padded = step.padded_parts(ids, real, padded_images(step, batch, real))[1]
            else:
                padded = None
    dtype = step.named_parameters()[0][1].dtype
    return compared(packed, trained, losses, batch, reduction, dtype, atol=atol, rtol=rtol, note=note,
                    router=held_aux(router, padded, lambda v: loss_tolerance(dtype, v, atol, rtol)))
