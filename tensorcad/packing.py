"""Packed training rows: the one place that draws them.

Under the ``stream`` strategy a packed row is a window of a stream of
documents laid end to end, so it usually begins and ends inside a document;
the bin-packing strategies (``bfd``, ``ffd``, ``split``, ``pad``,
``tensorcad.packers``) begin every row on a boundary and pad its end.
Document lengths are gamma with mean ``mean`` and coefficient of variation
``spread`` (0: fixed lengths, 1: exponential), or empirical
(``corpus.histogram.Lengths``). The engine's sampler, the runtime's made-up
packing and the test harness all draw from here, so they agree on what a
packing is.

The stream is built for low noise rather than realism: one length per
stratum of the distribution (quantiles at ``(i + 0.5) / count``), shuffled,
and rows that begin at stratified offsets, so every phase a row can begin at
is represented. See ``docs/packing.md`` for why each choice was made.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from tensorcad.corpus.histogram import Lengths
from tensorcad.errors import TensorcadError, check_integer
# The representations of a packing (position_ids, cu_seqlens, seq_idx, EOS ids) and
# the conversions between them live in their own module; their public names are
# tensorcad.packing's too.
from tensorcad.packing_forms import (  # noqa: F401 - re-exported
    _positions_from_cuts,
    cu_seqlens_of,
    documents_of_cu_seqlens,
    documents_of_eos,
    documents_of_lengths,
    documents_of_positions,
    documents_of_seq_idx,
    eos_ids_of,
    flash_kwargs_of,
    positions_of,
    row_lengths,
    seq_idx_of,
)

MAX_MEAN = 2**24
MAX_SPREAD = 10.0
# Below this a gamma's shape (1/spread^2) overflows the quantile function;
# such lengths are fixed in all but name, and spread 0 says so exactly.
MIN_SPREAD = 1e-4
MAX_SEQ = 2**24
MAX_ROWS = 2**20
# Materialising more than this many tokens a call is a mistake, not a
# workload: 2**28 int64 tokens is 2 GiB for each of documents and positions.
MAX_DRAWN_TOKENS = 2**28
MIN_STREAM_DOCUMENTS = 1024
# How rows are filled (docs/packing.md): a stream cut into rows, best-fit and
# first-fit decreasing, Ding et al.'s split-then-best-fit, one document a row.
STRATEGIES = ("stream", "bfd", "ffd", "split", "pad")
# Documents a bin-packer sees at once. TRL packs through ``datasets.map``,
# whose batches hold 1,000 examples by default; each batch is packed alone.
DEFAULT_BUFFER = 1000
MAX_BUFFER = 2**20


def _real(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TensorcadError(path, f"expected a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise TensorcadError(path, f"expected a finite number, got {result}")
    return result


def check_mean(mean: object, path: str = "packing.mean") -> float:
    value = _real(mean, path)
    if not 0 < value <= MAX_MEAN:
        raise TensorcadError(path, f"mean document length must be in (0, {MAX_MEAN}], got {value}")
    return value


def check_spread(spread: object, path: str = "packing.spread") -> float:
    value = _real(spread, path)
    if not 0 <= value <= MAX_SPREAD:
        raise TensorcadError(path, f"spread must be in [0, {MAX_SPREAD:g}], got {value}")
    if 0 < value < MIN_SPREAD:
        raise TensorcadError(path, f"spread {value:g} is below {MIN_SPREAD:g}, fixed lengths in effect: give 0")
    return value


def check_strategy(strategy: object, path: str = "packing.strategy") -> str:
    if strategy not in STRATEGIES:
        raise TensorcadError(path, f"unknown strategy {strategy!r} (strategies: {', '.join(STRATEGIES)})")
    return str(strategy)


@dataclass(frozen=True)
class Packing:
    """How training rows are packed: document lengths, and the strategy that fills rows.

    Lengths are gamma with ``mean`` tokens and coefficient of variation
    ``spread`` (spread defaults to 1, exponential, because real corpora vary;
    ``spread=0`` is fixed lengths), or empirical: ``lengths``, a histogram,
    whose own mean and spread then replace the two numbers (a ``mean`` given
    beside it must agree). ``strategy`` is one of ``STRATEGIES``; ``buffer`` the
    documents a bin-packing strategy packs at once.
    """

    mean: float | None
    spread: float | None = 1.0
    lengths: Lengths | None = None
    strategy: str = "stream"
    buffer: int = DEFAULT_BUFFER

    def __post_init__(self) -> None:
        if self.lengths is not None:
            if not isinstance(self.lengths, Lengths):
                raise TensorcadError("packing.lengths", "expected a Lengths (corpus.histogram.load_lengths)")
            if self.mean is not None and abs(check_mean(self.mean) - self.lengths.mean) > 1e-9 * self.lengths.mean:
                raise TensorcadError("packing.mean", f"{self.mean:g} disagrees with the lengths' own mean "
                                                     f"{self.lengths.mean:g}; give one or the other")
            object.__setattr__(self, "mean", check_mean(self.lengths.mean))
            object.__setattr__(self, "spread", float(self.lengths.spread))
        else:
            if self.mean is None:
                raise TensorcadError("packing.mean", "a packing needs a mean document length or lengths")
            object.__setattr__(self, "mean", check_mean(self.mean))
            object.__setattr__(self, "spread", check_spread(1.0 if self.spread is None else self.spread))
        object.__setattr__(self, "strategy", check_strategy(self.strategy))
        object.__setattr__(self, "buffer", check_integer(self.buffer, "packing.buffer", 1, MAX_BUFFER))

    def to_json(self) -> dict:
        """The operating point's ``packing``: mean, spread, strategy, and what was read, if any."""
        out: dict = {"mean": self.mean, "spread": self.spread, "strategy": self.strategy}
        if self.strategy in ("bfd", "ffd", "split"):
            out["buffer"] = self.buffer
        if self.lengths is not None:
            out["lengths"] = self.lengths.summary()
        return out

    def document_lengths(self, count: int, seed: int = 0) -> np.ndarray:
        """One whole-token length per stratum of this packing's distribution, shuffled."""
        if self.lengths is None:
            return document_lengths(self.mean, self.spread, count, seed)
        count = check_integer(count, "count", 1, 2**31)
        seed = check_integer(seed, "seed", 0, 2**63 - 1)
        whole = self.lengths.strata(count).astype(np.int64)
        np.random.default_rng(seed).shuffle(whole)
        return whole


