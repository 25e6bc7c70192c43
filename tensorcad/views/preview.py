"""The mask preview: what one attention keeps over one row, as a grid of cells.

The editor draws the score matrix of one row (queries down, keys across)
as ``n x n`` cells, each holding the fraction of its scores the mask keeps.
The row is ``packing.draw(rows=1, ...)`` under the operating point's packing
(the one packing function, so the preview shows a row the engine could
sample), or one document filling the row when packing is off.

Counting is exact, and never materialises the ``T x T`` matrix. Every cell
starts as a box of queries and keys; the interval interpreter decides each
box at once ("never": nothing kept, "always": all of it). Only boxes it
cannot decide are split in four and decided again, down to small leaves
that are evaluated point by point with the numpy interpreter. For document
and position masks the undecided boxes lie along the diagonal and the
document edges, so the work grows with ``T`` rather than ``T**2``. A mask the
intervals cannot decide anywhere (arithmetic on ``q`` and ``kv`` with no
order in it) would need every score evaluated; past ``MAX_EVALUATED``
points the leaves are evaluated on a regular subgrid instead, and the
preview says it is an estimate (``exact`` false, with the stride).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from tensorcad.design.expr import Box, Const, Env, Expr, evaluate, interval, read_range
from tensorcad.design.expr.nodes import tensor_reads
from tensorcad.design.masks import MADE_UP_ROLES
from tensorcad.design.model import Attention
from tensorcad.errors import TensorcadError, shown
from tensorcad.packing import Packing, draw

DEFAULT_CELLS = 128
MAX_CELLS = 256
# A box no larger than this many scores is evaluated point by point rather than split. Small: a
# cell on the diagonal or a document's edge is mostly decided once split (at 8,192 tokens a
# 64 x 64 cell evaluated whole cost 2-4x the preview of 8 x 8 leaves; the counts are the same).
LEAF_SCORES = 64
# Points evaluated in one numpy call (memory: a few int64 arrays of this size).
CHUNK = 1 << 20
# Beyond this many evaluated points, leaves are evaluated on a subgrid (an estimate).
MAX_EVALUATED = 1 << 26
# Boxes still undecided at one level of splitting past which the rest are evaluated on the subgrid, not split
# again: a mask the intervals cannot decide, (q - kv) % 3 == 0, split every box down to LEAF_SCORES (2^20
# tokens: 2^28 boxes, minutes and gigabytes).
MAX_UNDECIDED = 1 << 16
# Roles whose values the preview can make up for a row: the packing's own (design.masks).
MADE_UP = MADE_UP_ROLES


@dataclass(frozen=True)
class SampledRow:
    """The row the preview draws: each position's document and position in it."""

    documents: np.ndarray  # (T,) int64, 0 at the start, rising at each boundary
    positions: np.ndarray  # (T,) int64, restarting at each document
    sampled: bool  # True: one row of a packing; False: one document fills the row


@dataclass(frozen=True)
class Preview:
    """Kept fractions of ``n x n`` cells of ``cell`` tokens (the last may be shorter)."""

    fractions: np.ndarray  # (n, n) float64 in [0, 1]
    cell: int
    seq: int
    exact: bool
    stride: int  # 1 when exact; else the subgrid step leaves were evaluated at
    row: SampledRow


def sample_row(seq: int, packing: Packing | None, seed: int = 0) -> SampledRow:
    """One row of ``packing.draw`` (or a single document when ``packing`` is None), the caller's own copy."""
    row = _sample_row(seq, packing, seed)
    return SampledRow(row.documents.copy(), row.positions.copy(), row.sampled)


@functools.lru_cache(maxsize=16)  # a packer's draw (bfd: a whole buffer packed) for one row, asked every edit
def _sample_row(seq: int, packing: Packing | None, seed: int) -> SampledRow:
    if packing is None:
        return SampledRow(np.zeros(seq, dtype=np.int64), np.arange(seq, dtype=np.int64), False)
    documents, positions = draw(rows=1, seq=seq, seed=seed, packing=packing)  # any lengths, any strategy
    return SampledRow(documents[0], positions[0], True)


def check_cells(cells: object, path: str = "cells") -> int:
    if isinstance(cells, bool) or not isinstance(cells, numbers.Integral) or not 1 <= cells <= MAX_CELLS:
        raise TensorcadError(path, f"expected an integer in [1, {MAX_CELLS}], got {shown(cells)}")
    return int(cells)


def _roles(attention: Attention, keep: Expr) -> dict[str, str]:
    roles = {}
    for port, _ in tensor_reads(keep):
        wire = attention.tensors.get(port)
        role = wire.role if wire is not None else None
        if role not in MADE_UP:
            raise TensorcadError(attention.path, f"the mask reads port {port!r}, wired from an input of "
                                                 f"role {role!r}; the preview can only make up "
                                                 f"{' or '.join(MADE_UP)}")
        roles[port] = role
    return roles


