"""Exact keys a query keeps, and exact block counts, without sampling.

These hold the sampler honest: each is derived in ``docs/packing.md`` and
none draws a packing (``drawing``). Keys kept per query count the query itself
(a causal mask keeps ``kv <= q``). A window ``W`` keeps ``0 <= q - kv < W``
(``W`` keys, the query included); a non-causal one keeps ``|q - kv| < W``.

Block counts follow FlexAttention: scores are computed in ``block x block``
tiles, and a tile holding any kept score is computed whole.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from tensorcad.design.masks import BLOCK
from tensorcad.errors import TensorcadError, check_integer

from .settings import MAX_SEQ, check_mean, check_spread

DEFAULT_BLOCK = BLOCK  # FlexAttention's default block (design.masks)


def _positive(value: object, path: str, high: int = MAX_SEQ) -> int:
    return check_integer(value, path, 1, high)


def _blocks(seq: int, block: int) -> int:
    block = _positive(block, "block")
    if seq % block:
        raise TensorcadError("seq", f"{seq} is not a whole number of {block}-token blocks")
    return seq // block


# --- keys a query keeps, one document a row -------------------------------------------


def causal(seq: int) -> float:
    """Causal attention over one document of ``seq`` tokens: (T + 1) / 2."""
    seq = _positive(seq, "seq")
    return (seq + 1) / 2


def full(seq: int) -> float:
    """Bidirectional attention over one document: every key, T."""
    return float(_positive(seq, "seq"))


def window(seq: int, w: int, causal: bool = True) -> float:
    """A sliding window of ``w`` over one document of ``seq`` tokens (``w <= seq``)."""
    seq = _positive(seq, "seq")
    w = _positive(w, "window")
    if w > seq:
        raise TensorcadError("window", f"window {w} is longer than the sequence {seq}")
    if causal:
        # Queries q < w keep q + 1 keys; the rest keep w.
        total = w * (w + 1) // 2 + (seq - w) * w
    else:
        # Every query keeps 2w - 1 keys less those cut off at either edge;
        # the left cut over all q is sum_{q<w-1} (w-1-q) = w(w-1)/2, and the
        # right cut is the same by symmetry.
        total = seq * (2 * w - 1) - w * (w - 1)
    return total / seq


# --- keys a query keeps, packed documents ------------------------------------------------


def fixed_tiled(length: int) -> float:
    """Fixed documents that tile the row from its start: (L + 1) / 2."""
    length = _positive(length, "length")
    return (length + 1) / 2


def fixed_phase_average_exact(seq: int, length: int) -> Fraction:
    """``fixed_phase_average`` as an exact fraction.

    A query at row offset t in a document it entered ``age`` tokens ago keeps
    ``min(age, t) + 1`` keys. Over every phase, ``age`` is uniform on
    ``0..L-1``, so ``keys(t) = 1 + sum_{a=1}^{t} (L - a)+ / L``, which is
    ``1 + t - t(t + 1) / 2L`` for ``t < L`` and ``1 + (L - 1) / 2`` after.
    """
    seq = _positive(seq, "seq")
    length = _positive(length, "length")
    ramp = min(seq, length)  # offsets t < ramp still see the row's edge
    ramp_sum = Fraction(ramp * (ramp - 1), 2) - Fraction((ramp - 1) * ramp * (ramp + 1), 6 * length)
    flat_sum = Fraction((seq - ramp) * (length - 1), 2)
    return 1 + (ramp_sum + flat_sum) / seq


def fixed_phase_average(seq: int, length: int) -> float:
    """Fixed-length documents, averaged over every phase a row can begin at.

    For L = 1,024 at T = 8,192: (L + 1)(3T - L + 1) / 6T = 491.1667 (exactly
    491 + 1/6 + 1/49152).
    """
    return float(fixed_phase_average_exact(seq, length))


def size_biased(mean: float, spread: float) -> float:
    """Keys a query keeps far from the row's edges: mu (1 + c^2) / 2 + 1/2.

    A token lands in a document in proportion to its length, and is uniform
    within it, so it keeps E[L(L + 1) / 2] / E[L] keys.
    """
    mean = check_mean(mean, "mean")
    spread = check_spread(spread, "spread")
    return mean * (1 + spread**2) / 2 + 0.5


def age_survival(mean: float, spread: float, ages: np.ndarray) -> np.ndarray:
    """P(age >= a): the chance a token has at least ``a`` tokens of its document before it.

    For whole-token lengths L, P(age >= a) = E[(L - a)+] / E[L], and
    E[(L - a)+] = sum_{m > a} P(L >= m). Lengths are the gamma's values rounded
    to the nearest integer, at least 1 (as the stream draws them), so for
    m >= 2, P(L >= m) = Q(m - 1/2): the gamma's survival at a half-integer
    (regularised upper incomplete gamma, k = 1/c^2, theta = mu c^2). At
    ordinary means this differs from the continuous form
    mu Q(k + 1, a/theta) - a Q(k, a/theta) by well under 0.1%; at a mean of a
    few tokens with a wide spread, rounding and the floor of one token matter.
    """
    mean = check_mean(mean, "mean")
    spread = check_spread(spread, "spread")
    ages = np.asarray(ages, dtype=np.float64)
    if spread == 0:
        length = max(1.0, np.floor(mean + 0.5))
        return np.maximum(length - ages, 0.0) / length
    from scipy.special import gammaincc, gammainccinv  # here, not at load: see settings.document_lengths

    shape = 1.0 / spread**2
    scale = mean * spread**2
    # P(L >= m) for m = 1, 2, ... until the tail holds nothing a float can see
    last = int(np.ceil(gammainccinv(shape, 1e-18) * scale)) + 2
    m = np.arange(1, last + 1, dtype=np.float64)
    at_least = np.where(m == 1, 1.0, gammaincc(shape, (m - 0.5) / scale))
    # tail[i] = sum_{m > i} P(L >= m): E[(L - i)+] for i = 0, 1, ...
    tail = np.concatenate((np.cumsum(at_least[::-1])[::-1], [0.0]))
    index = np.clip(ages, 0, last).astype(np.int64)
    return tail[index] / tail[0]


def edge_corrected(seq: int, mean: float, spread: float) -> float:
    """Gamma-length documents, averaged over every offset t of a row.

    keys(t) = 1 + E[min(age, t)] = 1 + sum_{a=1}^{t} P(age >= a); the mean
    over t in [0, T) counts P(age >= a) once for each of the T - a offsets
    that reach back to it.
    """
    seq = _positive(seq, "seq")
    ages = np.arange(1, seq, dtype=np.float64)
    weights = seq - ages
    return 1.0 + float(np.dot(age_survival(mean, spread, ages), weights)) / seq



def strided(seq: int, mean: float, spread: float, stride: int) -> float:
    """Every ``stride``-th key of the query's own document, back from itself.

    The mask ``doc(b, q) == doc(b, kv) & (q - kv) % S == 0`` with causality keeps
    ``1 + floor(min(age, t) / S)`` keys at row offset t, which is
    ``1 + sum_{k >= 1} [min(age, t) >= kS]``: ``edge_corrected``'s sum over the
    ages that are multiples of S. No interval decides such a mask's blocks, so
    the sampler draws its keys; this is what it must agree with. Stride 1 is
    ``edge_corrected``; spread 0 averages fixed lengths over every phase.
    """
    seq = _positive(seq, "seq")
    stride = check_integer(stride, "stride", 1, MAX_SEQ)
    ages = np.arange(stride, seq, stride, dtype=np.float64)
    weights = seq - ages
    return 1.0 + float(np.dot(age_survival(mean, spread, ages), weights)) / seq


# --- whole blocks --------------------------------------------------------------------------


def aligned_document_blocks(length: int, block: int = DEFAULT_BLOCK) -> tuple[int, int]:
    """(kept, computed) scores for one causal document that starts on a block boundary.

    Kept: L(L + 1)/2. Computed: every block on or below the diagonal of the
    ceil(L / block) blocks it covers.
    """
    length = _positive(length, "length")
    block = _positive(block, "block")
    blocks = -(-length // block)
    return length * (length + 1) // 2, blocks * (blocks + 1) // 2 * block * block


def causal_blocks(seq: int, block: int = DEFAULT_BLOCK) -> tuple[int, int]:
    """(kept, computed) scores for causal attention over one document a row."""
    seq = _positive(seq, "seq")
    _blocks(seq, block)
    return aligned_document_blocks(seq, block)


def window_blocks(
    seq: int, w: int, block: int = DEFAULT_BLOCK, causal: bool = True
) -> tuple[int, int]:
    """(kept, computed) scores for a sliding window over one document a row.

    The nearest pair in blocks d apart (d >= 1) is (d - 1) block + 1 tokens
    apart, so a block d below the diagonal holds a kept score iff
    (d - 1) block + 1 < w, i.e. d <= ceil((w - 1) / block).
    """
    seq = _positive(seq, "seq")
    blocks = _blocks(seq, block)
    kept = round(window(seq, w, causal) * seq)
    reach = -(-(w - 1) // block)
    below = int(np.minimum(np.arange(blocks), reach).sum())  # blocks strictly below the diagonal
    computed_blocks = blocks + below * (1 if causal else 2)
    return kept, computed_blocks * block * block


def _phase_rows(seq: int, length: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last document of every block, for a row beginning at each phase.

    Row offset t of a row beginning ``phase`` tokens into a document lies in
    document floor((phase + t) / L); shape (L, blocks) each.
    """
    blocks = seq // block
    phases = np.arange(length, dtype=np.int64)[:, None]
    starts = np.arange(blocks, dtype=np.int64)[None, :] * block
    first = (phases + starts) // length
    last = (phases + starts + block - 1) // length
    return first, last


