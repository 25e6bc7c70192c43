"""Document isolation by group testing: every ordered pair of N documents separated in about log₂ N forwards.

`isolation.check_isolation` changes one document a forward (N + 1 forwards).
Here each document gets a code: a distinct set of ``w`` out of ``m`` forwards
(``m`` the least with C(m, w) >= N, ``w = ⌈m/2⌉``); forward ``k`` changes at once
every document whose code holds ``k`` and holds every other output bitwise equal
to the unchanged run. Two distinct codes of one weight never contain each other,
so for every ordered pair (i, j) some forward changes i and compares j: each
pair the one-a-forward check asks about is asked here too, in m + 1 forwards
(32 documents: 7 + 1, not 33; 128: 10 + 1, not 129) — fewer than 2·⌈log₂ N⌉ + 1 (Sperner:
no family of fewer sets separates every ordered pair).

Exactness. Each document is changed by the very shift the one-a-forward check
draws for it (the same generator, in the same order). An output that moves in a
forward moved because of tokens outside its document: a leak, never a false
alarm (the model is run on one shape, so an isolated model's outside outputs are
bitwise those of the unchanged run). A leak the one-a-forward check sees (j moved
when i alone changed) is missed here only if changing i's group together cancels
i's effect on j bit for bit, which no planted fault does and no real leak can be
relied on to do. ``own_change`` and ``still`` read each document's own outputs in
the forwards that change it (an isolated model's own outputs move exactly as when
it is changed alone).

A leak found is attributed by bisection of the group that showed it (each half
changed, down to one document: a few forwards, only on failure), with at most
as many extra forwards as the one-a-forward check would have run; a moved
document whose source that budget leaves unnamed is counted (``unattributed``).
A document that moves only when several of its group change together is named
under the first of the smallest group that moved it.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import Any, Callable

import numpy as np
import torch

from tensorcad.errors import TensorcadError

from .isolation import IsolationResult, Leak, _check_inputs, _resolution, pick, segments
from .calls import run_model


def codes(count: int) -> list[tuple[int, ...]]:
    """For each of ``count`` documents, the forwards that change it: distinct ``w``-sets of ``m`` forwards."""
    if count <= 0:
        return []
    m = 1
    while comb(m, (m + 1) // 2) < count:
        m += 1
    weight = (m + 1) // 2
    found: list[tuple[int, ...]] = []
    for code in combinations(range(m), weight):
        found.append(code)
        if len(found) == count:
            break
    return found


def groups(count: int) -> list[tuple[int, ...]]:
    """The documents (indices 0..count-1) each forward changes, from `codes`."""
    assigned = codes(count)
    forwards = 1 + max((k for code in assigned for k in code), default=-1)
    return [tuple(i for i, code in enumerate(assigned) if k in code) for k in range(forwards)]


class _Runs:
    """The model's runs with a set of documents changed, memoised: what moved, by how much."""

    def __init__(self, model_fn, ids, documents, positions, pieces, shifts, vocab, base_flat):
        self.model_fn, self.ids, self.documents, self.positions = model_fn, ids, documents, positions
        self.pieces, self.shifts, self.vocab, self.base = pieces, shifts, vocab, base_flat
        self.seen: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.forwards = 0

    def run(self, changed: tuple[int, ...]):
        """(moved (B, T) outside the changed documents, |change| (B, T), inside (B, T)) with ``changed`` changed."""
        if changed in self.seen:
            return self.seen[changed]
        ids = self.ids.clone()
        inside = torch.zeros(self.ids.shape, dtype=torch.bool)
        for index in changed:
            row, _, first, end = self.pieces[index]
            ids[row, first:end] = (self.ids[row, first:end] + self.shifts[index]) % self.vocab
            inside[row, first:end] = True
        who = f"model_fn ({len(changed)} document{'s' if len(changed) != 1 else ''} changed together)"
        out = run_model(self.model_fn, (ids, self.documents, self.positions), who).reshape(self.base.shape)
        self.forwards += 1
        moved = (out != self.base).any(dim=-1).cpu() & ~inside  # NaN != NaN counts as moved
        size = (out - self.base).abs().amax(dim=-1).cpu() if out.numel() else torch.zeros(self.ids.shape)
        self.seen[changed] = (moved, size, inside)
        return self.seen[changed]


