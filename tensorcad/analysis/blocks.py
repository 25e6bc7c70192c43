"""What a block-sparse kernel computes: every block holding a kept score, computed whole.

FlexAttention computes the score matrix in ``block x block`` tiles (128 by
default). It skips a tile the mask removes entirely, computes a tile it keeps
entirely ("full"), and computes and then masks a tile that straddles the
mask's edge ("partial"). This module counts both for the sampler's rows (the
same ``packing.draw_boundaries`` draw, the same seed).

Every tile is decided whole by the interval interpreter over its ranges:
queries ``i*B .. i*B+B-1``, keys ``j*B ..`` (clipped at ``seq``), and each
tensor read over those ranges (``Rows.over``: a row's document ids never
fall, so their range is the first and last; positions by their true minimum
and maximum). "never" is skipped, "always" is full, "maybe" is partial. For
masks of documents and positions this is exactly FlexAttention's count (held
to ``create_block_mask`` in ``tests/analysis/test_blocks_torch.py``); for any
other mask the intervals are sound, so a tile may be counted partial that the
kernel would skip, never the other way.

Tiles are never evaluated point by point. Along a query block's keys they are
decided coarse to fine: a run of 4**k tiles is decided as one box and split
in four only where the verdict is "maybe". Interval arithmetic over a box
contains it over any box inside it, so this gives the verdicts deciding
every tile alone would, at a cost that grows with the mask's edges rather
than with the square of the sequence.

Long rows. A row of 131,072 tokens has 1,024 x 1,024 tiles. Beyond
``ALL_QUERY_BLOCKS`` query blocks a row, each row decides ``query_blocks``
of them (64 by default), stratified: the k-th lies in the k-th equal slice
of the row, at an offset each row takes from a shuffled sub-stratum, and
each counts for ``blocks / query_blocks``. Full and partial counts are then
estimates: for fixed documents at 131,072 the computed scores are within
0.5% of the exact phase average (``tests/analysis/test_blocks.py``).

Speed. A causal mask's runs wholly after the query block are never asked
about; every box is float64 and gathered by index; with packing off every
row is the same one document, so one row a head is decided (exactly, every
query block) when the mask reads ``b`` only through its tensors. The counts
are cached by everything they depend on.

The rows' own noise. Means a row are reported with a control variate
(``_ControlVariate``): each row's document-causal kept scores, whose exact
mean over every window of the stream is known
(``packing.Stream.causal_keys_every_window``). So ``kept`` for a
document-causal mask is that exact mean, and the tiles computed move with it
rather than with which long documents the 1,024 rows happen to cut. The
per-row counts themselves (``tiles.count_row_blocks``) are untouched and exactly
FlexAttention's.

``kept`` (scores kept a row) is counted exactly from the row's document
pieces when the mask is causal and/or equal documents (n(n + 1)/2 per piece,
or n**2 without causality), and as the sampler's keys per query times
``seq`` otherwise (``attention.keys_per_query``, over the same 1,024 rows).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from tensorcad.design.expr import Const
from tensorcad.design.model import Attention
from tensorcad.packing import Packing

from .attention import ROWS, bare_variables, keys_per_query
from .rows import Rows, packed_rows, tensor_roles
from .tiles import DEFAULT_BLOCK, _decide, _kept_per_row, _positive

ALL_QUERY_BLOCKS = 64
QUERY_BLOCKS = 64


@dataclass(frozen=True)
class BlockCount:
    """Means a row, per head: scores kept, scores in computed tiles, full and partial tiles."""

    kept: float
    computed: float
    full: float
    partial: float

    @property
    def ratio(self) -> float:
        return self.computed / self.kept if self.kept else float("inf")


def block_counts(attention: Attention, seq: int, packing: Packing | None, seed: int = 0,
                 block: int = DEFAULT_BLOCK, rows: int = ROWS,
                 query_blocks: int | None = None) -> BlockCount:
    """Tiles the kernel computes for rows of ``seq`` tokens under ``packing`` (means a row)."""
    seq, block, rows = _positive(seq, "seq"), _positive(block, "block"), _positive(rows, "rows")
    if query_blocks is not None:
        query_blocks = _positive(query_blocks, "query_blocks")
    roles = tuple(sorted(tensor_roles(attention).items()))
    # Everything the count depends on, hashable: the attention itself holds mappings.
    # ... and the head count only where the mask reads h (_count weighs heads only then).
    keep = attention.keep if attention.keep is not None else Const(True)
    heads = attention.heads if "h" in bare_variables(keep) else 1
    key = (attention.keep, heads, attention.causal, attention.window,
           attention.mask is None, roles, seq, packing, int(seed), block, rows, query_blocks)
    found = _CACHE.get(key)
    if found is None:
        found = _count(attention, dict(roles), seq, packing, int(seed), block, rows, query_blocks)
        with _CACHE_LOCK:  # the editor's server counts on several threads at once
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = found
    return found


_CACHE: dict = {}
_CACHE_SIZE = 64
_CACHE_LOCK = threading.Lock()


def clear_caches() -> None:
    """Forget every cached count (benchmarks time the cold path)."""
    _CACHE.clear()


def _count(attention: Attention, role_of: dict[str, str], seq: int, packing: Packing | None,
           seed: int, block: int, rows: int, query_blocks: int | None) -> BlockCount:
    keep = attention.keep if attention.keep is not None else Const(True)
    bare = bare_variables(keep)
    blocks = -(-seq // block)
    if packing is None and "b" not in bare:
        # Every row is the same one document, so rows differ only by their
        # head: deciding one row a head decides them all, exactly.
        distinct = attention.heads if "h" in bare else 1
        batch = Rows.single_documents(distinct, seq)
        share = np.bincount(np.arange(rows) % attention.heads, minlength=attention.heads)[:distinct]
        weight = share / share.sum()
        wanted = query_blocks or max(QUERY_BLOCKS, rows * QUERY_BLOCKS // distinct)
    else:
        distinct = rows
        batch = packed_rows(seq, packing, seed, rows)
        weight = np.full(rows, 1.0 / rows)
        wanted = query_blocks or (blocks if blocks <= ALL_QUERY_BLOCKS else QUERY_BLOCKS)
    query_blocks = min(wanted, blocks)

    rng = np.random.default_rng((seed, 3))
    if query_blocks == blocks:
        qb = np.broadcast_to(np.arange(blocks), (distinct, blocks))
    else:
        sub = np.argsort(rng.random((query_blocks, distinct)), axis=1).T
        strata = np.arange(query_blocks)[None, :] * distinct + sub
        place = (strata + rng.random(strata.shape)) * (blocks / (distinct * query_blocks))
        qb = np.minimum(np.floor(place).astype(np.int64), blocks - 1)
    row = np.broadcast_to(np.arange(distinct)[:, None], qb.shape)
    # A mask of heads: each head takes an equal share of the rows.
    head = row % attention.heads if "h" in bare else np.zeros_like(row)
    full, partial = _decide(keep, role_of, batch, row.ravel(), head.ravel(), qb.ravel(), block, seq)
    scale = blocks / query_blocks
    full_row = full.reshape(qb.shape).sum(axis=1) * scale
    partial_row = partial.reshape(qb.shape).sum(axis=1) * scale
    kept_row = _kept_per_row(keep, role_of, batch)
    if kept_row is None:  # sampled: the mean keys a real token keeps, times the row's real tokens
        real = batch.real if batch.real is not None else np.full(batch.count, seq)
        kept_row = keys_per_query(attention, seq, packing, seed).mean * real.astype(np.float64)
    control = _ControlVariate(batch, weight)
    full_mean, partial_mean = control.mean(full_row), control.mean(partial_row)
    return BlockCount(kept=control.mean(kept_row),
                      computed=(full_mean + partial_mean) * block * block,
                      full=full_mean, partial=partial_mean)


class _ControlVariate:
    """Means a row with the noise of which rows were drawn taken out.

    The control is what a document-causal mask keeps in each row (sum of
    n(n + 1)/2 over its pieces), whose mean over every window of the stream
    the rows were cut from is known exactly (``Rows.causal_keys`` times the
    row's length). Each per-row figure X is reported as the regression
    estimate mean(X) - beta (mean(C) - E[C]), as the sampler does for keys
    (``attention._control_variate``): the rows' own noise, which long
    documents their edges cut, moves the tiles a row computes with the
    scores it keeps. For one document a row every row's control is the same
    and this is the plain mean.
    """

    def __init__(self, batch: Rows, weight: np.ndarray):
        lengths, piece_row = batch.piece_lengths()
        lengths = lengths.astype(np.float64)
        control = np.bincount(piece_row, weights=lengths * (lengths + 1) / 2,
                              minlength=batch.count)
        self.weight = weight
        self.control = control
        self.control_mean = float((weight * control).sum())
        # Over real tokens: a padded row's padding is no document of the control's.
        self.expected = (batch.causal_keys * batch.seq * batch.real_fraction
                         if batch.causal_keys is not None else self.control_mean)
        self.spread = control - self.control_mean
        self.variance = float((weight * self.spread * self.spread).sum())

    def mean(self, values: np.ndarray) -> float:
        plain = float((self.weight * values).sum())
        if self.variance <= 0:
            return plain
        beta = float((self.weight * self.spread * (values - plain)).sum()) / self.variance
        return plain - beta * (self.control_mean - self.expected)
