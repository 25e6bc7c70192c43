"""Documents packed into rows, piece by piece: what every packer returns and what its rows lose."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bins:
    """Documents packed into rows: each piece's length, row (bin) and document, in row order.

    Pieces of one row are in the order they were placed; ``truncated`` and
    ``split`` count documents, ``dropped`` the tokens of the documents that no
    row holds, ``tokens`` all the documents' tokens. ``offset`` is where in its
    document each piece begins (None: at its start), ``start`` the position the
    packer gives the piece's first token (None: 0, positions restarting at every
    piece); ``boundaries`` says whether the rows carry their
    documents' boundaries at all (TRL's ``wrapped`` rows do not: the collator's
    positions run straight through each row, so a model sees one document a row).
    """

    seq: int
    length: np.ndarray
    row: np.ndarray
    document: np.ndarray
    rows: int
    documents: int
    truncated: int
    split: int
    dropped: int = 0
    tokens: int = 0
    offset: np.ndarray | None = None
    start: np.ndarray | None = None
    boundaries: bool = True

    @property
    def real(self) -> np.ndarray:
        """Real tokens in each row."""
        return np.bincount(self.row, weights=self.length, minlength=self.rows).astype(np.int64)

    @property
    def continued(self) -> int:
        """Documents with a piece whose positions do not start at 0 (they continue an earlier piece's)."""
        if self.start is None:
            return 0
        return len(np.unique(self.document[self.start != 0]))

    def pieces(self) -> np.ndarray:
        """The lengths of the pieces a row's mask keeps apart: the documents' pieces, or each row whole."""
        return self.length if self.boundaries else self.real[self.real > 0]

    def as_rows(self) -> list[list[tuple[int, int, int, int]]]:
        """Each row as (document, offset in it, first position, tokens) of its pieces, in order."""
        zero = np.zeros(len(self.length), dtype=np.int64)
        offset = zero if self.offset is None else self.offset
        start = zero if self.start is None else self.start
        out: list[list[tuple[int, int, int, int]]] = [[] for _ in range(self.rows)]
        for r, *piece in zip(self.row.tolist(), self.document.tolist(), offset.tolist(), start.tolist(),
                             self.length.tolist()):
            out[r].append(tuple(piece))
        return out
