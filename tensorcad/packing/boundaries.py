"""Where each packed row's documents begin, held compactly: what a block counter reads of a packing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .forms import _positions_from_cuts


@dataclass(frozen=True)
class RowBoundaries:
    """The document boundaries of each row, in compressed sparse form.

    For row ``r``, ``cuts[offsets[r]:offsets[r + 1]]`` are the positions
    ``0 < t < seq`` at which a new document begins; ``first_age[r]`` is how
    many tokens of the row's first document precede the row. A block counter
    reads a block's first and last document as ``document_at`` of its edges.
    """

    seq: int
    cuts: np.ndarray
    offsets: np.ndarray
    first_age: np.ndarray
    # Padding tokens at the end of each row (rows, ), or None: no padding. A
    # row's padding is a document of its own (a cut where it begins), which
    # the kernel computes like any other, but it holds no real tokens.
    padding: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    def _keys(self, rows: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # One sorted key space for all rows: row r owns [r*(seq+1), (r+1)*(seq+1)).
        stride = self.seq + 1
        row_of_cut = np.repeat(np.arange(self.rows), np.diff(self.offsets))
        return row_of_cut * stride + self.cuts, rows * stride + t

    def document_at(self, t: np.ndarray) -> np.ndarray:
        """Document index (from 0 each row) at row offsets ``t`` of shape (rows, n)."""
        t = np.asarray(t, dtype=np.int64)
        rows = np.arange(self.rows)[:, None]
        cut_keys, keys = self._keys(rows, t)
        return np.searchsorted(cut_keys, keys, side="right") - self.offsets[:-1][:, None]

    def position_at(self, t: np.ndarray) -> np.ndarray:
        """``positions_of`` of the row, at row offsets ``t`` of shape (rows, n)."""
        t = np.asarray(t, dtype=np.int64)
        rows = np.arange(self.rows)[:, None]
        cut_keys, keys = self._keys(rows, t)
        index = np.searchsorted(cut_keys, keys, side="right")
        inside = index > self.offsets[:-1][:, None]
        begin = np.where(inside, self.cuts[np.maximum(index - 1, 0)], 0)
        return t - begin

    def documents(self) -> np.ndarray:
        """The (rows, seq) document indices, materialised."""
        marks = np.zeros((self.rows, self.seq), dtype=np.int64)
        row_of_cut = np.repeat(np.arange(self.rows), np.diff(self.offsets))
        marks[row_of_cut, self.cuts] = 1
        return np.cumsum(marks, axis=1, out=marks)

    def positions(self) -> np.ndarray:
        """The (rows, seq) positions within documents, materialised."""
        row_of_cut = np.repeat(np.arange(self.rows), np.diff(self.offsets))
        return _positions_from_cuts(self.rows, self.seq, row_of_cut, self.cuts)

