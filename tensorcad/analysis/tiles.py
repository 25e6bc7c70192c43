"""Tiles: every 128 x 128 block of given rows decided empty, partial or full.

The exact, per-row half of the block counter: ``count_row_blocks`` and
``tile_verdicts`` decide the tiles of rows handed in (the harness holds them to
FlexAttention's own ``BlockMask``), and ``blocks.block_counts`` samples rows and
query blocks through the same ``_decide`` for the report. Tiles are decided
coarse to fine: a run of 4**k tiles is one box for the interval interpreter,
split in four only where the verdict is "maybe".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorcad.design.block_ranges import ranges_of
from tensorcad.design.expr import Box, Const, Expr, interval, variables
from tensorcad.design.expr.nodes import tensor_reads
from tensorcad.design.masks import BLOCK, countable, keeps_only_the_past
from tensorcad.design.model import Attention
from tensorcad.errors import check_integer
from tensorcad.packing import MAX_SEQ

from .attention import _gathered, bare_variables
from .range_tiles import decide_from_ranges
from .rows import Rows, tensor_roles

DEFAULT_BLOCK = BLOCK
SPLIT = 4  # a maybe-run of tiles splits into this many


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


@dataclass(frozen=True)
class _Tiles:
    """What deciding the tiles of given rows starts from, for both forms below."""

    roles: dict[str, str]
    keep: Expr
    batch: Rows
    block: int
    blocks: int
    heads: int  # 1 when the mask does not read h

    @classmethod
    def of(cls, attention: Attention, documents, positions, block: int) -> _Tiles:
        keep = attention.keep if attention.keep is not None else Const(True)
        batch = Rows.from_arrays(documents, positions)
        block = _positive(block, "block")
        return cls(dict(tensor_roles(attention)), keep, batch, block, -(-batch.seq // block),
                   attention.heads if "h" in variables(keep) else 1)


def count_row_blocks(attention: Attention, documents: np.ndarray,
                     positions: np.ndarray | None = None, block: int = DEFAULT_BLOCK) -> RowBlocks:
    """Every tile of the given rows, decided exactly as ``block_counts`` decides them.

    ``documents`` is (rows, seq) or (seq,); ``positions`` defaults to
    ``packing.positions_of(documents)``. For tests and the harness, which
    hold these counts to FlexAttention's own ``BlockMask``.
    """
    t = _Tiles.of(attention, documents, positions, block)
    full, partial = _tile_counts(t)
    kept = _kept_per_row(t.keep, t.roles, t.batch)
    if kept is None:
        kept = _dense_kept(t.keep, t.roles, t.batch, t.heads)
    return RowBlocks(full=full, partial=partial, kept=kept)


def row_tile_counts(attention: Attention, documents: np.ndarray, positions: np.ndarray | None = None,
                    block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """``count_row_blocks``' full and partial tiles without its kept scores, which it counts densely:
    for long rows (the editor's preview counts the tiles of rows it cannot draw)."""
    return _tile_counts(_Tiles.of(attention, documents, positions, block))


def _tile_counts(t: _Tiles) -> tuple[np.ndarray, np.ndarray]:
    row, head, qb = (a.ravel() for a in np.meshgrid(np.arange(t.batch.count), np.arange(t.heads),
                                                    np.arange(t.blocks), indexing="ij"))
    full, partial = _decide(t.keep, t.roles, t.batch, row, head, qb, t.block, t.batch.seq)
    shape = (t.batch.count, t.heads, t.blocks)
    return full.reshape(shape), partial.reshape(shape)


def tile_verdicts(attention: Attention, documents: np.ndarray, positions: np.ndarray | None = None,
                  block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(full, partial) booleans (rows, heads, query blocks, key blocks), every tile decided alone.

    The flat form of what ``count_row_blocks`` decides coarse to fine; for
    small rows (tests, the editor's preview), since it holds every tile.
    """
    t = _Tiles.of(attention, documents, positions, block)
    block, seq = t.block, t.batch.seq
    r, h, i, j = np.meshgrid(np.arange(t.batch.count), np.arange(t.heads), np.arange(t.blocks),
                             np.arange(t.blocks), indexing="ij")
    lo_q, lo_kv = i * block, j * block
    hi_q, hi_kv = np.minimum(lo_q + block, seq) - 1, np.minimum(lo_kv + block, seq) - 1
    reads = {(port, index): t.batch.over(t.roles[port], r, *((lo_q, hi_q) if index == "q"
                                                             else (lo_kv, hi_kv)))
             for port, index in tensor_reads(t.keep)}
    verdict = interval(t.keep, Box(b=(r, r), h=(h, h), q=(lo_q, hi_q), kv=(lo_kv, hi_kv), reads=reads))
    full = np.broadcast_to(verdict.always, r.shape).copy()
    partial = np.broadcast_to(verdict.maybe, r.shape).copy()
    # past the row's end FlexAttention pads with masked scores: such a tile is never full
    ragged = ((i == t.blocks - 1) | (j == t.blocks - 1)) & (seq % block != 0)
    return full & ~ragged, partial | (full & ragged)


def _decide(keep: Expr, role_of: dict[str, str], batch: Rows, row: np.ndarray, head: np.ndarray,
            qb: np.ndarray, block: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """Full and partial tiles in each (row, head, query block).

    A mask whose ranges decide its tiles exactly (``design.block_ranges``) is
    counted from them directly; any other by the interval interpreter. Both
    reach the same verdicts where both apply.
    """
    ranges = ranges_of(keep, role_of, int(head.max()) + 1 if len(head) else 1)
    if ranges is not None:
        full, partial = decide_from_ranges(ranges, batch, row, head, qb, block, seq)
    else:
        full, partial = _decide_by_intervals(keep, role_of, batch, row, head, qb, block, seq)
    return _ragged_edge(keep, role_of, batch, row, head, qb, block, seq, full, partial)


def _ragged_edge(keep, role_of, batch, row, head, qb, block, seq, full, partial):
    """A tile hanging past the row's end is never full: FlexAttention pads it with masked scores.

    When ``seq`` is not a whole number of blocks, ``create_block_mask`` pads the last
    query and key blocks with positions that keep nothing, so a tile there that keeps
    every real score is partial, not full. Computed tiles (full + partial) are unchanged.
    """
    if seq % block == 0 or len(row) == 0:
        return full, partial
    last = -(-seq // block) - 1
    full, partial = full.copy(), partial.copy()
    # the last query block: every tile of it hangs past the end
    edge = qb == last
    partial[edge] += full[edge]
    full[edge] = 0
    # other query blocks: only their tile in the last key block does
    rest = np.flatnonzero(~edge)
    q_lo, kv_lo = qb[rest] * block, np.full(len(rest), last * block)
    q_hi, kv_hi = q_lo + block - 1, np.full(len(rest), seq - 1)
    r = row[rest]
    reads = {(port, index): batch.over(role_of[port], r, *((q_lo, q_hi) if index == "q"
                                                          else (kv_lo, kv_hi)))
             for port, index in tensor_reads(keep)}
    verdict = interval(keep, Box(b=(r, r), h=(head[rest], head[rest]), q=(q_lo, q_hi),
                                 kv=(kv_lo, kv_hi), reads=reads))
    moved = rest[np.broadcast_to(verdict.always, r.shape)]
    full[moved] -= 1
    partial[moved] += 1
    return full, partial


def _decide_by_intervals(keep: Expr, role_of: dict[str, str], batch: Rows, row: np.ndarray,
                         head: np.ndarray, qb: np.ndarray, block: int,
                         seq: int) -> tuple[np.ndarray, np.ndarray]:
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
    pyramids = {port: _pyramid(batch, role_of[port], block, levels)
                for port in sorted({port for port, _ in reads})}
    q_reads = {}
    for port, index in reads:
        if index == "q":
            lo, hi, groups = pyramids[port][0]
            flat = row * groups + qb
            q_reads[(port, "q")] = (lo[flat], hi[flat])

    # A causal mask keeps no key after its query: runs of tiles wholly after
    # the query block are skipped unasked (the interpreter would say "never").
    last_tile = qb if keeps_only_the_past(keep) else np.full(entries, blocks - 1)
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
        if level == 0 or not len(maybe):
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


def _pyramid(batch: Rows, role: str, block: int, levels: int):
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


def _kept_per_row(keep: Expr, role_of: dict[str, str], batch: Rows) -> np.ndarray | None:
    """Scores kept in each row, exact from its pieces, for a mask that is causal and/or
    same-document only; None for any other (the caller samples or counts densely)."""
    kinds = countable(keep, role_of)
    if kinds is None:
        return None
    causal, same = kinds
    if same:
        lengths, piece_row = batch.piece_lengths()
    else:
        lengths, piece_row = np.full(batch.count, batch.seq), np.arange(batch.count)
    lengths = lengths.astype(np.float64)
    per_piece = lengths * (lengths + 1) / 2 if causal else lengths**2
    return np.bincount(piece_row, weights=per_piece, minlength=batch.count)


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
