"""A packing's settings: the length distribution and the strategy, checked, and the lengths they give.

Document lengths are gamma with mean ``mean`` and coefficient of variation
``spread`` (0: fixed lengths, 1: exponential), or empirical
(``corpus.histogram.Lengths``); the strategy says how rows are filled
(``strategies``). ``packing_of`` reads the same settings for every surface
(CLI, MCP, editor), and ``document_lengths`` draws one whole-token length per
stratum of the distribution, shuffled, which every strategy packs.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from tensorcad.errors import TensorcadError, check_integer

from .corpus.histogram import Lengths, load_lengths
from .whole_quantiles import whole_quantiles

MAX_MEAN = 2**24
MAX_SPREAD = 10.0
# Below this a gamma's shape (1/spread^2) overflows the quantile function;
# such lengths are fixed in all but name, and spread 0 says so exactly.
MIN_SPREAD = 1e-4
MAX_SEQ = 2**24
MAX_ROWS = 2**20
# How rows are filled (docs/packing.md): a stream cut into rows, best-fit and
# first-fit decreasing, Ding et al.'s split-then-best-fit, one document a row;
# then the libraries' own packers as they pack (library_packers.PACKERS).
STRATEGIES = ("stream", "bfd", "ffd", "split", "pad",
              "trl-bfd", "trl-bfd-split", "trl-wrapped", "torchtune", "torchtune-split")
# The strategies that cut a document longer than a row to one, dropping the rest.
TRUNCATING = ("bfd", "ffd", "pad", "trl-bfd", "torchtune")
# The strategies that pack a buffer of documents at a time (TRL: a datasets.map batch).
BUFFERED = ("bfd", "ffd", "split", "trl-bfd", "trl-bfd-split", "trl-wrapped")
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

    mean: float | None = None  # Packing(lengths=L) alone: the lengths' own mean
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
        if self.strategy in BUFFERED:
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
    mean = check_mean(mean, mean_path)
    if mean < 1:
        # What a user types is a length of whole tokens: 1e-320 or 0.5 describes no corpus (the engine's
        # closed forms still take such a mean, rounding each document up to one token).
        raise TensorcadError(mean_path, f"a mean document length of {mean:g} tokens is below one token")
    return Packing(mean,
                   Packing.spread if spread is None else check_spread(spread, spread_path),
                   strategy=check_strategy("stream" if strategy is None else strategy, strategy_path))


def rises_past_its_error(spread: float, count: int) -> bool:
    """Whether neighbouring strata's gamma quantiles differ by 1,000 times the solver's error (1e-13 relative).

    They differ by at least 2.5 spread / count of themselves (``whole_quantiles``);
    below that, every stratum is evaluated.
    """
    return count <= 1e10 * spread


def document_lengths(mean: float, spread: float, count: int, seed: int = 0) -> np.ndarray:
    """One whole-token length per stratum of the gamma distribution, shuffled.

    Quantile ``(i + 0.5) / count`` for stratum ``i``, rounded to the nearest
    integer (halves up) and at least 1: a document holds whole tokens.
    Stratifying rather than drawing i.i.d. is what keeps the long documents,
    which dominate the keys a query keeps, from being the noise. The quantile
    is evaluated where the rounded lengths change (``whole_quantiles``), with
    the same lengths as at every stratum.
    """
    mean = check_mean(mean, "mean")
    spread = check_spread(spread, "spread")
    count = check_integer(count, "count", 1, 2**31)
    seed = check_integer(seed, "seed", 0, 2**63 - 1)
    if spread != 0:
        shape = 1.0 / spread**2
        scale = mean * spread**2
        # Imported here, not at load: scipy.special alone takes longer than `tensorcad --help`.
        from scipy.special import gammaincinv

        strata = (np.arange(count, dtype=np.float64) + 0.5) / count
        whole = whole_quantiles(lambda p: gammaincinv(shape, p) * scale, strata,
                                refine=rises_past_its_error(spread, count)).astype(np.int64)
    else:
        whole = np.maximum(np.floor(np.full(count, mean) + 0.5), 1).astype(np.int64)
    np.random.default_rng(seed).shuffle(whole)
    return whole