def computed_blocks_of(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Blocks computed per row for a document-and-causal mask, from each block's documents.

    ``first``/``last`` (rows, blocks): the first and last document in each
    block's range, non-decreasing along a row. A diagonal block always keeps
    q = kv. Block (i, j), j < i, holds only kv < q, so it keeps a score iff
    the two ranges share a document; as documents never fall, that is iff
    last[j] >= first[i]. Those j form a run ending at i - 1.
    """
    rows, blocks = first.shape
    # One sorted key space for every row, so one searchsorted serves them all.
    stride = int(max(first.max(initial=0), last.max(initial=0))) + 2
    offset = np.arange(rows, dtype=np.int64)[:, None] * stride
    lo = np.searchsorted((last + offset).ravel(), (first + offset).ravel(), side="left")
    lo = lo.reshape(rows, blocks) - np.arange(rows, dtype=np.int64)[:, None] * blocks
    below = np.arange(blocks, dtype=np.int64)[None, :] - lo
    return blocks + below.sum(axis=1)


def fixed_phase_blocks(seq: int, length: int, block: int = DEFAULT_BLOCK) -> tuple[float, float]:
    """(kept, computed) scores a row, averaged over every phase, for fixed documents.

    Document-and-causal mask, documents of ``length`` laid end to end, the
    row beginning at each of the L phases in turn. Divide computed by kept
    for the ratio of means.
    """
    kept, computed = fixed_phase_block_counts(seq, length, block)
    return float(kept.mean()), float(computed.mean()) * block * block


def fixed_phase_block_counts(
    seq: int, length: int, block: int = DEFAULT_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """Per phase: scores kept and blocks computed (not yet times block^2); shape (L,) each."""
    seq = _positive(seq, "seq")
    length = _positive(length, "length")
    _blocks(seq, block)
    first, last = _phase_rows(seq, length, block)
    computed = computed_blocks_of(first, last)
    # The row's pieces: what is left of the first document, whole ones, the start of the last.
    phases = np.arange(length, dtype=np.int64)
    head = np.minimum(length - phases, seq)
    whole, tail = np.divmod(seq - head, length)
    kept = head * (head + 1) // 2 + whole * (length * (length + 1) // 2) + tail * (tail + 1) // 2
    return kept, computed


def fixed_phase_block_ratio(seq: int, length: int, block: int = DEFAULT_BLOCK) -> float:
    """Scores computed over scores kept, as a ratio of the phase-averaged means."""
    kept, computed = fixed_phase_blocks(seq, length, block)
    return computed / kept



# --- empirical lengths, and rows that begin on a boundary --------------------------------


def _table(lengths) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of a ``corpus.histogram.Lengths``."""
    values, counts = lengths.arrays
    return values.astype(np.float64), counts.astype(np.float64) / counts.sum()


def empirical_size_biased(lengths) -> float:
    """Keys a query keeps far from the row's edges, for an empirical distribution.

    E[L(L + 1)/2] / E[L]: a token lands in a document in proportion to its length.
    """
    v, p = _table(lengths)
    return float((p * v * (v + 1) / 2).sum() / (p * v).sum())


def empirical_age_survival(lengths, ages: np.ndarray) -> np.ndarray:
    """P(age >= a) for an empirical distribution: E[(L - a)+] / E[L]."""
    v, p = _table(lengths)
    ages = np.asarray(ages, dtype=np.float64)
    # E[(L - a)+] = sum_v p_v (v - a)+; sorted values let one cumulative sum serve every a.
    tail_p = np.concatenate((np.cumsum((p)[::-1])[::-1], [0.0]))
    tail_pv = np.concatenate((np.cumsum((p * v)[::-1])[::-1], [0.0]))
    above = np.searchsorted(v, ages, side="right")  # first value > a
    return (tail_pv[above] - ages * tail_p[above]) / float((p * v).sum())


def empirical_edge_corrected(seq: int, lengths) -> float:
    """``edge_corrected`` for an empirical distribution: a stream cut into rows at every phase."""
    seq = _positive(seq, "seq")
    ages = np.arange(1, seq, dtype=np.float64)
    return 1.0 + float(np.dot(empirical_age_survival(lengths, ages), seq - ages)) / seq


def boundary_keys(pieces: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Keys a query keeps when every row begins on a boundary: the mean of (position + 1).

    Over the real tokens of pieces of ``pieces`` tokens (each keeps
    n(n + 1)/2 of its own scores), weighted by how often each occurs.
    """
    n = np.asarray(pieces, dtype=np.float64)
    w = np.ones_like(n) if weights is None else np.asarray(weights, dtype=np.float64)
    return float((w * n * (n + 1) / 2).sum() / (w * n).sum())


def truncated_keys(seq: int, lengths) -> float:
    """``bfd``, ``ffd`` and ``pad``: documents truncated to a row, each beginning one or sharing one.

    Every document is m = min(L, T) tokens from its first, so E[m(m + 1)/2] / E[m].
    """
    v, p = _table(lengths)
    return boundary_keys(np.minimum(v, _positive(seq, "seq")), p)


def split_keys(seq: int, lengths) -> float:
    """``split``: a document of L tokens is floor(L/T) pieces of T and one of L mod T."""
    seq = _positive(seq, "seq")
    v, p = _table(lengths)
    whole, rest = np.divmod(v, seq)
    kept = whole * seq * (seq + 1) / 2 + rest * (rest + 1) / 2
    return float((p * kept).sum() / (p * v).sum())