def mask_preview(attention: Attention, row: SampledRow, cells: int = DEFAULT_CELLS,
                 head: int = 0) -> Preview:
    """Exact kept fractions of the attention's mask over ``row``, in ``cells x cells`` cells."""
    cells = check_cells(cells)
    if isinstance(head, bool) or not isinstance(head, numbers.Integral) or not 0 <= head < attention.heads:
        raise TensorcadError("head", f"expected an integer in [0, {attention.heads - 1}], got {shown(head)}")
    seq = len(row.documents)
    keep = attention.keep if attention.keep is not None else Const(True)
    roles = _roles(attention, keep)
    tensors = {port: (row.documents if role == "documents" else row.positions)[None, :]
               for port, role in roles.items()}
    cell = -(-seq // cells)
    n = -(-seq // cell)
    counter = _Counter(keep, tensors, roles, int(head), seq)

    i, j = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    q_lo, kv_lo = i * cell, j * cell
    boxes = (i * n + j, q_lo, np.minimum(q_lo + cell, seq) - 1, kv_lo, np.minimum(kv_lo + cell, seq) - 1)
    counter.refine(*boxes)
    sizes = np.minimum(np.arange(n) * cell + cell, seq) - np.arange(n) * cell
    area = (sizes[:, None] * sizes[None, :]).astype(np.float64)
    fractions = counter.kept.reshape(n, n) / area
    return Preview(fractions=np.clip(fractions, 0.0, 1.0), cell=cell, seq=seq, exact=counter.stride == 1,
                   stride=counter.stride, row=row)


class _Counter:
    """Kept scores per cell, found by deciding boxes and splitting the undecided ones."""

    def __init__(self, keep: Expr, tensors: dict[str, np.ndarray], roles: dict[str, str], head: int,
                 seq: int):
        self.keep, self.tensors, self.roles, self.head, self.seq = keep, tensors, roles, head, seq
        self.reads = tensor_reads(keep)
        self.kept = np.zeros(0)
        self.stride = 1

    def refine(self, owner, q_lo, q_hi, kv_lo, kv_hi) -> None:
        self.kept = np.zeros(int(owner.max()) + 1 if len(owner) else 0)
        leaves = []
        while len(owner):
            verdict = self._decide(q_lo, q_hi, kv_lo, kv_hi)
            area = (q_hi - q_lo + 1) * (kv_hi - kv_lo + 1)
            always = np.broadcast_to(verdict.always, owner.shape)
            maybe = np.broadcast_to(verdict.maybe, owner.shape)
            np.add.at(self.kept, owner[always], area[always])
            small = maybe & (area <= LEAF_SCORES)
            if np.count_nonzero(maybe) > MAX_UNDECIDED:
                small = maybe  # splitting is not deciding: evaluate what is left (on the subgrid, past the budget)
            leaves.append(tuple(a[small] for a in (owner, q_lo, q_hi, kv_lo, kv_hi)))
            split = maybe & ~small
            owner, q_lo, q_hi, kv_lo, kv_hi = _split(*(a[split] for a in (owner, q_lo, q_hi, kv_lo, kv_hi)))
        leaf = tuple(np.concatenate(parts) for parts in zip(*leaves))
        self._evaluate(*leaf)

    def _decide(self, q_lo, q_hi, kv_lo, kv_hi):
        b = np.zeros_like(q_lo)
        reads = {}
        for port, index in self.reads:
            lo, hi = (q_lo, q_hi) if index == "q" else (kv_lo, kv_hi)
            reads[(port, index)] = read_range(self.tensors[port], b, lo, hi,
                                              monotone=self.roles[port] == "documents")
        h = np.full_like(q_lo, self.head)
        box = Box(b=(b, b), h=(h, h), q=(q_lo, q_hi), kv=(kv_lo, kv_hi), reads=reads)
        return interval(self.keep, box)

    def _evaluate(self, owner, q_lo, q_hi, kv_lo, kv_hi) -> None:
        """Count kept scores in each leaf box point by point (or on a subgrid, past the budget)."""
        if not len(owner):
            return
        rows, cols = q_hi - q_lo + 1, kv_hi - kv_lo + 1
        total = int((rows * cols).sum())
        if total > MAX_EVALUATED:
            self.stride = math.ceil(math.sqrt(total / MAX_EVALUATED))
        shapes = np.stack([rows, cols], axis=1)
        for shape in np.unique(shapes, axis=0):
            same = (shapes == shape).all(axis=1)
            self._evaluate_shape(int(shape[0]), int(shape[1]), owner[same], q_lo[same], kv_lo[same])

    def _evaluate_shape(self, rows: int, cols: int, owner, q_lo, kv_lo) -> None:
        """Leaves of one shape, ``rows x cols``, in chunks of whole leaves."""
        s = self.stride
        q_off = np.arange(0, rows, s)
        kv_off = np.arange(0, cols, s)
        step = max(1, CHUNK // (len(q_off) * len(kv_off)))
        for start in range(0, len(owner), step):
            part = slice(start, start + step)
            q = q_lo[part, None, None] + q_off[None, :, None]
            kv = kv_lo[part, None, None] + kv_off[None, None, :]
            q, kv = np.broadcast_arrays(q, kv)
            env = Env(b=np.zeros_like(q), h=np.full_like(q, self.head), q=q, kv=kv, tensors=self.tensors)
            kept = np.broadcast_to(evaluate(self.keep, env), q.shape)
            counts = kept.sum(axis=(1, 2)).astype(np.float64)
            if s > 1:
                # Each evaluated point stands for its share of the leaf.
                counts *= (rows * cols) / (len(q_off) * len(kv_off))
            np.add.at(self.kept, owner[part], counts)

def _split(owner, q_lo, q_hi, kv_lo, kv_hi):
    """Each box in (up to) four: halves of its queries by halves of its keys."""
    q_mid = (q_lo + q_hi) // 2
    kv_mid = (kv_lo + kv_hi) // 2
    parts = []
    for a_lo, a_hi in ((q_lo, q_mid), (q_mid + 1, q_hi)):
        for b_lo, b_hi in ((kv_lo, kv_mid), (kv_mid + 1, kv_hi)):
            ok = (a_lo <= a_hi) & (b_lo <= b_hi)
            parts.append((owner[ok], a_lo[ok], a_hi[ok], b_lo[ok], b_hi[ok]))
    return tuple(np.concatenate(p) for p in zip(*parts))
