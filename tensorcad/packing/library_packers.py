"""The packers people train with, piece for piece as they pack: TRL's ``pack_dataset`` and torchtune's ``PackedDataset``.

- ``trl-bfd``: ``pack_dataset(strategy="bfd")`` (TRL 1.16). Each ``datasets.map``
  batch of ``buffer`` documents is packed alone: every document cut to ``seq``
  tokens (the rest dropped), longest first (a stable sort: ties in document
  order), each into the row whose room is the smallest that holds it, and among
  rows with that room the one that has had it longest (TRL keeps a queue of rows
  for each room, and a segment tree over the rooms); a new row when none holds it.
- ``trl-bfd-split``: ``strategy="bfd_split"``: a document longer than a row is
  first cut into row-sized fragments and the rest, and the fragments are
  best-fit as above. Nothing is dropped; each fragment's positions restart.
- ``trl-wrapped``: ``strategy="wrapped"``: each batch's tokens end to end, cut
  every ``seq``; the batch's last row is what is left. TRL writes no
  ``seq_lengths`` for these rows, so its collator's ``position_ids`` count
  straight through each row: a model sees one document a row, and every
  document but a row's first starts at the position it lands at.
- ``torchtune``: ``PackedDataset(split_across_pack=False)``: documents in order,
  each into the current pack if it fits, else that pack is closed (and padded)
  and the document begins the next. torchtune refuses a sample longer than
  ``max_seq_len``; its tokenizers cut each to ``max_seq_len`` first (its recipes
  give both the same value), and so does this, dropping the rest.
- ``torchtune-split``: ``split_across_pack=True``: the whole dataset end to end,
  cut every ``seq`` tokens, the last pack padded. A token's position is its
  place in its document modulo ``seq`` (``input_pos``), so a document crossing a
  pack's edge continues its positions in the next pack.

Each returns ``Bins`` holding where each piece came from (document, offset) and
the position it starts at, so tests can hold the rows to the library's own.
"""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

from .bins import Bins

PACKERS = ("trl-bfd", "trl-bfd-split", "trl-wrapped", "torchtune", "torchtune-split")


def pack_as(strategy: str, lengths: np.ndarray, seq: int, buffer: int) -> Bins:
    """Documents of ``lengths`` (in the order given) packed into rows of ``seq`` as ``strategy``'s library packs."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if strategy in ("trl-bfd", "trl-bfd-split"):
        return _trl_bfd(lengths, seq, buffer, split=strategy == "trl-bfd-split")
    if strategy == "trl-wrapped":
        parts = [_cut(lengths[s:s + buffer], seq, first=s) for s in range(0, len(lengths), buffer)]
        rows = np.cumsum([0] + [int(p[3].max()) + 1 for p in parts[:-1]])
        length, document, offset, row, at_row = (np.concatenate(c) for c in zip(*parts))
        row = row + np.repeat(rows, [len(p[0]) for p in parts])
        return _bins(lengths, seq, length, row, document, offset, start=at_row, boundaries=False)
    if strategy == "torchtune":
        piece = np.minimum(lengths, seq)
        row = _next_fit(piece.tolist(), seq)
        return _bins(lengths, seq, piece, row, np.arange(len(lengths)), np.zeros(len(lengths), dtype=np.int64))
    if strategy == "torchtune-split":
        length, document, offset, row, _ = _cut(lengths, seq)
        return _bins(lengths, seq, length, row, document, offset, start=offset % seq)
    raise ValueError(f"not a library's packer: {strategy!r}")


def _bins(lengths: np.ndarray, seq: int, length, row, document, offset, *, start=None,
          boundaries: bool = True) -> Bins:
    """Bins of pieces in row order, with what the documents lost to them counted from the pieces themselves."""
    held = np.bincount(document, weights=length, minlength=len(lengths)).astype(np.int64)
    pieces = np.bincount(document, minlength=len(lengths))
    return Bins(seq, np.asarray(length, dtype=np.int64), np.asarray(row, dtype=np.int64),
                np.asarray(document, dtype=np.int64), int(row.max()) + 1 if len(row) else 0, len(lengths),
                truncated=int((held < lengths).sum()), split=int((pieces > 1).sum()),
                dropped=int((lengths - held).sum()), tokens=int(lengths.sum()),
                offset=np.asarray(offset, dtype=np.int64), start=None if start is None else np.asarray(start),
                boundaries=boundaries)


def _trl_bfd(lengths: np.ndarray, seq: int, buffer: int, split: bool) -> Bins:
    out_len, out_row, out_doc, out_off = [], [], [], []
    rows = 0
    for first in range(0, len(lengths), buffer):
        n = lengths[first:first + buffer]
        docs = np.arange(first, first + len(n))
        if split:
            count = -(-n // seq)
            owner = np.repeat(docs, count)
            index = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
            offset = index * seq
            piece = np.minimum(np.repeat(n, count) - offset, seq)
        else:
            owner, offset, piece = docs, np.zeros(len(n), dtype=np.int64), np.minimum(n, seq)
        order = np.argsort(-piece, kind="stable")
        where = np.asarray(_best_fit_as_trl(piece[order].tolist(), seq), dtype=np.int64)
        # Row order: rows as opened; within a row, pieces as placed.
        placed = np.lexsort((np.arange(len(order)), where))
        arrange = order[placed]
        out_len.append(piece[arrange])
        out_doc.append(owner[arrange])
        out_off.append(offset[arrange])
        out_row.append(where[placed] + rows)
        rows += int(where.max()) + 1 if len(where) else 0
    return _bins(lengths, seq, np.concatenate(out_len), np.concatenate(out_row), np.concatenate(out_doc),
                 np.concatenate(out_off))


def _best_fit_as_trl(pieces: list[int], seq: int) -> list[int]:
    """The row of each piece (longest first): TRL's best fit, ties to the row that has had the room longest."""
    rooms: list[int] = []  # the rooms open rows have, ascending, each held by at least one row
    holders: dict[int, deque] = {}  # room -> the rows with it, in the order they came to have it
    where: list[int] = []
    opened = 0
    for n in pieces:
        i = bisect.bisect_left(rooms, n)
        if i < len(rooms):
            room = rooms[i]
            queue = holders[room]
            row = queue.popleft()
            if not queue:
                del rooms[i], holders[room]
        else:
            room, row = seq, opened
            opened += 1
        where.append(row)
        left = room - n
        if left:
            if left not in holders:
                holders[left] = deque()
                bisect.insort(rooms, left)
            holders[left].append(row)
    return where


def _next_fit(pieces: list[int], seq: int) -> np.ndarray:
    """torchtune's greedy pack: into the current row while it fits, else a new row."""
    where = np.empty(len(pieces), dtype=np.int64)
    row = used = 0
    for i, n in enumerate(pieces):
        if used + n > seq:
            row, used = row + 1, 0
        where[i] = row
        used += n
    return where


def _cut(lengths: np.ndarray, seq: int, first: int = 0):
    """Documents end to end, cut every ``seq`` tokens: each piece's (length, document, offset, row, offset in row)."""
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    edges = np.unique(np.concatenate(([0], ends, np.arange(seq, total, seq))))
    begins = edges[:-1]
    document = np.searchsorted(ends, begins, side="right")
    offset = begins - (ends[document] - lengths[document])
    row = begins // seq
    return np.diff(edges), document + first, offset, row, begins - row * seq
