"""The loss's reduction: how the cross-entropies of a batch's tokens become one number, and what each weighs.

A batch of D documents (a document with targets: n of them), in R rows (a row
with targets: n_r of them), N targets in all:

| reduction | the loss | a target of a document weighs | packing-invariant |
|---|---|---|---|
| ``token`` | the mean over every target of the batch | 1/N | yes |
| ``document`` | the mean over documents of each one's mean | 1/(D n) | yes: needs the boundaries |
| ``sequence`` | the mean over rows of each row's mean | 1/(R n_r) | no: the row decides |

Trained one document a row, a per-row mean *is* the document mean; packed, the
same loop weighs a target by the row it landed in. Documents ``[a..g]`` and
``[x, y]`` in one row: the row's mean weighs all nine 1/9, the document mean
``a..g`` 1/14 each and ``x, y`` 1/4 each, that is ½ (1/7 + 1/2).

A reduction is one of these names, or the user's callable
``reduce(tokens, rows) -> loss``: ``tokens`` each document's targets'
cross-entropies (1D tensors, in batch order), ``rows`` the row of each.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Sequence

import torch

from tensorcad.errors import TensorcadError

REDUCTIONS = ("token", "document", "sequence")
INVARIANT = {"token": True, "document": True, "sequence": False}  # unchanged by how documents share rows

Reduction = str | Callable[[Sequence[torch.Tensor], Sequence[int]], torch.Tensor]


def token_mean(tokens: Sequence[torch.Tensor], rows: Sequence[int]) -> torch.Tensor:
    return torch.cat(list(tokens)).sum() / sum(t.numel() for t in tokens)


def document_mean(tokens: Sequence[torch.Tensor], rows: Sequence[int]) -> torch.Tensor:
    return torch.stack([t.mean() for t in tokens if t.numel()]).mean()


def sequence_mean(tokens: Sequence[torch.Tensor], rows: Sequence[int]) -> torch.Tensor:
    means = []
    for row in sorted(set(rows)):
        mine = [t for t, r in zip(tokens, rows) if r == row]
        count = sum(t.numel() for t in mine)
        if count:
            means.append(torch.cat(mine).sum() / count)
    return torch.stack(means).mean()


NAMED = {"token": token_mean, "document": document_mean, "sequence": sequence_mean}


def name_of(reduction: Reduction) -> str:
    """The reduction's name, or the callable's (``reduction`` checked)."""
    if isinstance(reduction, str):
        if reduction not in NAMED:
            raise TensorcadError("reduction", f"unknown reduction {reduction!r} (reductions: {', '.join(REDUCTIONS)}, "
                                              "or a callable (tokens, rows) -> loss)")
        return reduction
    if not callable(reduction):
        raise TensorcadError("reduction", f"expected a name or a callable, got {type(reduction).__name__}")
    return getattr(reduction, "__name__", type(reduction).__name__)


def reduce(reduction: Reduction, tokens: Sequence[torch.Tensor], rows: Sequence[int]) -> torch.Tensor:
    """The loss ``reduction`` makes of each document's token losses."""
    name_of(reduction)
    if not any(t.numel() for t in tokens):
        raise TensorcadError("labels", "no document holds a target of its own (every supervised label is "
                                       "predicted across a boundary)")
    fn = NAMED[reduction] if isinstance(reduction, str) else reduction
    return fn(tokens, rows)


def weights(reduction: str, counts: Sequence[int], rows: Sequence[int]) -> tuple[Fraction, ...]:
    """What each of a document's targets weighs in the loss (0 for a document without targets), exactly."""
    name_of(reduction)
    if reduction == "token":
        total = sum(counts)
        return tuple(Fraction(1, total) if n else Fraction(0) for n in counts)
    if reduction == "document":
        documents = sum(1 for n in counts if n)
        return tuple(Fraction(1, documents * n) if n else Fraction(0) for n in counts)
    per_row: dict[int, int] = {}
    for n, row in zip(counts, rows):
        per_row[row] = per_row.get(row, 0) + n
    live = sum(1 for n in per_row.values() if n)
    return tuple(Fraction(1, live * per_row[row]) if n else Fraction(0) for n, row in zip(counts, rows))


def describe_weights(reduction: str, counts: Sequence[int], pieces: Sequence[tuple[int, int, int, int]],
                     shown: int = 3) -> str:
    """``reduction`` weighs a target of document 0 of row 0 (7 targets) 1/14, ...: its first documents."""
    rows = [piece[0] for piece in pieces]
    told = []
    for w, n, (row, document, _, _) in zip(weights(reduction, counts, rows), counts, pieces):
        if n and len(told) < shown:
            told.append(f"a target of document {document} of row {row} ({n} target{'s' if n != 1 else ''}) {w}")
    more = sum(1 for n in counts if n) - len(told)
    return f"`{reduction}` weighs " + ", ".join(told) + (f", and {more} more" if more > 0 else "")


def weights_json(reduction: Any, counts: Sequence[int], rows: Sequence[int]) -> list[str] | None:
    """The weights as exact fractions ("1/14"), for a named reduction; None for a callable."""
    if not isinstance(reduction, str):
        return None
    return [str(w) for w in weights(reduction, counts, rows)]
