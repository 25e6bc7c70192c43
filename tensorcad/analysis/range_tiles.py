"""Tiles decided from ranges alone, for the masks whose ranges decide them exactly.

``design.block_ranges`` says which masks those are (a document mask ANDed with bounds
on ``q - kv`` that keep the query itself) and why. For them the interval
interpreter's verdict on a tile is a pair of interval tests, and along a query
block's keys each test holds on one contiguous run of key blocks: distances fall
as the key block moves right, and document ids never fall along a row. So each
(row, head, query block) is counted with a few binary searches instead of boxes
decided level by level: the same verdicts ``tiles._decide`` reaches (held in
``tests/analysis/test_range_tiles.py``), at a cost that does not grow with the row.
"""

from __future__ import annotations

import numpy as np

from tensorcad.design.block_ranges import BlockRanges

from .rows import Rows


# A table of counts costs one slot a lifted value; it is built while it is no longer than this many
# slots a (row, block) (and this many besides): documents averaging a few blocks or more.
TABLE_PER_ENTRY = 4
TABLE_FREE = 1 << 16


def _per_head(bound: tuple[int | None, ...], unbounded: int) -> np.ndarray:
    """The bound of each head, as a column (one row when every head has the same)."""
    return np.array([unbounded if v is None else v for v in bound], dtype=np.int64)[:, None]


def _per_entry(bound: tuple[int | None, ...], head: np.ndarray, unbounded: int) -> np.ndarray:
    values = _per_head(bound, unbounded)[:, 0]
    return values[head] if len(values) > 1 else np.full(head.shape, values[0])


def _searcher(first: np.ndarray, last: np.ndarray, row: np.ndarray):
    """``search(rows, value, side)``: for each entry, how many of row ``row``'s values come before ``value``.

    ``first`` and ``last`` (rows, blocks) never fall along a row. Rows laid end to end,
    each lifted above the last, make one sorted array of integers; a value lifted with
    its row's lift is counted among its own row's values only, since every value
    searched lies in the range the lift clears. Where the lifted range is not much
    longer than the rows (documents of a few blocks or more), the counts below each
    integer are tabulated once (a cumulative histogram) and read, a lookup an entry;
    otherwise each entry is a binary search.
    """
    count, width = first.shape
    low = int(min(first.min(), last.min())) if first.size else 0
    lift = int(max(first.max(), last.max())) - low + 2 if first.size else 1
    base = np.arange(count, dtype=np.int64)[:, None] * lift - low
    flat = {"first": (first + base).ravel(), "last": (last + base).ravel()}
    shift, skipped = base[row, 0], row * width
    span = count * lift
    if span <= TABLE_PER_ENTRY * first.size + TABLE_FREE:
        below = {name: np.concatenate([[0], np.cumsum(np.bincount(values, minlength=span))])
                 for name, values in flat.items()}  # below[x]: how many values are under x

        def search(rows: str, value: np.ndarray, side: str) -> np.ndarray:
            found = below[rows][value + shift + (side == "right")]
            return np.clip(found - skipped, 0, width)
    else:
        def search(rows: str, value: np.ndarray, side: str) -> np.ndarray:
            return np.clip(np.searchsorted(flat[rows], value + shift, side=side) - skipped, 0, width)

    return search


def decide_from_ranges(ranges: BlockRanges, batch: Rows, row: np.ndarray, head: np.ndarray,
                       qb: np.ndarray, block: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """Full and partial tiles in each (row, head, query block), as ``tiles._decide`` counts them."""
    blocks = -(-seq // block)
    kv_lo = np.arange(blocks, dtype=np.int64) * block
    kv_hi = np.minimum(kv_lo + block, seq) - 1
    # The distance bounds depend on the head and the query block alone: searched once a
    # (head, query block) and looked up for each entry, not searched an entry at a time.
    q_lo, q_hi = kv_lo[None, :], kv_hi[None, :]
    behind = _per_head(ranges.behind, 2 * seq)  # -ahead <= q - kv <= behind
    ahead = _per_head(ranges.ahead, 2 * seq)
    heads = max(len(behind), len(ahead))
    at = (head * blocks if heads > 1 else 0) + qb

    def lookup(table: np.ndarray) -> np.ndarray:
        return np.broadcast_to(table, (heads, blocks)).ravel()[at]

    # Some distance of the tile is kept: kv_lo <= q_hi + ahead and kv_hi >= q_lo - behind.
    some_lo = lookup(np.searchsorted(kv_hi, q_lo - behind, side="left"))
    some_hi = lookup(np.searchsorted(kv_lo, q_hi + ahead, side="right"))  # one past the last
    # Every distance is: kv_lo >= q_hi - behind and kv_hi <= q_lo + ahead.
    every_lo = lookup(np.searchsorted(kv_lo, q_hi - behind, side="left"))
    every_hi = lookup(np.searchsorted(kv_hi, q_lo + ahead, side="right"))
    if ranges.documents is not None:
        first, last = batch.over_blocks("documents", block)  # (rows, blocks), never falling
        f, l = first[row, qb], last[row, qb]
        search = _searcher(first, last, row)
        # Key blocks sharing a document with the query block: last_j >= f and first_j <= l.
        some_lo = np.maximum(some_lo, search("last", f, "left"))
        some_hi = np.minimum(some_hi, search("first", l, "right"))
        # Key blocks wholly in the query block's one document d: first_j >= d and last_j <= d.
        every_lo = np.maximum(every_lo, search("first", f, "left"))
        every_hi = np.where(f == l, np.minimum(every_hi, search("last", f, "right")), 0)
    some = np.maximum(some_hi - some_lo, 0)
    full = np.minimum(np.maximum(every_hi - every_lo, 0), some)
    return full.astype(np.int64), (some - full).astype(np.int64)


def kept_from_ranges(ranges: BlockRanges, batch: Rows, row: np.ndarray, head: np.ndarray,
                     t: np.ndarray) -> np.ndarray:
    """Keys each query (row, head, offset t) keeps: its document met with ``-ahead <= q - kv <= behind``.

    What the sampler's bands add up to for these masks, where every band is
    decided: the keys kept form one run, from the later of the document's start
    and ``t - behind`` to the earlier of its end and ``t + ahead``.
    """
    seq = batch.seq
    t = t.astype(np.int64)
    behind = _per_entry(ranges.behind, head, 2 * seq)
    ahead = _per_entry(ranges.ahead, head, 2 * seq)
    start, end = np.zeros_like(t), np.full_like(t, seq - 1)
    if ranges.documents is not None:
        bounds = batch.boundaries
        stride = seq + 1
        cut_row = np.repeat(np.arange(batch.count), np.diff(bounds.offsets))
        keys = cut_row * stride + bounds.cuts  # every boundary, sorted by row then offset
        after = np.searchsorted(keys, row * stride + t, side="right")  # first boundary past t
        has_next = after < bounds.offsets[row + 1]
        has_previous = after > bounds.offsets[row]
        cuts = np.append(bounds.cuts, seq)
        end = np.where(has_next, cuts[np.minimum(after, len(cuts) - 1)] - 1, end)
        start = np.where(has_previous, cuts[np.maximum(after - 1, 0)], start)
    first = np.maximum(start, t - behind)
    last = np.minimum(end, t + ahead)
    return np.maximum(last - first + 1, 0).astype(np.float64)
