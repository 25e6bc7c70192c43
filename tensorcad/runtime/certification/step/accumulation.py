"""Gradient accumulation: k micro-batches, each taken back as the loop does, give the whole batch's gradient.

A batch split into micro-batches holds its targets unevenly, and each
micro-batch's mean then weighs a target by the micro-batch it landed in:
``(x1/n1 + x2/n2) / 2 != (x1 + x2) / (n1 + n2)``, the bug transformers'
``Trainer`` had for years (and torchtune and torchtitan after it). The loop is
one of:

- ``"num_items_in_batch"``: each micro-batch's loss is its sum over the whole
  batch's target count N, passed as ``num_items_in_batch`` (the Trainer's way,
  counted as it counts: each micro-batch's supervised targets);
- ``"mean"``: each micro-batch's loss as it comes (its own mean), over k;
- a callable ``weight(micro_batch, micro_batches) -> float``: what each
  micro-batch's loss is multiplied by (the batch dicts as the loop has them).

The accumulated gradient is held, parameter by parameter, to the gradient of
every document of every micro-batch run alone and reduced as declared over the
whole batch (`step_gradients`), so a wrong normalisation shows as the relative
gap of the two, with each micro-batch's target count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from tensorcad.errors import TensorcadError

from .reductions import Reduction, name_of
from .batch import StepBatch
from .gradients import GradientComparison, compare_gradients, gradient_tolerance, reference_gradients
from .loop import TrainingStep

ACCUMULATIONS = ("num_items_in_batch", "mean")

Accumulation = str | Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], float]


def accumulation_name(accumulation: Accumulation) -> str:
    if isinstance(accumulation, str):
        if accumulation not in ACCUMULATIONS:
            raise TensorcadError("accumulation", f"unknown accumulation {accumulation!r} (accumulations: "
                                                 f"{', '.join(ACCUMULATIONS)}, or a callable weight(micro_batch, "
                                                 "micro_batches) -> float)")
        return accumulation
    if not callable(accumulation):
        raise TensorcadError("accumulation", f"expected a name or a callable, got {type(accumulation).__name__}")
    return getattr(accumulation, "__name__", type(accumulation).__name__)


@dataclass(frozen=True)
class AccumulationResult:
    comparison: GradientComparison
    accumulation: str
    reduction: str
    targets: tuple[int, ...]  # each micro-batch's supervised targets
    mean_of_each: bool = False  # each micro-batch's loss is known to be its own token mean
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    def _how(self) -> str:
        k = len(self.targets)
        if self.accumulation == "num_items_in_batch":
            return f"each micro-batch's loss over the batch's {sum(self.targets)} targets (num_items_in_batch)"
        if self.accumulation == "mean":
            return f"each micro-batch's loss its own mean, over {k}"
        return f"each micro-batch's loss weighted by {self.accumulation}"

    def message(self) -> str:
        c = self.comparison
        k, total = len(self.targets), sum(self.targets)
        held = " and ".join(str(n) for n in self.targets)
        note = f" ({self.note})" if self.note else ""
        if self.passed:
            return (f"{k} micro-batches accumulated ({self._how()}) give the whole batch's gradient of its documents "
                    f"alone under `{self.reduction}`: relative gap {c.total_gap:.3g}, the largest a parameter's "
                    f"{c.worst().gap:.3g} (tolerance {c.tolerance:g}); the micro-batches hold {held} targets{note}")
        worst = c.worst()
        message = (f"{k} micro-batches accumulated ({self._how()}) give a gradient {c.total_gap:.3g} of its norm "
                   f"away from the whole batch's documents alone under `{self.reduction}` (relative gap; the "
                   f"largest a parameter's, {worst.name}, {worst.gap:.3g}; tolerance {c.tolerance:g}); the "
                   f"micro-batches hold {held} targets")
        if self.accumulation == "mean" and self.mean_of_each and self.reduction == "token" and len(set(self.targets)) > 1:
            each = " and ".join(f"1/{k * n}" for n in self.targets)
            message += (f": averaged each on its own and divided by {k}, a target weighs {each}, where the batch's "
                        f"token mean weighs each 1/{total}; pass num_items_in_batch={total} to every micro-batch's "
                        "loss (Trainer does when the model's forward takes it)")
        return message + note

    def to_json(self) -> dict:
        return {"passed": self.passed, "accumulation": self.accumulation, "reduction": self.reduction,
                "microBatches": len(self.targets), "targets": list(self.targets), "note": self.note,
                **self.comparison.to_json(), "message": self.message()}


def _micro_loss(step: TrainingStep, batch: StepBatch, batches: list[StepBatch], accumulation: Accumulation,
                total: int) -> torch.Tensor:
    if accumulation == "num_items_in_batch":
        try:
            return step.packed_loss(batch, total)
        except TypeError as error:
            if step.loss is None:
                raise
            raise TensorcadError("loss", f"accumulation='num_items_in_batch' calls the loss with "
                                         f"num_items_in_batch=, which it does not take ({error})") from None
    loss = step.packed_loss(batch)
    if accumulation == "mean":
        return loss / len(batches)
    return loss * float(accumulation(batch.inputs, [b.inputs for b in batches]))


def check_accumulation(step: TrainingStep, batches: Sequence[StepBatch], reduction: Reduction = "token",
                       accumulation: Accumulation = "num_items_in_batch", *,
                       rtol: float | None = None) -> AccumulationResult:
    """Each micro-batch's loss taken back as the loop does, summed: the whole batch's gradient of its documents."""
    name = name_of(reduction)
    how = accumulation_name(accumulation)
    batches = list(batches)
    if len(batches) < 2:
        raise TensorcadError("micro_batches", f"accumulation needs at least 2 micro-batches, got {len(batches)}")
    named = step.named_parameters()
    params = [p for _, p in named]
    total = sum(b.supervised for b in batches)
    summed: list[torch.Tensor | None] = [None] * len(params)
    with step.mode(train=True) as note:
        for batch in batches:
            with torch.enable_grad():
                loss = _micro_loss(step, batch, batches, accumulation, total)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
            summed = [g if s is None else (s if g is None else s + g) for s, g in zip(summed, grads)]
        reference = reference_gradients(step, batches, reduction)
    comparison = compare_gradients([n for n, _ in named], summed, reference, params, gradient_tolerance(step, rtol))
    mean_of_each = step.loss is None  # the model's own loss and the default are token means
    return AccumulationResult(comparison, how, name, tuple(b.supervised for b in batches), mean_of_each, note)
