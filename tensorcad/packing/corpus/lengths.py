"""``Lengths``: an empirical distribution of document lengths, exact counts a length.

What a packing draws from when it is given a corpus: built from lengths
(``Lengths.of``), a histogram file (``histogram.load_lengths``), a corpus
(``reading``), shards merged (``Lengths.merge``) or a log-normal stand-in
(``Lengths.lognormal``); it answers the figures the engine reads (documents,
tokens, mean, spread, quantiles, strata).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tensorcad.errors import TensorcadError

# A document longer than this is not a document a row could hold (packing.MAX_SEQ).
MAX_LENGTH = 2**24
# Documents a histogram may describe: past this the counts stop being exact in float64.
MAX_DOCUMENTS = 2**50
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass(frozen=True)
class Lengths:
    """An empirical distribution of whole-token document lengths.

    ``values`` sorted, unique, each >= 1; ``counts`` the documents of each
    length. Frozen and hashable (tuples), so a packing holding it is a cache
    key. ``source`` says where it was read and takes no part in equality.
    """

    values: tuple[int, ...]
    counts: tuple[int, ...]
    source: str = field(default="", compare=False)

    def __repr__(self) -> str:
        # A corpus holds thousands of lengths: printed, it is its summary, not every number.
        where = f", source={self.source!r}" if self.source else ""
        return (f"Lengths({self.documents:,} documents, mean {self.mean:,.1f}, spread {self.spread:.3f}, "
                f"lengths {self.values[0]:,}..{self.values[-1]:,}{where})")

    def __post_init__(self) -> None:
        values = tuple(int(v) for v in self.values)
        counts = tuple(int(c) for c in self.counts)
        path = self.source or "lengths"
        if len(values) != len(counts):
            raise TensorcadError(path, f"{len(values)} values but {len(counts)} counts")
        if not values:
            raise TensorcadError(path, "no documents")
        if any(b <= a for a, b in zip(values, values[1:])):
            raise TensorcadError(path, "values must be sorted and unique")
        if values[0] < 1 or values[-1] > MAX_LENGTH:
            raise TensorcadError(path, f"lengths must be in 1..{MAX_LENGTH:,}")
        if min(counts) < 0:
            raise TensorcadError(path, "counts must not be negative")
        total = sum(counts)
        if total == 0:
            raise TensorcadError(path, "zero documents in total")
        if total > MAX_DOCUMENTS:
            raise TensorcadError(path, f"more than {MAX_DOCUMENTS:,} documents")
        # Lengths with no documents say nothing; dropping them keeps equal distributions equal.
        kept = [(v, c) for v, c in zip(values, counts) if c > 0]
        object.__setattr__(self, "values", tuple(v for v, _ in kept))
        object.__setattr__(self, "counts", tuple(c for _, c in kept))

    @classmethod
    def of(cls, lengths, source: str = "") -> Lengths:
        """The histogram of a list (or array) of lengths."""
        array = np.asarray(lengths)
        if array.size == 0:
            raise TensorcadError(source or "lengths", "no documents")
        if not np.issubdtype(array.dtype, np.integer):
            raise TensorcadError(source or "lengths", f"expected integer lengths, got {array.dtype}")
        values, counts = np.unique(array.ravel(), return_counts=True)
        return cls(tuple(values.tolist()), tuple(counts.tolist()), source)

    def merge(self, *others: Lengths) -> Lengths:
        """The histogram of these corpora together: each length's counts added, exactly (``Lengths.merge(a, b)``).

        Counts are whole numbers summed in int64 (a histogram holds at most
        2**50 documents), so shards merged in any order and any grouping give
        the histogram of their concatenation to the document.
        """
        every = (self, *others)
        if not all(isinstance(h, Lengths) for h in every):
            raise TensorcadError("lengths", "merges only Lengths")
        if sum(h.documents for h in every) > MAX_DOCUMENTS:  # checked first: then no int64 sum can overflow
            raise TensorcadError("lengths", f"merged, more than {MAX_DOCUMENTS:,} documents")
        unique, inverse = np.unique(np.concatenate([h.arrays[0] for h in every]), return_inverse=True)
        counts = np.zeros(len(unique), dtype=np.int64)
        np.add.at(counts, inverse, np.concatenate([h.arrays[1] for h in every]))
        names = [h.source or "lengths" for h in every]
        source = " + ".join(names) if len(names) <= 4 else f"{names[0]} + {len(names) - 1:,} more"
        return Lengths(tuple(unique.tolist()), tuple(counts.tolist()), source)

    @classmethod
    def lognormal(cls, mean: float, spread: float, documents: int = 200_000) -> Lengths:
        """Log-normal lengths of a mean and coefficient of variation, one document per stratum.

        The quantile at (i + 0.5)/n, rounded to whole tokens and at least 1: a
        heavy-tailed corpus in the shape web text has (c = 3 is a common fit),
        reproducible without a download. Rounding and the strata's missing far
        tail leave the table's own c a little under the asked one (2.95 for 3).
        """
        from scipy.special import ndtri

        if not (mean > 0 and spread > 0 and 1 <= documents <= 1 << 24):
            raise TensorcadError("lengths", "a log-normal needs mean > 0, spread > 0 and 1..2**24 documents")
        sigma = math.sqrt(math.log1p(spread**2))
        strata = (np.arange(documents) + 0.5) / documents
        values = np.exp(math.log(mean) - sigma**2 / 2 + sigma * ndtri(strata))
        whole = np.minimum(np.maximum(np.floor(values + 0.5), 1), MAX_LENGTH).astype(np.int64)
        return cls.of(whole, source=f"log-normal mean {mean:g}, c = {spread:g}")

    # -- what the distribution is ------------------------------------------------

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.values, dtype=np.int64), np.asarray(self.counts, dtype=np.int64)

    @property
    def documents(self) -> int:
        return sum(self.counts)

    @property
    def tokens(self) -> int:
        return sum(v * c for v, c in zip(self.values, self.counts))

    @property
    def mean(self) -> float:
        return self.tokens / self.documents

    @property
    def spread(self) -> float:
        """Coefficient of variation (population standard deviation over the mean)."""
        v, c = (a.astype(np.float64) for a in self.arrays)
        mean = self.mean
        variance = float((c * (v - mean) ** 2).sum()) / self.documents
        return math.sqrt(variance) / mean

    @property
    def max(self) -> int:
        return self.values[-1]

    def quantile(self, p: float) -> int:
        """The smallest length at least a fraction ``p`` of documents do not exceed."""
        v, c = self.arrays
        index = int(np.searchsorted(np.cumsum(c), p * self.documents, side="left"))
        return int(v[min(index, len(v) - 1)])

    def strata(self, count: int) -> np.ndarray:
        """One length per stratum: the quantile at ``(i + 0.5) / count``, for i < count.

        The empirical quantile function is a step function, so this is the
        value whose cumulative count first exceeds ``(i + 0.5) / count`` of the
        documents: exactly the stratified draw the gamma gets
        (``packing.document_lengths``), for a distribution given as a table.
        """
        v, c = self.arrays
        cumulative = np.cumsum(c).astype(np.float64) / self.documents
        points = (np.arange(count, dtype=np.float64) + 0.5) / count
        return v[np.minimum(np.searchsorted(cumulative, points, side="right"), len(v) - 1)]

    def summary(self) -> dict:
        """What the report echoes: documents, mean, spread, quantiles, max."""
        out = {"documents": self.documents, "mean": self.mean, "spread": self.spread}
        out.update({name: self.quantile(p) for name, p in QUANTILES})
        out["max"] = self.max
        return out

    def to_json(self) -> dict[str, int]:
        """The histogram file's form: ``{"length": count}``, lengths ascending."""
        return {str(v): c for v, c in zip(self.values, self.counts)}


# -- the loader ------------------------------------------------------------------------
