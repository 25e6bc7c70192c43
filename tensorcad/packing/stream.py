"""The stream: documents laid end to end in a circle, and the rows cut from it as windows.

Under the ``stream`` strategy a packed row is a window of a stream of
documents laid end to end, so it usually begins and ends inside a document.
The stream is built for low noise rather than realism: one length per
stratum of the distribution (quantiles at ``(i + 0.5) / count``), shuffled,
and rows that begin at stratified offsets, so every phase a row can begin at
is represented. See ``docs/packing.md`` for why each choice was made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorcad.errors import check_integer

from .boundaries import RowBoundaries
from .corpus.histogram import Lengths
from .settings import MAX_ROWS, MAX_SEQ, Packing, check_mean, check_spread

MIN_STREAM_DOCUMENTS = 1024


@dataclass(frozen=True)
class Stream:
    """A circular stream of documents and the windows cut from it as rows.

    ``lengths`` are the documents in stream order; row ``r`` is the ``seq``
    tokens starting at ``starts[r]``, wrapping past the end of the stream.
    """

    lengths: np.ndarray
    starts: np.ndarray
    seq: int

    @property
    def total(self) -> int:
        return int(self.lengths.sum())

    @classmethod
    def build(cls, rows: int, seq: int, mean: float, spread: float = 1.0, seed: int = 0,
              lengths: Lengths | None = None) -> Stream:
        """The stream for gamma lengths (mean, spread), or for an empirical ``lengths``."""
        rows = check_integer(rows, "rows", 1, MAX_ROWS)
        seq = check_integer(seq, "seq", 1, MAX_SEQ)
        seed = check_integer(seed, "seed", 0, 2**63 - 1)
        if lengths is None:
            packing = Packing(check_mean(mean, "mean"), check_spread(spread, "spread"))
        else:
            packing = Packing(None, None, lengths=lengths)
        mean = packing.mean
        needed = rows * seq
        # Every length is at least one token, so a mean under 1 still fills
        # the rows with ``needed`` documents; this keeps tiny means bounded.
        count = max(MIN_STREAM_DOCUMENTS, math.ceil(needed / max(mean, 1.0)))
        lengths = packing.document_lengths(count, seed)
        total = int(lengths.sum())
        while total < needed:
            # Rounding, and the strata missing the far tail, can leave the
            # stream short of the mean; grow it in proportion and redraw.
            count = math.ceil(count * needed / total) + 1
            lengths = packing.document_lengths(count, seed)
            total = int(lengths.sum())
        # Row r begins somewhere in the r-th of ``rows`` equal slices of the
        # stream: every phase is represented, yet no two rows coincide.
        rng = np.random.default_rng((seed, 1))
        offsets = rng.random(rows)
        starts = np.floor((np.arange(rows) + offsets) / rows * total).astype(np.int64)
        starts = np.minimum(starts, total - 1)
        rng.shuffle(starts)
        return cls(lengths=lengths, starts=starts, seq=seq)

    def causal_keys_every_window(self) -> float:
        """Document-causal keys per query, averaged over every window of the stream.

        The mean over all ``total`` starts of the circular stream (not just the
        rows drawn) of the keys ``doc(q) == doc(kv) & q >= kv`` keeps, which is
        ``position + 1`` with positions restarting at the row's start: a query
        ``t`` tokens into a row, ``a`` tokens into its document, keeps
        ``min(a, t) + 1``. A uniform start makes every stream position
        uniform, so the mean depends on the lengths alone, not their order:
        ``1 + sum_d g(L_d, T) / (total * T)`` with
        ``g(L, T) = sum_{t<T} sum_{a<L} min(a, t)``, O(documents). The
        sampler takes it as its control variate's exact mean, which is what
        takes the draw's row-to-row noise out (``docs/packing.md``).
        """
        length = self.lengths.astype(np.float64)
        seq = float(self.seq)
        # f(L, t) = sum_{a<L} min(a, t) is t(L - 1) - t(t - 1)/2 for t < L - 1
        # and L(L - 1)/2 from then on; g sums it over t < T in closed form.
        m = np.minimum(seq, length - 1)
        rising = (length - 1) * m * (m - 1) / 2 - m * (m - 1) * (m - 2) / 6
        flat = (seq - m) * length * (length - 1) / 2
        return 1.0 + float((rising + flat).sum()) / (float(self.total) * seq)

    def boundaries(self) -> RowBoundaries:
        """Where each row's documents begin, without materialising the rows."""
        ends = np.cumsum(self.lengths)
        total = int(ends[-1])
        # Unrolled twice: a window starts before ``total`` and is at most
        # ``total`` long, so it ends before ``2 * total``.
        ends = np.concatenate([ends, ends + total])
        first = np.searchsorted(ends, self.starts, side="right")
        last = np.searchsorted(ends, self.starts + self.seq - 1, side="right")
        # Boundaries strictly inside row r are ends[first[r] : last[r]].
        counts = last - first
        offsets = np.zeros(len(self.starts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        row_of = np.repeat(np.arange(len(self.starts)), counts)
        index = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[row_of] + first[row_of]
        cuts = ends[index] - self.starts[row_of]
        doc_start = np.where(first > 0, ends[np.maximum(first - 1, 0)], 0)
        return RowBoundaries(
            seq=self.seq,
            cuts=cuts.astype(np.int64),
            offsets=offsets,
            first_age=(self.starts - doc_start).astype(np.int64),
        )

