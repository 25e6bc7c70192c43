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
from typing import Any

import torch

from .loop import loss_tolerance


@dataclass(frozen=True)
class RouterAux:
    """One forward's auxiliary loss and the coefficient the model's loss scales it by."""

    coef: float
    aux: torch.Tensor  # 0-d, with its graph when the forward had one

    @property
    def term(self) -> torch.Tensor:
        """What the model added to its loss."""
        return self.coef * self.aux

    @property
    def value(self) -> float:
        return float(self.aux.detach())


def router_aux(model: Any, out: Any) -> RouterAux | None:
    """The auxiliary term of ``model``'s output, or None where its loss adds none (no router logits asked)."""
    aux = getattr(out, "aux_loss", None)
    coef = getattr(model, "router_aux_loss_coef", None)
    if not isinstance(aux, torch.Tensor) or isinstance(coef, bool) or not isinstance(coef, (int, float)):
        return None
    return RouterAux(float(coef), aux.to(out.loss.device) if getattr(out, "loss", None) is not None else aux)


@dataclass(frozen=True)
class AuxCheck:
    """The packed batch's auxiliary loss against the same documents padded one a row."""

    coef: float
    packed: float
    padded: float
    tolerance: float

    @property
    def gap(self) -> float:
        return abs(self.packed - self.padded)

    @property
    def passed(self) -> bool:
        return self.gap <= self.tolerance  # NaN fails

    def message(self) -> str:
        verb = "equals" if self.passed else "is not"
        return (f"the router's auxiliary loss (x {self.coef:g} in the model's loss, compared apart: a statistic of "
                f"the whole batch, not of each document) {self.packed:.6g} packed {verb} {self.padded:.6g} over the "
                f"documents padded one a row with their mask (gap {self.gap:.3g}, tolerance {self.tolerance:.3g})")

    def to_json(self) -> dict:
        return {"passed": self.passed, "coef": self.coef, "packed": self.packed, "padded": self.padded,
                "gap": self.gap, "tolerance": self.tolerance}


def held_aux(packed: RouterAux | None, padded: RouterAux | None, dtype: torch.dtype, atol: float | None,
             rtol: float | None) -> AuxCheck | None:
    """The packed auxiliary loss held to the padded one (None when the model adds none)."""
    if packed is None:
        return None
    reference = padded.value if padded is not None else float("nan")  # the padded run lost it: a failure
    return AuxCheck(packed.coef, packed.value, reference, loss_tolerance(dtype, reference, atol, rtol))
