"""Faithfulness: each packed document's outputs equal the same document run alone.

Isolation says no document reaches another; it does not say a document is
computed as it would be by itself. A model can keep documents apart and still
lose a sliding window (transformers drops Mistral's when handed a 4D mask),
count positions through the row (GPT-2's learned positions with a
block-diagonal mask) or change a mask. So each document piece of each row is
cut out and run as a one-document row of its own, positions restarting at 0,
and its outputs compared with those it had inside the packed row, position by
position. The two runs add up the same scores in different orders and over
different shapes, so they agree only to rounding: the tolerance is stated, and
defaults to what the outputs' dtype can hold (float32: 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from tensorcad.errors import TensorcadError

from .isolation import _check_inputs, pick, segments
from .calls import run_model, same_positions

# The largest difference two float computations of one thing may show, by dtype:
# float32 rounding over a few layers of a small model stays well under 1e-5.
TOLERANCES = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}


def default_tolerance(dtype: torch.dtype) -> float:
    return TOLERANCES.get(dtype, 1e-5)


@dataclass(frozen=True)
class Difference:
    """Document ``document`` of row ``row`` (``length`` tokens from ``first``) differs from itself run alone."""

    row: int
    document: int
    first: int  # where the document begins in its row
    length: int
    position: int  # position within the document of the largest difference
    largest: float

    def message(self, tolerance: float) -> str:
        return (f"document {self.document} of row {self.row} ({self.length} tokens from position "
                f"{self.first}) differs from the same document run alone by {self.largest:.3g} "
                f"at its position {self.position} (tolerance {tolerance:g})")

    def to_json(self) -> dict:
        return {"row": self.row, "document": self.document, "first": self.first, "length": self.length,
                "position": self.position, "largest": self.largest}


@dataclass(frozen=True)
class FaithfulResult:
    differences: tuple[Difference, ...]  # documents beyond the tolerance
    compared: int  # documents run alone
    documents: int  # document pieces in the batch (compared is fewer when sampled)
    tolerance: float
    largest: float  # the largest difference over every compared document, within tolerance or not
    calls: int = 0  # model calls made, the packed run included
    method: str = "one call a document"  # how the documents were run alone (`batched_faithful`)
    reference: str = "the model_fn itself on each document alone"  # what was compared (`model_reference`)

    @property
    def passed(self) -> bool:
        return not self.differences and self.compared > 0

    def worst(self) -> Difference | None:
        return max(self.differences, key=lambda d: (d.largest != d.largest, d.largest), default=None)

    def message(self) -> str:
        if self.compared == 0:
            return "no document was compared"
        worst = self.worst()
        if worst is not None:
            more = len(self.differences) - 1
            return worst.message(self.tolerance) + (
                f" ({more} more document{'s' if more != 1 else ''} beyond it)" if more else "")
        return (f"faithful: {self.compared} documents each equal to itself run alone, largest "
                f"difference {self.largest:.3g} (tolerance {self.tolerance:g}; against {self.reference})")

    def to_json(self) -> dict:
        worst = self.worst()
        return {"passed": self.passed, "compared": self.compared, "documents": self.documents,
                "tolerance": self.tolerance, "largest": self.largest, "differing": len(self.differences),
                "calls": self.calls, "method": self.method, "reference": self.reference,
                "worst": worst.to_json() if worst else None, "message": self.message()}


def largest_difference(got: torch.Tensor, want: torch.Tensor) -> tuple[float, int]:
    """(largest absolute difference, the position along dim 0 where it is); NaN counts as infinite."""
    diff = (got.double() - want.double()).abs().reshape(got.shape[0], -1).amax(dim=-1)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    position = int(diff.argmax())
    return float(diff[position]), position


def alone_outputs(alone_fn: Callable[..., Any], ids: torch.Tensor, documents: torch.Tensor,
                  positions: torch.Tensor | None, piece: tuple[int, int, int, int], who: str) -> torch.Tensor:
    """One document piece run by itself: its ids as a one-document row, document id 0 throughout,
    positions 0..L-1 (None when the packed batch passed none, so the model counts its own); (L, ...) out."""
    row, document, first, end = piece
    length = end - first
    alone_ids = ids[row:row + 1, first:end]
    alone_docs = torch.zeros_like(alone_ids, dtype=documents.dtype)
    alone_pos = None if positions is None else torch.arange(length, dtype=positions.dtype,
                                                            device=positions.device)[None]
    alone = run_model(alone_fn, (alone_ids, alone_docs, alone_pos),
                      f"{who} (document {document} of row {row} run alone)")
    if alone.shape[:2] != (1, length):
        raise TensorcadError(who, f"outputs shaped {tuple(alone.shape)} for a document of {length} tokens "
                                  f"(expected (1, {length}, ...))")
    return alone[0]


def check_faithful(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    alone_fn: Callable[..., Any] | None = None,
    atol: float | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> FaithfulResult:
    """Run each document alone (``alone_fn``; default the Hugging Face model behind ``model_fn``'s own forward,
    `model_reference`, else ``model_fn`` itself) and compare it with the packed row, position by position,
    whatever each position's output is (logits, log-probabilities, a hidden state)."""
    from .model_reference import reference_of

    _check_inputs(ids, documents, positions, vocab=2)
    who = "alone_fn" if alone_fn is not None else "model_fn"
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    differences: list[Difference] = []
    largest = 0.0
    with torch.no_grad():
        packed, alone_fn, reference = reference_of(model_fn, alone_fn, ids, documents, positions)
        alone_fn = alone_fn or model_fn
        if packed is None:
            packed = run_model(model_fn, (ids, documents, positions))
        if packed.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(packed.shape)} do not start with "
                                             f"(B, T) = {tuple(ids.shape)}")
        tolerance = default_tolerance(packed.dtype) if atol is None else float(atol)
        for index in chosen:
            row, document, first, end = pieces[index]
            alone = alone_outputs(alone_fn, ids, documents, positions, pieces[index], who)
            same_positions(alone, packed[row, first:end], who)
            diff, position = largest_difference(packed[row, first:end], alone)
            largest = max(largest, diff)
            if not diff <= tolerance:
                differences.append(Difference(row, document, first, end - first, position, diff))
    return FaithfulResult(tuple(differences), len(chosen), len(pieces), tolerance, largest, len(chosen) + 1,
                          reference=reference)
