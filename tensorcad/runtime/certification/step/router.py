"""The router's auxiliary loss under packing: a batch statistic, held as one.

A Hugging Face mixture-of-experts model (Mixtral, Qwen2/3-MoE, OLMoE, GraniteMoE,
Jamba, GPT-OSS) with ``output_router_logits`` adds ``router_aux_loss_coef x
aux_loss`` to its loss: transformers' ``load_balancing_loss_func`` pools every
token of the batch (the padding masked), so it is no sum of documents' own terms
and nothing run alone can stand for it. The step certificates therefore compare
like with like: the model's cross-entropy (its loss less that term) with the
documents' own, and the packed batch's auxiliary loss with the one transformers
computes over the same documents one a row, padded with their mask, which a row
that keeps its documents apart must give (the pooled statistic is the same set
of tokens in another order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class RouterAux:
    """One forward's auxiliary loss and the coefficient the model's loss scales it by."""

    coef: float
    aux: torch.Tensor  # 0-d, with its graph when the forward had one
    pooled_with_padding: float | None = None  # the family's load_balancing_loss_func with no mask (padded runs)
    padding: int = 0  # the padding tokens of the run
    per_row: float | None = None  # the family's function over each row's tokens alone, averaged: a row as a sequence

    @property
    def term(self) -> torch.Tensor:
        """What the model added to its loss."""
        return self.coef * self.aux

    @property
    def value(self) -> float:
        return float(self.aux.detach())


def router_aux(model: Any, out: Any, real: torch.Tensor | None = None) -> RouterAux | None:
    """The auxiliary term of ``model``'s output, or None where its loss adds none (no router logits asked).

    ``real``: a padded run's mask (True on tokens). Then the family's own ``load_balancing_loss_func`` is also
    given the router logits with no mask, pooling the padding: what a loss that drops the mask computes."""
    aux = getattr(out, "aux_loss", None)
    coef = getattr(model, "router_aux_loss_coef", None)
    if not isinstance(aux, torch.Tensor) or isinstance(coef, bool) or not isinstance(coef, (int, float)):
        return None
    aux = aux.to(out.loss.device) if getattr(out, "loss", None) is not None else aux
    padding = 0 if real is None else int((~real).sum())
    family = _family(model, out)
    if family is None:
        return RouterAux(float(coef), aux, padding=padding)
    function, logits, experts, top_k = family
    logits = tuple(layer.detach() for layer in logits)  # diagnoses only: no graph
    try:
        unmasked = float(function(logits, experts, top_k)) if padding else None
        per_row = _per_row(function, logits, experts, top_k, out, real)
    except Exception:  # a family's function of another signature: no diagnosis, the verdict stands
        unmasked = per_row = None
    return RouterAux(float(coef), aux, unmasked, padding, per_row)


def _per_row(function: Callable, logits: tuple, experts: int, top_k: int, out: Any,
             real: torch.Tensor | None) -> float | None:
    """The family's load-balancing loss over each row's real tokens alone, averaged over the rows: a sequence-wise
    loss whose sequence is the row (DeepSeek-V3's complementary loss counts each sequence so)."""
    shape = getattr(getattr(out, "logits", None), "shape", None)
    if shape is None or len(shape) != 3:
        return None
    rows, width = shape[0], shape[1]
    values = []
    for r in range(rows):
        keep = slice(None) if real is None else real[r].to(logits[0].device)
        row = tuple(layer.reshape(rows, width, -1)[r][keep] for layer in logits)
        if row[0].shape[0]:
            values.append(float(function(row, experts, top_k)))
    return sum(values) / len(values) if values else None


def _family(model: Any, out: Any) -> tuple[Callable, tuple, int, int] | None:
    """(the family's load_balancing_loss_func, the router logits, experts, top_k), or None where one is missing."""
    import importlib

    # the family's module: the first class up the model's own whose module holds the function (a subclass of
    # the user's lives elsewhere)
    function = next((f for f in (getattr(importlib.import_module(c.__module__), "load_balancing_loss_func", None)
                                 for c in type(model).__mro__) if f is not None), None)
    logits, config = getattr(out, "router_logits", None), getattr(model, "config", None)
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if function is None or logits is None or not experts:
        return None
    return function, tuple(logits), experts, getattr(config, "num_experts_per_tok", 2)


@dataclass(frozen=True)
class AuxCheck:
    """The packed batch's auxiliary loss against the same documents padded one a row."""

    coef: float
    packed: float
    padded: float
    tolerance: float
    padding_counted: int = 0  # the padded run's term is the one over its padding too: this many tokens counted
    row_as_sequence: bool = False  # a sequence-wise term counted each packed row as one sequence, not each document

    @property
    def gap(self) -> float:
        return abs(self.packed - self.padded)

    @property
    def passed(self) -> bool:
        return self.gap <= self.tolerance  # NaN fails

    def message(self) -> str:
        verb = "equals" if self.passed else "is not"
        counted = (f": the padded run's term pools its {self.padding_counted} padding tokens (it equals the "
                   "family's load_balancing_loss_func with no attention_mask): pass the mask to the aux loss"
                   if self.padding_counted and not self.passed else
                   ": the packed term is the family's load_balancing_loss_func over each packed row as one sequence, "
                   "the padded one over each document: a sequence-wise aux loss must take each document as its "
                   "sequence under packing (Megatron-LM #5696)" if self.row_as_sequence and not self.passed else "")
        return (f"the router's auxiliary loss (x {self.coef:g} in the model's loss, compared apart: a statistic of "
                f"the whole batch, not of each document) {self.packed:.6g} packed {verb} {self.padded:.6g} over the "
                f"documents padded one a row with their mask (gap {self.gap:.3g}, tolerance {self.tolerance:.3g})"
                f"{counted}")

    def to_json(self) -> dict:
        return {"passed": self.passed, "coef": self.coef, "packed": self.packed, "padded": self.padded,
                "gap": self.gap, "tolerance": self.tolerance, "paddingCounted": self.padding_counted,
                "rowAsSequence": self.row_as_sequence}


def held_aux(packed: RouterAux | None, padded: RouterAux | None,
             tolerance_of: Callable[[float], float]) -> AuxCheck | None:
    """The packed auxiliary loss held to the padded one within ``tolerance_of(reference)`` (the loss's own
    tolerance, `loop.loss_tolerance`); None when the model adds none."""
    if packed is None:
        return None
    reference = padded.value if padded is not None else float("nan")  # the padded run lost it: a failure
    tolerance = tolerance_of(reference)
    counted = 0
    if padded is not None and padded.pooled_with_padding is not None and padded.padding:
        # the padded run's term is the unmasked one (and the masked one would not be): padding pooled
        if abs(padded.pooled_with_padding - reference) <= tolerance < abs(packed.value - reference):
            counted = padded.padding
    return AuxCheck(packed.coef, packed.value, reference, tolerance, counted,
                    not counted and _row_as_sequence(packed, padded, tolerance))


def _row_as_sequence(packed: RouterAux, padded: RouterAux | None, tolerance: float) -> bool:
    """The packed term is the per-row one, the padded term (one document a row) the per-document one, and they
    differ: a sequence-wise loss whose sequence was the packed row."""
    if padded is None or packed.per_row is None or padded.per_row is None:
        return False
    return (abs(packed.value - packed.per_row) <= tolerance and abs(padded.value - padded.per_row) <= tolerance
            < abs(packed.value - padded.value))
