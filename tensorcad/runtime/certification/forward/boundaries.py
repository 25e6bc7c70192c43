"""Boundary moves: a document one token longer or shorter moves nothing of the document after it.

Changing a document's tokens (``isolation``) keeps every boundary where it was,
so a model that counts positions straight through the row (GPT-2's learned
positions given no position ids) passes it: each document still sees only
itself. Here a document is made one token shorter (its last token removed) or
one token longer (a token added at its end), so the next document starts one
position earlier or later; that neighbour's outputs, compared at the same
positions *relative to its start*, must not move. Positions restart at every
document in a packed batch (Hugging Face's ``position_ids``), so the batch
given is edited, positions and all, never recounted.

To keep every row of the batch one length, a shorter document drops the last
token of every other row (rows are ``T - 1`` long); a longer one drops the last
token of its own row, so the neighbour is compared only when another document
follows it (an encoder's last document would lose a token it may attend to).
The two runs differ in shape, so they agree only to rounding: the tolerance is
stated (``faithful.default_tolerance``: float32 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from tensorcad.errors import TensorcadError

from .faithful import default_tolerance, largest_difference
from .isolation import _check_inputs, pick, segments
from .calls import run_model

SHORTER, LONGER = -1, +1


@dataclass(frozen=True)
class Move:
    """Document ``document`` of row ``row`` made one token shorter (-1) or longer (+1)."""

    row: int
    document: int
    change: int
    neighbour: int  # the document after it, whose start moved
    start: int  # where the neighbour began before the move
    largest: float  # the neighbour's largest change, at its own relative positions
    position: int  # the neighbour's position (from its start) of the largest change

    def message(self, tolerance: float) -> str:
        how = "shorter" if self.change == SHORTER else "longer"
        return (f"making document {self.document} of row {self.row} one token {how} (document "
                f"{self.neighbour} then starts at {self.start + self.change}, not {self.start}) moved "
                f"document {self.neighbour}'s outputs by {self.largest:.3g} at its position "
                f"{self.position} (tolerance {tolerance:g})")  # what moved; the cause is a hint's to name

    def to_json(self) -> dict:
        return {"row": self.row, "document": self.document, "change": self.change,
                "neighbour": self.neighbour, "start": self.start, "largest": self.largest,
                "position": self.position}


@dataclass(frozen=True)
class BoundaryResult:
    moved: tuple[Move, ...]  # moves whose neighbour changed beyond the tolerance
    moves: int  # boundary moves run (one forward pass each)
    tolerance: float
    largest: float  # the largest change of a neighbour over every move
    forwards: int = 0  # model runs made, the unmoved one included
    method: str = "one boundary a forward"  # how the moves were grouped (`grouped_boundaries`)

    @property
    def passed(self) -> bool:
        return not self.moved and self.moves > 0

    def worst(self) -> Move | None:
        return max(self.moved, key=lambda m: (m.largest != m.largest, m.largest), default=None)

    def message(self) -> str:
        if self.moves == 0:
            return "no boundary could be moved (every row holds one document)"
        worst = self.worst()
        if worst is not None:
            more = len(self.moved) - 1
            return worst.message(self.tolerance) + (f" ({more} more move{'s' if more != 1 else ''} "
                                                    "beyond it)" if more else "")
        return (f"boundaries moved {self.moves} times, the next document unchanged at its own positions "
                f"(largest change {self.largest:.3g}, tolerance {self.tolerance:g})")

    def to_json(self) -> dict:
        worst = self.worst()
        return {"passed": self.passed, "moves": self.moves, "tolerance": self.tolerance,
                "largest": self.largest, "moved": len(self.moved), "forwards": self.forwards, "method": self.method, "worst": worst.to_json() if worst else None,
                "message": self.message()}


def _shorter(tensors: list[torch.Tensor | None], row: int, at: int) -> list[torch.Tensor | None]:
    """Row ``row`` without position ``at``; every other row without its last position."""
    out = []
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        keep = torch.cat([t[:, :-1][:row], torch.cat([t[row, :at], t[row, at + 1:]])[None], t[:, :-1][row + 1:]])
        out.append(keep)
    return out


def _longer(tensors: list[torch.Tensor | None], row: int, at: int, new: list[Any]) -> list[torch.Tensor | None]:
    """Row ``row`` with ``new`` inserted before position ``at`` and its last position dropped."""
    out = []
    for t, value in zip(tensors, new):
        if t is None:
            out.append(None)
            continue
        t = t.clone()
        inserted = torch.cat([t[row, :at], torch.tensor([value], dtype=t.dtype, device=t.device), t[row, at:-1]])
        t[row] = inserted
        out.append(t)
    return out


def check_boundaries(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    vocab: int,
    atol: float | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> BoundaryResult:
    """Move each boundary (or ``sample`` of them, seeded) both ways; the next document must not change."""
    _check_inputs(ids, documents, positions, vocab)
    pieces = segments(documents)
    # (row, document, first, end, next document, next first, next end, next is the row's last piece)
    pairs = [(a, b) for a, b in zip(pieces, pieces[1:]) if a[0] == b[0]]
    row_last = {}
    for piece in pieces:
        row_last[piece[0]] = piece
    moves = []
    for a, b in pairs:
        if a[3] - a[2] >= 2:
            moves.append((SHORTER, a, b))
        if row_last[b[0]] is not b:
            moves.append((LONGER, a, b))
    chosen = pick(len(moves), sample, seed)
    generator = torch.Generator().manual_seed(seed)
    moved: list[Move] = []
    largest = 0.0
    with torch.no_grad():
        base = run_model(model_fn, (ids, documents, positions))
        if base.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(base.shape)} do not start with "
                                             f"(B, T) = {tuple(ids.shape)}")
        tolerance = default_tolerance(base.dtype) if atol is None else float(atol)
        for index in chosen:
            change, (row, document, first, end), (_, neighbour, start, stop) = moves[index]
            if change == SHORTER:
                edited = _shorter([ids, documents, positions], row, end - 1)
            else:
                token = int(torch.randint(0, vocab, (1,), generator=generator))
                position = None if positions is None else int(positions[row, end - 1]) + 1
                edited = _longer([ids, documents, positions], row, end, [token, document, position])
            how = "shorter" if change == SHORTER else "longer"
            out = run_model(model_fn, tuple(edited), f"model_fn (document {document} of row {row} one token {how})")
            got = out[row, start + change:stop + change]
            diff, at = largest_difference(got, base[row, start:stop])
            largest = max(largest, diff)
            if not diff <= tolerance:
                moved.append(Move(row, document, change, neighbour, start, diff, at))
    return BoundaryResult(tuple(moved), len(chosen), tolerance, largest, len(chosen) + 1)
