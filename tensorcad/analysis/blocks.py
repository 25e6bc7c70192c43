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
per-row counts themselves (``count_row_blocks``) are untouched and exactly
FlexAttention's.

``kept`` (scores kept a row) is counted exactly from the row's document
pieces when the mask is causal and/or equal documents (n(n + 1)/2 per piece,
or n**2 without causality), and as the sampler's keys per query times
``seq`` otherwise (``attention.keys_per_query``, over the same 1,024 rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorcad.design.expr import Box, Const, Expr, interval, variables
from tensorcad.design.expr.nodes import Binary, Compare, Read, Var, tensor_reads
from tensorcad.design.model import Attention
from tensorcad.errors import check_integer
from tensorcad.packing import MAX_SEQ, Packing

from .attention import ROWS, _gathered, bare_variables, keys_per_query
from .rows import Rows, packed_rows, tensor_roles

DEFAULT_BLOCK = 128
ALL_QUERY_BLOCKS = 64
QUERY_BLOCKS = 64
SPLIT = 4


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


@dataclass(frozen=True)
class RowBlocks:
    """Exact tile counts of given rows: ``full``/``partial`` (rows, heads, query blocks).

    ``heads`` is 1 when the mask does not read ``h``. ``kept`` (rows,) is
    scores kept a row, mean over heads.
    """

    full: np.ndarray
    partial: np.ndarray
    kept: np.ndarray


def _positive(value: object, path: str) -> int:
    return check_integer(value, path, 1, MAX_SEQ)


def block_counts(attention: Attention, seq: int, packing: Packing | None, seed: int = 0,
                 block: int = DEFAULT_BLOCK, rows: int = ROWS,
                 query_blocks: int | None = None) -> BlockCount:
    """Tiles the kernel computes for rows of ``seq`` tokens under ``packing`` (means a row)."""
    seq, block, rows = _positive(seq, "seq"), _positive(block, "block"), _positive(rows, "rows")
    if query_blocks is not None:
        query_blocks = _positive(query_blocks, "query_blocks")
    roles = tuple(sorted(tensor_roles(attention).items()))
    # Everything the count depends on, hashable: the attention itself holds mappings.
    key = (attention.keep, attention.heads, attention.causal, attention.window,
           attention.mask is None, roles, seq, packing, int(seed), block, rows, query_blocks)
    found = _CACHE.get(key)
    if found is None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        found = _CACHE[key] = _count(attention, dict(roles), seq, packing, int(seed), block,
                                     rows, query_blocks)
    return found


_CACHE: dict = {}
_CACHE_SIZE = 64


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
    kept_row = _kept_per_row(attention, keep, role_of, batch, packing, seed)
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
        self.expected = (batch.causal_keys * batch.seq if batch.causal_keys is not None
                         else self.control_mean)
        self.spread = control - self.control_mean
        self.variance = float((weight * self.spread * self.spread).sum())

    def mean(self, values: np.ndarray) -> float:
        plain = float((self.weight * values).sum())
        if self.variance <= 0:
            return plain
        beta = float((self.weight * self.spread * (values - plain)).sum()) / self.variance
        return plain - beta * (self.control_mean - self.expected)


def count_row_blocks(attention: Attention, documents: np.ndarray,
                     positions: np.ndarray | None = None, block: int = DEFAULT_BLOCK) -> RowBlocks:
    """Every tile of the given rows, decided exactly as ``block_counts`` decides them.

    ``documents`` is (rows, seq) or (seq,); ``positions`` defaults to
    ``packing.positions_of(documents)``. For tests and the harness, which
    hold these counts to FlexAttention's own ``BlockMask``.
    """
    roles = tensor_roles(attention)
    keep = attention.keep if attention.keep is not None else Const(True)
    batch = Rows.from_arrays(documents, positions)
    block = _positive(block, "block")
    rows, seq = batch.count, batch.seq
    blocks = -(-seq // block)
    heads = attention.heads if "h" in variables(keep) else 1
    row, head, qb = (a.ravel() for a in np.meshgrid(np.arange(rows), np.arange(heads),
                                                    np.arange(blocks), indexing="ij"))
    full, partial = _decide(keep, dict(roles), batch, row, head, qb, block, seq)
    shape = (rows, heads, blocks)
    kept = _kept_per_row(attention, keep, dict(roles), batch, None, 0, dense_heads=heads)
    return RowBlocks(full=full.reshape(shape), partial=partial.reshape(shape), kept=kept)


def tile_verdicts(attention: Attention, documents: np.ndarray, positions: np.ndarray | None = None,
                  block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(full, partial) booleans (rows, heads, query blocks, key blocks), every tile decided alone.

    The flat form of what ``count_row_blocks`` decides coarse to fine; for
    small rows (tests, the editor's preview), since it holds every tile.
    """
    roles = tensor_roles(attention)
    keep = attention.keep if attention.keep is not None else Const(True)
    batch = Rows.from_arrays(documents, positions)
    block = _positive(block, "block")
    rows, seq = batch.count, batch.seq
    blocks = -(-seq // block)
    heads = attention.heads if "h" in variables(keep) else 1
    r, h, i, j = np.meshgrid(np.arange(rows), np.arange(heads), np.arange(blocks),
                             np.arange(blocks), indexing="ij")
    lo_q, lo_kv = i * block, j * block
    hi_q, hi_kv = np.minimum(lo_q + block, seq) - 1, np.minimum(lo_kv + block, seq) - 1
    reads = {(port, index): batch.over(roles[port], r, *((lo_q, hi_q) if index == "q"
                                                         else (lo_kv, hi_kv)))
             for port, index in tensor_reads(keep)}
    verdict = interval(keep, Box(b=(r, r), h=(h, h), q=(lo_q, hi_q), kv=(lo_kv, hi_kv), reads=reads))
    return (np.broadcast_to(verdict.always, r.shape).copy(),
            np.broadcast_to(verdict.maybe, r.shape).copy())


def _decide(keep: Expr, role_of: dict[str, str], batch: Rows, row: np.ndarray, head: np.ndarray,
            qb: np.ndarray, block: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """Full and partial tiles in each (row, head, query block), decided coarse to fine.

    Every range the interpreter reads is float64 and gathered flat (one index
    a box), so a level costs a handful of passes over its boxes.
    """
    f64 = np.float64
    blocks = -(-seq // block)
    entries = len(row)
    q_lo = (qb * block).astype(f64)
    q_hi = (np.minimum(qb * block + block, seq) - 1).astype(f64)
    bare = bare_variables(keep)
    b = row.astype(f64) if "b" in bare else None
    h = head.astype(f64) if "h" in bare else None
    reads = tensor_reads(keep)
    levels = 0
    while SPLIT**levels < blocks:
        levels += 1
    # Each read's range over every run of SPLIT**k tiles, for every row: a
    # pyramid of minima and maxima, so deciding a run never reads the row again.
    pyramids = {port: _pyramid(batch, role_of[port], block, seq, levels)
                for port in sorted({port for port, _ in reads})}
    q_reads = {}
    for port, index in reads:
        if index == "q":
            lo, hi, groups = pyramids[port][0]
            flat = row * groups + qb
            q_reads[(port, "q")] = (lo[flat], hi[flat])

    # A causal mask keeps no key after its query: runs of tiles wholly after
    # the query block are skipped unasked (the interpreter would say "never").
    last_tile = qb if _keeps_only_the_past(keep) else np.full(entries, blocks - 1)
    kv_reads = [port for port, index in reads if index == "kv"]
    # A box of every key of a row is almost never decided: start a level down.
    level = max(levels - 1, 0)
    span = SPLIT**level
    runs = -(-blocks // span)
    owner = np.repeat(np.arange(entries), runs)
    run = np.tile(np.arange(runs), entries)  # index of the run of SPLIT**level tiles
    wanted = np.flatnonzero(run <= last_tile[owner] // span)
    owner, run = owner[wanted], run[wanted]
    full = np.zeros(entries, dtype=np.int64)
    while True:
        box_reads = {key: (lo[owner], hi[owner]) for key, (lo, hi) in q_reads.items()}
        if kv_reads:
            flat = row[owner] * -(-blocks // span) + run
            for port in kv_reads:
                lo, hi, _ = pyramids[port][level]
                box_reads[(port, "kv")] = (lo[flat], hi[flat])
        kv_lo = np.multiply(run, span * block, dtype=f64)
        kv_hi = np.minimum(kv_lo + (span * block - 1), seq - 1)
        box = Box(b=_gathered(b, owner), h=_gathered(h, owner), q=(q_lo[owner], q_hi[owner]),
                  kv=(kv_lo, kv_hi), reads=box_reads)
        verdict = interval(keep, box)
        # Indices, not boolean masks: numpy gathers by index many times faster.
        always = np.flatnonzero(np.broadcast_to(verdict.always, owner.shape))
        maybe = np.flatnonzero(np.broadcast_to(verdict.maybe, owner.shape))
        if blocks % span == 0:
            full += np.bincount(owner[always], minlength=entries) * span
        else:  # the last run of a row is short
            width = np.minimum((run[always] + 1) * span, blocks) - run[always] * span
            full += np.bincount(owner[always], weights=width, minlength=entries).astype(np.int64)
        if level == 0:
            partial = np.bincount(owner[maybe], minlength=entries)
            break
        level, span = level - 1, span // SPLIT
        run = _children(run[maybe], SPLIT)
        owner = np.repeat(owner[maybe], SPLIT)
        wanted = np.flatnonzero(run <= last_tile[owner] // span)
        owner, run = owner[wanted], run[wanted]
    return full, partial.astype(np.int64)


def _children(run: np.ndarray, split: int) -> np.ndarray:
    """Runs ``run * split + k`` for k < split, each run's children together.

    Filled a column at a time: much faster than broadcasting a (n, 4) sum.
    """
    out = np.empty((len(run), split), dtype=np.int64)
    base = run * split
    for k in range(split):
        np.add(base, k, out=out[:, k])
    return out.ravel()


def _pyramid(batch: Rows, role: str, block: int, seq: int, levels: int):
    """[(min, max, groups)] of ``role`` over runs of SPLIT**k tiles, k = 0..levels.

    min and max are flat float64 (rows * groups): run g of row r at r * groups + g.
    """
    lo, hi = batch.over_blocks(role, block)
    lo, hi = lo.astype(np.float64), hi.astype(np.float64)
    out = [(lo.ravel(), hi.ravel(), lo.shape[1])]
    for _ in range(levels):
        pad = -lo.shape[1] % SPLIT
        if pad:
            lo = np.pad(lo, ((0, 0), (0, pad)), constant_values=np.inf)
            hi = np.pad(hi, ((0, 0), (0, pad)), constant_values=-np.inf)
        lo = lo.reshape(len(lo), -1, SPLIT).min(axis=2)
        hi = hi.reshape(len(hi), -1, SPLIT).max(axis=2)
        out.append((lo.ravel(), hi.ravel(), lo.shape[1]))
    return out


# -- scores kept ---------------------------------------------------------------


def _conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "&":
        return _conjuncts(expr.left) + _conjuncts(expr.right)
    return [expr]


def _is_causal(expr: Expr) -> bool:
    q, kv = Var("q"), Var("kv")
    return isinstance(expr, Compare) and (
        (expr.op == ">=" and expr.left == q and expr.right == kv)
        or (expr.op == "<=" and expr.left == kv and expr.right == q))


def _keeps_only_the_past(keep: Expr) -> bool:
    """Whether ``q >= kv`` is one of the mask's conjuncts (so no later key is ever kept)."""
    return any(_is_causal(part) for part in _conjuncts(keep))


def _is_same_document(expr: Expr, role_of: dict[str, str]) -> bool:
    if not (isinstance(expr, Compare) and expr.op == "==" and isinstance(expr.left, Read)
            and isinstance(expr.right, Read) and expr.left.port == expr.right.port
            and role_of.get(expr.left.port) == "documents"):
        return False
    return {expr.left.index[1], expr.right.index[1]} == {Var("q"), Var("kv")}


def countable(keep: Expr, role_of: dict[str, str]) -> tuple[bool, bool] | None:
    """(causal, same document) when the mask is only those, else None."""
    causal = same = False
    for part in _conjuncts(keep):
        if _is_causal(part):
            causal = True
        elif _is_same_document(part, role_of):
            same = True
        elif not (isinstance(part, Const) and part.value is True):
            return None
    return causal, same


def _kept_per_row(attention: Attention, keep: Expr, role_of: dict[str, str], batch: Rows,
                  packing: Packing | None, seed: int, dense_heads: int | None = None) -> np.ndarray:
    """Scores kept in each row: exact from the pieces, else sampled (or dense for given rows)."""
    kinds = countable(keep, role_of)
    seq = batch.seq
    if kinds is not None:
        causal, same = kinds
        if same:
            lengths, piece_row = batch.piece_lengths()
        else:
            lengths, piece_row = np.full(batch.count, seq), np.arange(batch.count)
        lengths = lengths.astype(np.float64)
        per_piece = lengths * (lengths + 1) / 2 if causal else lengths**2
        return np.bincount(piece_row, weights=per_piece, minlength=batch.count)
    if dense_heads is None:
        estimate = keys_per_query(attention, seq, packing, seed)
        return np.full(batch.count, estimate.mean * seq)
    return _dense_kept(keep, role_of, batch, dense_heads)


def _dense_kept(keep: Expr, role_of: dict[str, str], batch: Rows, heads: int) -> np.ndarray:
    """Every score of given rows evaluated, mean over heads (rows the harness hands in are small)."""
    from .attention import _evaluate_at

    seq = batch.seq
    out = np.zeros(batch.count)
    q = np.arange(seq)[:, None]
    kv = np.arange(seq)[None, :]
    for r in range(batch.count):
        for h in range(heads):
            rr = np.full((seq, seq), r)
            hh = np.full((seq, seq), h)
            qq, kk = np.broadcast_arrays(q, kv)
            out[r] += _evaluate_at(keep, role_of, batch, rr, hh, qq, kk).sum()
    return out / heads
