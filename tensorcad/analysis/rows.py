"""The rows the analysis measures, read at points and over ranges without materialising them.

A mask may read a tensor the engine makes up: a row's document ids or its
positions within documents. The sampler reads them at sampled points, the
block counter over whole ranges of positions. Both work from a row's
document boundaries (``packing.draw_boundaries``), never from the (rows, seq)
arrays: at 131,072 tokens, 1,024 rows of int64 would be a gibibyte each.

Reading over a range is exact for both roles:

- documents never fall along a row, so their range over ``lo..hi`` is the
  document at ``lo`` and the document at ``hi``;
- positions restart at every boundary, so over a range holding a boundary
  their minimum is 0 and their maximum is the largest of: the position just
  before the first boundary, the position at ``hi``, and the longest whole
  document between (a sparse table of document lengths answers that).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from tensorcad.design.masks import MADE_UP_ROLES, made_up_roles  # noqa: F401 - MADE_UP_ROLES asked of rows by name
from tensorcad.design.model import Attention
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, RowBoundaries

_BUCKET_BITS = 6


class _SparseMax:
    """Range maxima over a 1-D array: O(n log n) to build, O(1) a query."""

    def __init__(self, values: np.ndarray):
        self.levels = [np.asarray(values, dtype=np.int64)]
        span = 1
        while 2 * span <= len(self.levels[0]):
            top = self.levels[-1]
            self.levels.append(np.maximum(top[:-span], top[span:]))
            span *= 2

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """max(values[lo..hi]) (inclusive); callers pass lo <= hi."""
        length = np.maximum(hi - lo + 1, 1)
        level = np.minimum(np.floor(np.log2(length)).astype(np.int64), len(self.levels) - 1)
        out = np.empty(lo.shape, dtype=np.int64)
        for k in np.unique(level):
            sel = level == k
            table = self.levels[int(k)]
            out[sel] = np.maximum(table[lo[sel]], table[hi[sel] - (1 << int(k)) + 1])
        return out


class Rows:
    """A batch of rows as document boundaries; optionally explicit positions.

    ``at(role, r, t)`` and ``over(role, r, lo, hi)`` take flat integer arrays
    of row indices and row offsets (broadcast together).
    """

    def __init__(self, boundaries: RowBoundaries, positions: np.ndarray | None = None,
                 causal_keys: float | None = None, real_fraction: float = 1.0, packed=None):
        self.boundaries = boundaries
        # Real tokens of each row when rows end in padding (a document of its
        # own that holds no real token), else None; ``real_fraction`` is the
        # real share of every row the rows were drawn from, exactly, and
        # ``packed`` what the packing did (``packers.Packed``), when drawn.
        self.real = None if boundaries.padding is None else boundaries.seq - boundaries.padding
        if self.real is not None and not (boundaries.padding > 0).any():
            self.real = None
        self.real_fraction = real_fraction
        self.packed = packed
        # Document-causal keys per query averaged over every row the rows were
        # drawn from (every window of the stream), when known: the control
        # variate's exact mean. None: the rows are all there is.
        self.causal_keys = causal_keys
        self.count = boundaries.rows
        self.seq = boundaries.seq
        self._stride = self.seq + 1
        row_of_cut = np.repeat(np.arange(self.count), np.diff(boundaries.offsets))
        self._keys = row_of_cut * self._stride + boundaries.cuts
        # A sentinel past the end, so indexing one beyond the last cut is safe.
        self._cuts = np.append(boundaries.cuts, self.seq).astype(np.int64)
        self._offsets = boundaries.offsets
        self._positions = positions
        self._segments: _SparseMax | None = None
        self._dense_max: _SparseMax | None = None
        self._dense_min: _SparseMax | None = None
        self._buckets: np.ndarray | None = None
        self._bucket_bits = _BUCKET_BITS
        self._padded_keys = np.zeros(0, dtype=np.int64)

    # -- construction -------------------------------------------------------

    @classmethod
    def single_documents(cls, rows: int, seq: int) -> Rows:
        """One document a row: no boundaries, positions 0..T-1."""
        return cls(RowBoundaries(seq=seq, cuts=np.zeros(0, dtype=np.int64),
                                 offsets=np.zeros(rows + 1, dtype=np.int64),
                                 first_age=np.zeros(rows, dtype=np.int64)),
                   causal_keys=(seq + 1) / 2)

    @classmethod
    def from_arrays(cls, documents: np.ndarray, positions: np.ndarray | None = None) -> Rows:
        """Rows given as (rows, seq) document ids (and positions, if they are not restarted ids)."""
        documents = np.asarray(documents)
        if documents.ndim == 1:
            documents = documents[None, :]
        if documents.ndim != 2 or not np.issubdtype(documents.dtype, np.integer):
            raise TensorcadError("documents", f"expected integer (rows, seq) document ids, "
                                              f"got {documents.dtype} {documents.shape}")
        rows, seq = documents.shape
        step = np.diff(documents, axis=1)
        if (step < 0).any():
            raise TensorcadError("documents", "document ids must never fall along a row")
        row_of_cut, cut = np.nonzero(step)
        offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(row_of_cut, minlength=rows), out=offsets[1:])
        boundaries = RowBoundaries(seq=seq, cuts=(cut + 1).astype(np.int64), offsets=offsets,
                                   first_age=np.zeros(rows, dtype=np.int64))
        if positions is not None:
            positions = np.asarray(positions, dtype=np.int64).reshape(rows, seq)
        return cls(boundaries, positions)

    # -- reading ------------------------------------------------------------

    def _cut_index(self, r: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Global index one past the last boundary at or before offset t of row r.

        A binary search for every point is slow for hundreds of thousands of
        unsorted points, so a table gives the answer at the start of each
        run of ``2**self._bucket_bits`` tokens and a few vectorised steps walk
        past the boundaries inside the run (rarely more than one or two).
        """
        key = (r * self._stride + t).ravel()
        table = self._bucket_table()
        index = table[key >> self._bucket_bits]
        # Indices, not boolean masks: numpy gathers by index many times faster.
        ahead = np.flatnonzero(self._padded_keys[index] <= key)
        while len(ahead):
            index[ahead] += 1
            ahead = ahead[self._padded_keys[index[ahead]] <= key[ahead]]
        return index.reshape(np.shape(r))

    def _bucket_table(self) -> np.ndarray:
        if self._buckets is None:
            span = self.count * self._stride
            # About two buckets a boundary, at least 2**_BUCKET_BITS tokens each: 64-token buckets over 1,024
            # rows of 2^22 tokens were 2^26 of them, an arange and a searchsorted of 512 MiB each (over half of
            # `walkthrough --seq 4194304 --pack 1024`). A bucket's entry is the boundaries before its start: a
            # running count of the boundaries in each bucket, one pass over them.
            spacing = span // max(len(self._keys), 1)
            self._bucket_bits = max(_BUCKET_BITS, spacing.bit_length() - 2)
            inside = np.bincount(self._keys >> self._bucket_bits, minlength=(span >> self._bucket_bits) + 1)
            self._buckets = np.concatenate(([0], np.cumsum(inside)[:-1])).astype(np.int64)
            self._padded_keys = np.append(self._keys, np.iinfo(np.int64).max)
        return self._buckets

    def at(self, role: str, r, t) -> np.ndarray:
        r, t = np.broadcast_arrays(np.asarray(r, dtype=np.int64), np.asarray(t, dtype=np.int64))
        if role == "positions" and self._positions is not None:
            return self._positions[r, t]
        if role not in ("documents", "positions"):
            raise ValueError(f"rows hold documents and positions, not {role!r}")
        index = self._cut_index(r, t)
        if role == "documents":
            return index - self._offsets[r]
        inside = index > self._offsets[r]
        return t - np.where(inside, self._cuts[np.maximum(index - 1, 0)], 0)

    def over(self, role: str, r, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of the role's values over offsets lo..hi (inclusive) of row r."""
        r, lo, hi = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (r, lo, hi)))
        if role == "documents":
            return self.at(role, r, lo), self.at(role, r, hi)
        if self._positions is not None:
            return self._dense_range(r, lo, hi)
        first, last = self._cut_index(r, lo), self._cut_index(r, hi)
        p_lo, p_hi = self.at(role, r, lo), self.at(role, r, hi)
        crossed = last > first
        before = p_lo + self._cuts[np.minimum(first, len(self._cuts) - 1)] - 1 - lo
        top = np.maximum(before, p_hi)
        whole = last - first >= 2  # a whole document between the first and last boundary
        if whole.any():
            longest = self._segment_table().query(first[whole], last[whole] - 2)
            top[whole] = np.maximum(top[whole], longest - 1)
        return np.where(crossed, 0, p_lo), np.where(crossed, top, p_hi)

    def over_blocks(self, role: str, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) (rows, blocks) of the role over each run of ``block`` offsets of every row.

        For documents, one pass over the boundaries: the last document in block
        i is the number of boundaries in blocks 0..i, the first one fewer
        than that unless a boundary falls on the block's first offset.
        """
        blocks = -(-self.seq // block)
        if role == "documents":
            cuts = self.boundaries.cuts
            row_of_cut = np.repeat(np.arange(self.count), np.diff(self._offsets))
            cell = row_of_cut * blocks + cuts // block
            inside = np.bincount(cell, minlength=self.count * blocks).reshape(self.count, blocks)
            last = np.cumsum(inside, axis=1)
            on_edge = np.zeros(self.count * blocks, dtype=np.int64)
            on_edge[cell[cuts % block == 0]] = 1
            return last - inside + on_edge.reshape(self.count, blocks), last
        starts = np.arange(blocks, dtype=np.int64) * block
        ends = np.minimum(starts + block, self.seq) - 1
        r = np.arange(self.count)[:, None]
        return self.over(role, r, starts[None, :], ends[None, :])

    def _segment_table(self) -> _SparseMax:
        # Lengths between consecutive boundaries; entries spanning two rows are
        # never queried, since a query's boundaries all lie in one row.
        if self._segments is None:
            self._segments = _SparseMax(np.diff(self._cuts) if len(self._cuts) > 1
                                        else np.zeros(1, dtype=np.int64))
        return self._segments

    def _dense_range(self, r, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        if self._dense_max is None:
            flat = self._positions.ravel()
            self._dense_max, self._dense_min = _SparseMax(flat), _SparseMax(-flat)
        base = r * self.seq
        return -self._dense_min.query(base + lo, base + hi), self._dense_max.query(base + lo, base + hi)

    def piece_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's document pieces (lengths, row of each): 0 through its cuts to seq."""
        cuts, offsets = self.boundaries.cuts, self._offsets
        per_row = np.diff(offsets)
        row_of_cut = np.repeat(np.arange(self.count), per_row)
        previous = np.zeros_like(cuts)
        if len(cuts):
            previous[1:] = cuts[:-1]
            previous[offsets[:-1][per_row > 0]] = 0  # a row's first piece starts at 0
        last_cut = np.where(per_row > 0, self._cuts[np.maximum(offsets[1:] - 1, 0)], 0)
        lengths = np.concatenate([cuts - previous, self.seq - last_cut])
        rows = np.concatenate([row_of_cut, np.arange(self.count)])
        if self.real is not None:
            # A padded row's last piece is its padding: no real document.
            keep = np.concatenate([np.ones(len(cuts), dtype=bool), self.real == self.seq])
            lengths, rows = lengths[keep], rows[keep]
        return lengths, rows


# The editor's chart draws at eight document lengths and the operating point's own: at 8 the
# ninth evicted the first, so a second design at the same row and spread drew everything again.
# An entry is about 2 MB at 8,192 tokens, 34 MB at the chart's longest row (131,072 tokens of
# 64-token documents).
@functools.lru_cache(maxsize=16)
def packed_rows(seq: int, packing: Packing | None, seed: int, rows: int) -> Rows:
    """The rows both the sampler and the block counter measure: one draw, cached."""
    if packing is None:
        return Rows.single_documents(rows, seq)
    from tensorcad.packing.strategies import draw_packed

    # The very rows packing.draw_boundaries (and packing.draw) returns.
    packed = draw_packed(packing, rows, seq, seed)
    return Rows(packed.boundaries, causal_keys=packed.causal_keys, real_fraction=packed.real,
                packed=packed)


def tensor_roles(attention: Attention) -> Mapping[str, str]:
    """The role of each tensor port the attention's kept-score expression reads (design.masks)."""
    return made_up_roles(attention, "engine")