def check_isolation_grouped(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    vocab: int,
    sample: int | None = None,
    seed: int = 0,
) -> IsolationResult:
    """`isolation.check_isolation`'s certificate in m + 1 forwards (C(m, ⌈m/2⌉) >= the documents changed)."""
    _check_inputs(ids, documents, positions, vocab)
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    generator = torch.Generator().manual_seed(seed)
    shifts = {index: torch.randint(1, vocab, (pieces[index][3] - pieces[index][2],),
                                   generator=generator).to(ids.device, ids.dtype) for index in chosen}
    of_piece = np.full(ids.shape, -1, dtype=np.int64)  # the piece each position belongs to
    for index, (row, _, first, end) in enumerate(pieces):
        of_piece[row, first:end] = index
    with torch.no_grad():
        base = run_model(model_fn, (ids, documents, positions))
        if base.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(base.shape)} do not start with (B, T) = {tuple(ids.shape)}")
        width = int(np.prod(base.shape[2:], dtype=np.int64))
        runs = _Runs(model_fn, ids, documents, positions, pieces, shifts, vocab, base.reshape(*ids.shape, width))
        own: dict[int, float] = {index: 0.0 for index in chosen}
        compared = 0
        found: dict[tuple[int, int], Leak] = {}
        budget = [len(chosen)]  # extra forwards bisection may spend: what the one-a-forward check costs
        unattributed: set[int] = set()
        for group in groups(len(chosen)):
            changed = tuple(chosen[i] for i in group)
            moved, size, inside = runs.run(changed)
            compared += int((~inside).sum())
            for index in changed:
                row, _, first, end = pieces[index]
                change = float(size[row, first:end].max()) if end > first else 0.0
                # a NaN stays (as alone: NaN is no change that can be trusted, the document counts as still)
                own[index] = float("nan") if change != change or own[index] != own[index] else max(own[index], change)
            targets = _moved_pieces(moved, of_piece)
            if targets:
                _attribute(runs, changed, targets, of_piece, found, budget, unattributed)
    still = tuple((pieces[i][0], pieces[i][1]) for i in chosen if not own[i] > 0)
    scale, resolution = _resolution(base.reshape(*ids.shape, width))
    leaks = tuple(found[key] for key in sorted(found))
    unnamed = len(unattributed - {key[1] for key in found})
    return IsolationResult(
        leaks=leaks, perturbed=len(chosen), documents=len(pieces),
        own_change=min(own.values()) if own else 0.0, still=still, compared=compared,
        resolution=resolution, dtype=str(base.dtype).removeprefix("torch."), scale=scale,
        forwards=runs.forwards + 1, method=f"group testing ({runs.forwards} forwards for {len(chosen)} documents"
                                           + (f"; {unnamed} moved documents' sources not sought" if unnamed else "")
                                           + ")",
    )


def _moved_pieces(moved: torch.Tensor, of_piece: np.ndarray) -> set[int]:
    where = moved.numpy()
    return {int(p) for p in np.unique(of_piece[where]) if p >= 0}


def _attribute(runs: _Runs, group: tuple[int, ...], targets: set[int], of_piece, found, budget, unattributed) -> None:
    """Name, for each moved target, the documents of ``group`` that moved it (bisection, within ``budget``)."""
    if len(group) == 1:
        _record(runs, group, targets, of_piece, found)
        return
    half = len(group) // 2
    explained: set[int] = set()
    for part in (group[:half], group[half:]):
        if part not in runs.seen:
            if budget[0] <= 0:
                unattributed.update(targets - explained)
                return
            budget[0] -= 1
        moved, _, _ = runs.run(part)
        hit = targets & _moved_pieces(moved, of_piece)
        if hit:
            _attribute(runs, part, hit, of_piece, found, budget, unattributed)
            explained |= hit
    if targets - explained:  # moved only when the halves changed together: named under the group's first
        _record(runs, group, targets - explained, of_piece, found)


def _record(runs: _Runs, group: tuple[int, ...], targets: set[int], of_piece, found) -> None:
    moved, size, _ = runs.run(group)
    row, document = runs.pieces[group[0]][:2]
    for target in sorted(targets):
        key = (group[0], target)
        if key in found:
            continue
        moved_row, moved_document, first, end = runs.pieces[target]
        at = torch.nonzero(moved[moved_row, first:end]).flatten()
        if not len(at):
            continue
        largest = float(size[moved_row, first:end][at].max())
        found[key] = Leak(row, document, moved_row, moved_document,
                          float("nan") if largest != largest else largest, first + int(at[0]))

