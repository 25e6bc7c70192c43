"""Boundary moves in groups: every document's start moved both ways in four forwards, not two a boundary.

`boundaries.check_boundaries` moves one boundary a forward (a document one token
shorter or longer) and holds the next document's outputs, at its own positions,
to the unmoved run. A document's outputs must not depend on where it starts, so
nothing needs one forward a boundary: here the documents at even places of each
row are made shorter (or longer) together, then those at odd places, and
*every* document not edited whose start moved (by the count of edited documents
before it in its row) is compared at its own positions, within the same
tolerance. Each boundary the one-a-forward check moves has its document edited
in one of these forwards and its neighbour (of the other parity) unedited, so
every neighbour it compares is compared here, once each way, with its start
moved by at least one token.

Rows stay one length as in the one-a-forward check: rows made shorter are cut to
the shortest (their last documents, cut, are not compared); rows made longer
are cut back to T. A move whose neighbour was cut in its grouped forward is then
run alone, exactly as `boundaries` runs it (the same token inserted), so every
move is covered; the forwards are counted (``forwards``).

What differs: a neighbour here starts k tokens earlier or later (k >= 1, the
edited documents before it), where the one-a-forward check moves it by one. A
model whose outputs depend on where a document starts (positions through the
row) fails both; only a dependence that vanished for exactly these shifts and
not for one token (or the reverse) would tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from tensorcad.errors import TensorcadError

from .boundaries import LONGER, SHORTER, BoundaryResult, Move
from .faithful import default_tolerance, largest_difference
from .isolation import _check_inputs, pick, segments
from .calls import run_model


@dataclass(frozen=True)
class GroupedMove(Move):
    """``edited`` documents before ``neighbour`` in its row (``document`` the last) made shorter or longer."""

    shift: int = 0  # how far the neighbour's start moved
    edited: int = 1

    def message(self, tolerance: float) -> str:
        how = "shorter" if self.change == SHORTER else "longer"
        more = f" and {self.edited - 1} before it" if self.edited > 1 else ""
        return (f"making document {self.document} of row {self.row}{more} one token {how} (document "
                f"{self.neighbour} then starts at {self.start + self.shift}, not {self.start}) moved "
                f"document {self.neighbour}'s outputs by {self.largest:.3g} at its position "
                f"{self.position} (tolerance {tolerance:g})")  # what moved; the cause is a hint's to name


def _edited_rows(tensors, pieces, edits, change, tokens):
    """The batch with ``edits`` (piece indices) one token shorter or longer, rows cut to one length;
    and each piece's start shift (None where the piece was edited or cut)."""
    ids, documents, positions = tensors
    T = ids.shape[1]
    rows: list[list[torch.Tensor | None]] = []
    shift_of: dict[int, int] = {}
    ends: dict[int, int] = {}
    by_row: dict[int, list[int]] = {}
    for index, piece in enumerate(pieces):
        by_row.setdefault(piece[0], []).append(index)
    for r in range(ids.shape[0]):
        parts = [[], [], []]
        shift = 0
        for index in by_row.get(r, []):
            _, document, first, end = pieces[index]
            for k, t in enumerate((ids, documents, positions)):
                if t is not None:
                    parts[k].append(t[r, first:end - 1] if (index in edits and change == SHORTER) else t[r, first:end])
            if index in edits:
                if change == LONGER:
                    new = (tokens[index], document, None if positions is None else int(positions[r, end - 1]) + 1)
                    for k, t in enumerate((ids, documents, positions)):
                        if t is not None:
                            parts[k].append(torch.tensor([new[k]], dtype=t.dtype, device=t.device))
                shift_of[index] = None
                shift += change
            else:
                shift_of[index] = shift
                ends[index] = end + shift
        rows.append([torch.cat(p) if p else None for p in parts])
    length = min(row[0].shape[0] for row in rows) if change == SHORTER else T
    out = []
    for k, t in enumerate((ids, documents, positions)):
        out.append(None if t is None else torch.stack([row[k][:length] for row in rows]))
    for index, end in ends.items():
        if end > length:
            shift_of[index] = None  # cut: not compared
    return out, shift_of


def check_boundaries_grouped(
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
    """`boundaries.check_boundaries`'s certificate: the chosen moves, at each parity of each row together."""
    _check_inputs(ids, documents, positions, vocab)
    pieces = segments(documents)
    index_of = {piece: i for i, piece in enumerate(pieces)}
    row_last = {piece[0]: piece for piece in pieces}
    moves = []  # (change, edited piece, neighbour piece), in `boundaries`' order
    for a, b in zip(pieces, pieces[1:]):
        if a[0] != b[0]:
            continue
        if a[3] - a[2] >= 2:
            moves.append((SHORTER, index_of[a], index_of[b]))
        if row_last[b[0]] is not b:
            moves.append((LONGER, index_of[a], index_of[b]))
    chosen = [moves[i] for i in pick(len(moves), sample, seed)]
    generator = torch.Generator().manual_seed(seed)
    tokens = {}  # the token a longer document gains: the one `boundaries` draws, in its order
    for change, a, _ in chosen:
        if change == LONGER:
            tokens[a] = int(torch.randint(0, vocab, (1,), generator=generator))
    place = {}  # a piece's place in its row
    for index, piece in enumerate(pieces):
        place[index] = sum(1 for p in pieces[:index] if p[0] == piece[0])
    moved: dict[tuple[int, int], GroupedMove] = {}
    largest, forwards = 0.0, 1
    with torch.no_grad():
        base = run_model(model_fn, (ids, documents, positions))
        if base.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(base.shape)} do not start with "
                                             f"(B, T) = {tuple(ids.shape)}")
        tolerance = default_tolerance(base.dtype) if atol is None else float(atol)

        def run(change: int, edits: set[int]) -> dict[int, int | None]:
            nonlocal largest, forwards
            edited, shift_of = _edited_rows((ids, documents, positions), pieces, edits, change, tokens)
            how = "shorter" if change == SHORTER else "longer"
            out = run_model(model_fn, tuple(edited), f"model_fn ({len(edits)} documents one token {how} together)")
            forwards += 1
            for index, shift in shift_of.items():
                if not shift:
                    continue
                row, neighbour, start, stop = pieces[index]
                diff, at = largest_difference(out[row, start + shift:stop + shift], base[row, start:stop])
                largest = max(largest, diff)
                if not diff <= tolerance:
                    before = [i for i in edits if pieces[i][0] == row and pieces[i][2] < start]
                    last = max(before, key=lambda i: pieces[i][2])
                    key = (change, index)
                    if key not in moved:
                        moved[key] = GroupedMove(row, pieces[last][1], change, neighbour, start, diff, at,
                                                 shift=shift, edited=len(before))
            return shift_of

        for change in (SHORTER, LONGER):
            wanted = [(a, b) for c, a, b in chosen if c == change]
            covered: set[tuple[int, int]] = set()
            for parity in (0, 1):
                edits = {a for a, _ in wanted if place[a] % 2 == parity}
                if not edits:
                    continue
                shift_of = run(change, edits)
                covered |= {(a, b) for a, b in wanted if a in edits and shift_of.get(b)}
            for a, b in wanted:
                if (a, b) not in covered:
                    run(change, {a})  # its neighbour was cut: moved alone, as `boundaries` moves it
    worst_first = tuple(moved[key] for key in sorted(moved))
    return BoundaryResult(worst_first, len(chosen), tolerance, largest, forwards=forwards,
                          method="both parities of each row at once")
