"""The strategies that fill training rows with documents, and the rows they make.

- ``stream``: documents end to end, rows cut wherever they fall (``stream.Stream``).
- ``bfd``: best-fit decreasing. A buffer of documents, longest first, each into
  the open row it leaves least room in; a document longer than a row is
  truncated to one (TRL's ``pack_dataset(strategy="bfd")``).
- ``ffd``: first-fit decreasing: the same, into the first open row it fits
  (axolotl's and NeMo's packers).
- ``split``: Ding et al. 2024, "Fewer Truncations Improve Language Modeling":
  a document longer than a row is cut into row-sized pieces (and the rest),
  and the pieces are best-fit as above; nothing is truncated.
- ``pad``: one document a row, truncated or padded: what unpacked training pays.
- ``trl-bfd``, ``trl-bfd-split``, ``trl-wrapped``, ``torchtune``,
  ``torchtune-split``: the libraries' own packers, row for row as they pack
  (``library_packers``).

A bin-packed row begins on a boundary and ends in padding: the room no
document filled. The padding is one more document of the row (a cut where it
begins), so a block counter sees what the kernel computes for it, but it holds
no real token: keys a query are over real tokens, and the cost of a real token
carries the padding's share of every matmul.

Rows are drawn as the stream's are: one length per stratum of the
distribution, shuffled, packed buffer by buffer; of the rows that makes, the
sampled ones are one from each of ``rows`` equal slices. The exact mean of
(position + 1) over every packed row's real tokens is known from the pieces
(a row begins on a boundary, so a piece of n tokens keeps n(n + 1)/2), and is
the control the sampler is held to.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from tensorcad.errors import check_integer

from .bins import Bins
from .boundaries import RowBoundaries
from .library_packers import PACKERS, pack_as
from .settings import MAX_ROWS, MAX_SEQ, TRUNCATING, Packing
from .stream import MIN_STREAM_DOCUMENTS, Stream

BUFFERS = 32
MAX_DOCUMENTS = 1 << 16


def _place(pieces: np.ndarray, seq: int, best: bool) -> np.ndarray:
    """The bin of each piece (pieces already longest first), best or first fit, opening bins as needed."""
    return _best_fit(pieces, seq) if best else _first_fit(pieces, seq)


def _runs(pieces: np.ndarray) -> list[tuple[int, int]]:
    """(length, how many) of each run of equal pieces, in order."""
    if not len(pieces):
        return []
    starts = np.flatnonzero(np.concatenate([[True], pieces[1:] != pieces[:-1]]))
    return list(zip(pieces[starts].tolist(), np.diff(np.append(starts, len(pieces))).tolist()))


def _best_fit(pieces: np.ndarray, seq: int) -> np.ndarray:
    """Each piece into the open bin it leaves least room in, the lowest such bin on a tie.

    The open bins are kept sorted by (room, bin), so that bin is the first at or
    past (piece, -1): a bisection, not a scan of every open bin per piece (the
    editor's chart packs eight corpora an edit; bfd took seconds of it).

    Two shortcuts, each placing pieces where the one-piece-at-a-time loop would:
    - A piece over half a row fits in no bin an earlier (no shorter) piece
      opened: each opens its own, and their rooms already rise with the bin.
    - A run of k equal pieces n fills bins in turn: the bin found takes
      ``room // n`` of them, because after each its room less n is still the
      least room that fits n (no room lay between it and the room it had) and
      no other bin ties it (a bin of the same room has a higher index). What
      it leaves below n sorts before every room that fits n, so the next bin is
      the next one along. A corpus of mean 64 has runs of about 7 in a buffer
      of 1,000. A zero-length piece goes to the bin of least room, as all
      after it do, since placing it changes no room.
    """
    opened = int(np.count_nonzero(2 * pieces > seq))
    rooms = [(r, b) for b, r in enumerate((seq - pieces[:opened]).tolist()) if r > 0]  # (room left, bin), sorted
    where = list(range(opened))  # each piece's bin
    bisect_left, insort = bisect.bisect_left, bisect.insort
    for n, left in _runs(pieces[opened:]):
        if n == 0:
            if not rooms:
                rooms.append((seq, opened))
                opened += 1
            where += [rooms[0][1]] * left
            continue
        at = bisect_left(rooms, (n, -1))
        while left:
            if at < len(rooms):
                room, b = rooms.pop(at)
            else:
                room, b = seq, opened
                opened += 1
            if left == 1:  # most runs, past the shortest documents
                where.append(b)
                room -= n
                left = 0
            else:
                take = min(room // n, left)
                where += [b] * take
                left -= take
                room -= take * n
            if room:
                insort(rooms, (room, b))
                at += room < n  # it went in before the rooms that still fit n
    return np.array(where, dtype=np.int64)


def _first_fit(pieces: np.ndarray, seq: int) -> np.ndarray:
    """Each piece into the first open bin it fits, opening one when none does.

    The shortcuts of ``_best_fit``, for the first bin rather than the tightest: the
    pieces over half a row each open their own; a run of equal pieces n fills the first
    bin that fits with ``room // n`` of them, and then every bin up to it is below n,
    so the next is looked for past it.
    """
    opened = int(np.count_nonzero(2 * pieces > seq))
    remaining = np.empty(len(pieces), dtype=np.int64)
    remaining[:opened] = seq - pieces[:opened]
    where = list(range(opened))  # each piece's bin
    for n, left in _runs(pieces[opened:]):
        past = 0  # every bin before this one is below n
        while left:
            fits = remaining[past:opened] >= n
            at = int(fits.argmax()) if opened > past else 0
            if opened > past and fits[at]:
                b = past + at
            else:
                b = opened
                remaining[b] = seq
                opened += 1
            take = min(int(remaining[b]) // n, left) if n else left
            where += [b] * take
            left -= take
            remaining[b] -= take * n
            past = b + 1
    return np.array(where, dtype=np.int64)


def pack(lengths: np.ndarray, seq: int, strategy: str, buffer: int) -> Bins:
    """Pack documents of ``lengths`` (in the order given) into rows of ``seq`` tokens."""
    seq = check_integer(seq, "seq", 1, MAX_SEQ)
    lengths = np.asarray(lengths, dtype=np.int64)
    if strategy in PACKERS:
        return pack_as(strategy, lengths, seq, buffer)
    documents = len(lengths)
    lost = {"dropped": int(np.maximum(lengths - seq, 0).sum()), "tokens": int(lengths.sum())}
    if strategy == "pad":
        return Bins(seq, np.minimum(lengths, seq), np.arange(documents), np.arange(documents),
                    documents, documents, int((lengths > seq).sum()), 0, **lost)
    offset = np.zeros(documents, dtype=np.int64)
    if strategy in ("bfd", "ffd"):
        piece, owner = np.minimum(lengths, seq), np.arange(documents)
        truncated, split = int((lengths > seq).sum()), 0
    elif strategy == "split":
        # floor(L / seq) whole rows, and what is left over.
        whole, rest = np.divmod(lengths, seq)
        count = whole + (rest > 0)
        owner = np.repeat(np.arange(documents), count)
        first = np.cumsum(count) - count
        index = np.arange(len(owner)) - np.repeat(first, count)
        piece = np.where(index < np.repeat(whole, count), seq, np.repeat(rest, count))
        offset = index * seq
        truncated, split, lost["dropped"] = 0, int((count > 1).sum()), 0
    else:
        raise ValueError(f"not a bin-packing strategy: {strategy!r}")
    out_len, out_row, out_doc, out_off = [], [], [], []
    rows = 0
    # ``owner`` never decreases (a document's pieces are adjacent), so a buffer's pieces are one slice of it.
    edges = np.searchsorted(owner, np.arange(0, documents + buffer, buffer), side="left")
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
        chosen = np.arange(lo, hi)
        order = chosen[np.argsort(-piece[chosen], kind="stable")]
        where = _place(piece[order], seq, best=strategy != "ffd")
        # Row order: bins as opened; within a row, pieces as placed.
        arrange = np.lexsort((np.arange(len(order)), where))
        out_len.append(piece[order][arrange])
        out_row.append(where[arrange] + rows)
        out_doc.append(owner[order][arrange])
        out_off.append(offset[order][arrange])
        rows += int(where.max()) + 1 if len(where) else 0
    return Bins(seq, np.concatenate(out_len), np.concatenate(out_row), np.concatenate(out_doc),
                rows, documents, truncated, split, offset=np.concatenate(out_off), **lost)


@dataclass(frozen=True)
class Packed:
    """The rows the analysis measures under a packing, and what the packing did.

    ``causal_keys``: the exact mean of (position + 1) over the real tokens of
    every row the sampled rows were drawn from (every window of the stream,
    or every bin). ``real``: their real tokens over all their tokens.
    ``truncated`` and ``split``: fractions of documents. For ``stream``,
    ``split`` is the chance a document holds a row's edge when rows are cut
    back to back at a uniform phase, min(1, (L - 1) / T) averaged.
    ``dropped``: the fraction of the documents' tokens no row holds;
    ``continued``: of documents, those with a piece whose positions do not
    start at 0 (torchtune's across a pack's edge, TRL's wrapped within a row).
    """

    boundaries: RowBoundaries
    causal_keys: float
    real: float
    truncated: float
    split: float
    documents_per_row: float
    dropped: float = 0.0
    continued: float = 0.0

    @property
    def padding(self) -> float:
        return 1.0 - self.real

    def to_json(self) -> dict:
        return {"padding": self.padding, "truncated": self.truncated, "split": self.split,
                "tokensDropped": self.dropped, "positionsContinued": self.continued,
                "documentsPerRow": self.documents_per_row}


def draw_packed(packing: Packing, rows: int, seq: int, seed: int = 0) -> Packed:
    """Rows of ``seq`` tokens under ``packing``, seeded: the same arguments give the same rows."""
    rows = check_integer(rows, "rows", 1, MAX_ROWS)
    seq = check_integer(seq, "seq", 1, MAX_SEQ)
    seed = check_integer(seed, "seed", 0, 2**63 - 1)
    if packing.strategy == "stream":
        stream = Stream.build(rows, seq, packing.mean, packing.spread, seed, lengths=packing.lengths)
        length = stream.lengths.astype(np.float64)
        return Packed(stream.boundaries(), stream.causal_keys_every_window(), 1.0, 0.0,
                      float(np.minimum(1.0, (length - 1) / seq).mean()),
                      float(len(length)) * seq / float(length.sum()))
    count = max(MIN_STREAM_DOCUMENTS, rows, math.ceil(rows * seq / max(packing.mean, 1.0)))
    if packing.strategy == "pad":
        # A row is a document: the rows themselves are the strata, one each,
        # rather than a sample of rows cut from more strata (the long tail's noise).
        count = max(MIN_STREAM_DOCUMENTS, rows)
    else:
        # Padding is what the last rows of each buffer leave empty, so its noise
        # is that of the buffers packed: at least 32 of them (0.06 points of
        # padding, one standard deviation, for log-normal c = 3 at 8,192).
        count = max(count, min(BUFFERS * packing.buffer, MAX_DOCUMENTS))
    while True:
        bins = pack(packing.document_lengths(count, seed), seq, packing.strategy, packing.buffer)
        if bins.rows >= rows:
            break
        count = math.ceil(count * rows / bins.rows) + 1
    # One sampled row from each of ``rows`` equal slices of the rows packed.
    rng = np.random.default_rng((seed, 1))
    picked = np.floor((np.arange(rows) + rng.random(rows)) / rows * bins.rows).astype(np.int64)
    picked = np.minimum(picked, bins.rows - 1)
    rng.shuffle(picked)
    real = bins.real
    pieces = bins.pieces().astype(np.float64)
    return Packed(
        boundaries=_boundaries(bins, picked, real),
        causal_keys=float((pieces * (pieces + 1) / 2).sum() / pieces.sum()),
        real=float(real.sum()) / (bins.rows * seq),
        truncated=bins.truncated / bins.documents,
        split=bins.split / bins.documents,
        documents_per_row=bins.documents / bins.rows,
        dropped=_cut_off(packing, seq) if packing.strategy in TRUNCATING else bins.dropped / bins.tokens,
        continued=bins.continued / bins.documents,
    )


def _cut_off(packing: Packing, seq: int) -> float:
    """The share of the documents' tokens a row's edge cuts off, each truncated to a row: E[(L - T)+] / E[L].

    Of the distribution itself, not of the strata packed: a few long documents
    hold most of what is lost (at 1,024 strata of log-normal c = 3 lengths the
    strata lose 12.7% of tokens at 8,192, the distribution 13.7%).
    """
    if packing.lengths is not None:
        values, counts = (a.astype(np.float64) for a in packing.lengths.arrays)
        return float((counts * np.maximum(values - seq, 0)).sum() / (counts * values).sum())
    if packing.spread == 0:
        length = max(1.0, math.floor(packing.mean + 0.5))
        return max(length - seq, 0.0) / length
    from scipy.special import gammaincc  # here, not at load: see settings.document_lengths

    # Gamma lengths: E[(L - a)+] = mu Q(k + 1, a / theta) - a Q(k, a / theta) (clamped: far out, the two cancel).
    shape, scale = 1.0 / packing.spread**2, packing.mean * packing.spread**2
    return max(0.0, float(gammaincc(shape + 1, seq / scale) - seq / packing.mean * gammaincc(shape, seq / scale)))


def _boundaries(bins: Bins, picked: np.ndarray, real: np.ndarray) -> RowBoundaries:
    """The picked rows' boundaries: each piece after the first begins one, and so does padding."""
    seq = bins.seq
    first = np.searchsorted(bins.row, np.arange(bins.rows + 1), side="left")
    cumulative = np.cumsum(bins.length)
    before = np.append(0, cumulative)[first[:-1]]  # tokens packed before each row's first piece
    ends = cumulative - before[bins.row]  # where each piece ends within its row
    if not bins.boundaries:  # the row is one document to the model: only its padding begins another
        ends = np.where(np.append(bins.row[1:] != bins.row[:-1], True), ends, seq)
    # Every end short of the row's end begins the next piece, or the padding.
    cut_at = [ends[first[b]:first[b + 1]] for b in picked.tolist()]
    cut_at = [c[c < seq] for c in cut_at]
    cuts = np.concatenate(cut_at).astype(np.int64) if cut_at else np.zeros(0, dtype=np.int64)
    counts = np.array([len(c) for c in cut_at], dtype=np.int64)
    offsets = np.zeros(len(picked) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return RowBoundaries(seq=seq, cuts=cuts, offsets=offsets,
                         first_age=np.zeros(len(picked), dtype=np.int64),
                         padding=(seq - real[picked]).astype(np.int64))