def packing_of(mean: object, spread: object = None, *, mean_path: str = "pack",
               spread_path: str = "pack_spread", lengths: object = None, strategy: object = None,
               lengths_path: str = "pack_lengths", strategy_path: str = "pack_strategy",
               column: str | None = None) -> Packing | None:
    """The packing that optional settings describe, the same everywhere (CLI, MCP, editor).

    None without a mean or lengths (one document a row); spread 1 when only a
    mean is given, because real corpora vary; a spread or strategy with nothing
    to pack is refused, naming it. ``lengths`` is a file to read
    (``corpus.histogram.load_lengths``) or a ``Lengths``; it cannot be given
    with a mean or spread, since it has its own.
    """
    if lengths is not None:
        for given, path in ((mean, mean_path), (spread, spread_path)):
            if given is not None:
                raise TensorcadError(path, f"cannot be given with {lengths_path}, which has its own")
        if not isinstance(lengths, Lengths):
            from tensorcad.corpus.histogram import load_lengths

            if not isinstance(lengths, (str, bytes)) and not hasattr(lengths, "__fspath__"):
                raise TensorcadError(lengths_path, "expected a file of lengths")
            lengths = load_lengths(lengths, column)
        return Packing(None, None, lengths=lengths,
                       strategy=check_strategy("stream" if strategy is None else strategy, strategy_path))
    if mean is None:
        for given, path in ((spread, spread_path), (strategy, strategy_path)):
            if given is not None:
                raise TensorcadError(path, f"needs {mean_path} (the mean document length) or {lengths_path}")
        return None
    return Packing(check_mean(mean, mean_path),
                   Packing.spread if spread is None else check_spread(spread, spread_path),
                   strategy=check_strategy("stream" if strategy is None else strategy, strategy_path))


def document_lengths(mean: float, spread: float, count: int, seed: int = 0) -> np.ndarray:
    """One whole-token length per stratum of the gamma distribution, shuffled.

    Quantile ``(i + 0.5) / count`` for stratum ``i``, rounded to the nearest
    integer (halves up) and at least 1: a document holds whole tokens.
    Stratifying rather than drawing i.i.d. is what keeps the long documents,
    which dominate the keys a query keeps, from being the noise.
    """
    mean = check_mean(mean, "mean")
    spread = check_spread(spread, "spread")
    count = check_integer(count, "count", 1, 2**31)
    seed = check_integer(seed, "seed", 0, 2**63 - 1)
    if spread == 0:
        lengths = np.full(count, mean)
    else:
        shape = 1.0 / spread**2
        scale = mean * spread**2
        # Imported here, not at load: scipy.special alone takes longer than `tensorcad --help`.
        from scipy.special import gammaincinv

        strata = (np.arange(count, dtype=np.float64) + 0.5) / count
        lengths = gammaincinv(shape, strata) * scale
    whole = np.maximum(np.floor(lengths + 0.5), 1).astype(np.int64)
    np.random.default_rng(seed).shuffle(whole)
    return whole


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


def draw_boundaries(
    rows: int, seq: int, mean: float | None = None, spread: float = 1.0, seed: int = 0, *,
    packing: Packing | None = None,
) -> RowBoundaries:
    """The boundaries of the rows ``draw`` would return, without the (rows, seq) arrays."""
    if packing is None or (packing.lengths is None and packing.strategy == "stream"):
        if packing is not None:
            mean, spread = packing.mean, packing.spread
        return Stream.build(rows, seq, mean, spread, seed).boundaries()
    from tensorcad.packers import draw_packed

    return draw_packed(packing, rows, seq, seed).boundaries


def draw(
    rows: int, seq: int, mean: float | None = None, spread: float = 1.0, seed: int = 0, *,
    packing: Packing | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(documents, positions)``, both int64 (rows, seq), for a seeded packing.

    ``documents`` starts at 0 in each row and rises by one at each boundary;
    ``positions`` is ``positions_of(documents)``. Same arguments, same arrays.
    ``packing`` (instead of mean and spread) draws any packing: empirical
    lengths, any strategy; a row's padding is then a document of its own.
    """
    rows = check_integer(rows, "rows", 1, MAX_ROWS)
    seq = check_integer(seq, "seq", 1, MAX_SEQ)
    if rows * seq > MAX_DRAWN_TOKENS:
        raise TensorcadError(
            "rows",
            f"{rows} x {seq} tokens is more than {MAX_DRAWN_TOKENS} to materialise; "
            "use draw_boundaries",
        )
    boundaries = draw_boundaries(rows, seq, mean, spread, seed, packing=packing)
    # Equal to positions_of(documents), built from the boundaries directly.
    return boundaries.documents(), boundaries.positions()
