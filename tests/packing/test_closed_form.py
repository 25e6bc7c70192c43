"""Every closed form held against something that counts: every point, or a brute-force stream."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tensorcad.packing import closed_form as cf
from tensorcad.errors import TensorcadError

# --- brute force, written independently of the closed forms ------------------------------


def dense_phase_keys(seq: int, length: int, stride: int = 1) -> Fraction:
    """Keys a query keeps, every phase and every query enumerated: min(age, t) // S + 1.

    Stride 1 keeps every key of the document back to the row's edge; stride S every S-th.
    """
    phases = np.arange(length, dtype=np.int64)[:, None]
    t = np.arange(seq, dtype=np.int64)[None, :]
    age = (phases + t) % length
    return Fraction(int((np.minimum(age, t) // stride + 1).sum()), length * seq)


def dense_mask(documents: np.ndarray, window: int | None = None, causal: bool = True):
    """The (T, T) mask of one row: same document, causal, optional window."""
    q = np.arange(len(documents))[:, None]
    kv = np.arange(len(documents))[None, :]
    keep = documents[:, None] == documents[None, :]
    if causal:
        keep &= kv <= q
    if window is not None:
        keep &= np.abs(q - kv) < window
    return keep


def dense_blocks(keep: np.ndarray, block: int) -> tuple[int, int]:
    """(kept, computed) by testing every point of every block."""
    n = keep.shape[0] // block
    tiles = keep.reshape(n, block, n, block).any(axis=(1, 3))
    return int(keep.sum()), int(tiles.sum()) * block * block


def stream_pieces(
    seq: int, mean: float, spread: float, documents: int, rows: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces (token counts) of documents in rows cut at uniform offsets from i.i.d. gamma documents.

    Lengths are drawn with numpy's gamma (not the sampler's quantiles) and
    rounded to whole tokens; every row is split at the document ends inside it.
    Returns the pieces, the row of each and each row's first token in the stream.
    """
    rng = np.random.default_rng(seed)
    shape = 1 / spread**2
    lengths = np.maximum(np.floor(rng.gamma(shape, mean / shape, documents) + 0.5), 1)
    ends = np.cumsum(lengths.astype(np.int64))
    starts = ends - lengths.astype(np.int64)
    begin = rng.integers(0, int(ends[-1]) - seq, rows)
    end = begin + seq
    first = np.searchsorted(ends, begin, side="right")
    last = np.searchsorted(ends, end - 1, side="right")
    counts = last - first + 1
    row = np.repeat(np.arange(rows), counts)
    doc = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + first[row]
    piece = np.minimum(ends[doc], end[row]) - np.maximum(starts[doc], begin[row])
    assert piece.min() >= 1 and np.bincount(row, piece).tolist() == [seq] * rows
    return piece, row, begin


def stream_keys(
    seq: int, mean: float, spread: float, documents: int, rows: int, seed: int
) -> tuple[float, float]:
    """Keys a query keeps in ``stream_pieces``' rows (min(age, t) + 1, n(n + 1)/2 a piece of
    n), and the figure's standard error.

    The error is taken from batch means: the rows in 50 stretches of the stream, each of its
    own documents, so the spread of the stretches' means holds both the rows' noise and that
    of the stream's own (long) documents, which the rows' spread alone would miss.
    """
    piece, row, begin = stream_pieces(seq, mean, spread, documents, rows, seed)
    per_row = np.bincount(row, piece * (piece + 1) // 2, minlength=rows) / seq
    batches = np.array_split(per_row[np.argsort(begin)], 50)
    means = np.array([batch.mean() for batch in batches])
    return float(per_row.mean()), float(means.std(ddof=1)) / len(means) ** 0.5


# --- one document a row ----------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 7, 128, 1000])
def test_causal_and_full_count_every_point(seq):
    ones = np.zeros(seq, dtype=np.int64)
    assert cf.causal(seq) == dense_mask(ones).sum() / seq
    assert cf.full(seq) == dense_mask(ones, causal=False).sum() / seq


@pytest.mark.parametrize(("seq", "w"), [(1, 1), (10, 1), (10, 3), (64, 64), (100, 37)])
@pytest.mark.parametrize("causal", [True, False])
def test_window_counts_every_point(seq, w, causal):
    keep = dense_mask(np.zeros(seq, dtype=np.int64), window=w, causal=causal)
    assert cf.window(seq, w, causal) == pytest.approx(keep.sum() / seq, rel=1e-15)


# --- fixed documents -------------------------------------------------------------------------


def test_phase_average_at_8k_is_491_1667_exactly():
    exact = cf.fixed_phase_average_exact(8192, 1024)
    assert exact == dense_phase_keys(8192, 1024)
    # (L + 1)(3T - L + 1) / 6T: the brief's "491 + 1/6" is this to 1/49152.
    assert exact == Fraction(1025 * (3 * 8192 - 1024 + 1), 6 * 8192)
    assert exact == Fraction(491) + Fraction(1, 6) + Fraction(1, 49152)
    assert round(cf.fixed_phase_average(8192, 1024), 4) == 491.1667


@pytest.mark.parametrize(
    ("seq", "length"), [(1, 1), (1, 5), (5, 1), (64, 16), (100, 7), (7, 100), (96, 96), (300, 128)]
)
def test_phase_average_enumerates_every_phase(seq, length):
    assert cf.fixed_phase_average_exact(seq, length) == dense_phase_keys(seq, length)


def test_tiled_is_the_phase_zero_row():
    for length in (1, 16, 1024):
        documents = np.arange(8 * length) // length
        assert cf.fixed_tiled(length) == dense_mask(documents).sum() / len(documents)


@pytest.mark.parametrize(("seq", "length"), [(8192, 1024), (4096, 256), (1000, 333), (64, 1000)])
def test_edge_corrected_without_spread_is_the_phase_average(seq, length):
    assert cf.edge_corrected(seq, length, 0.0) == pytest.approx(
        cf.fixed_phase_average(seq, length), rel=1e-13
    )


# --- gamma documents -------------------------------------------------------------------------


@pytest.mark.parametrize(("seq", "mean"), [(8192, 1024), (4096, 256), (2048, 512)])
@pytest.mark.parametrize("spread", [0.5, 1.0, 2.0])
def test_edge_corrected_agrees_with_a_brute_force_stream(seq, mean, spread):
    # Two million documents: with 200,000 the stream's own long documents move the figure
    # by 0.2-0.4% at spread 2. Held at three of its standard errors (batch means): 0.06% to
    # 0.22% of the figure over this grid, the gaps -2.2 to +0.04 of them.
    measured, stderr = stream_keys(seq, mean, spread, documents=2_000_000, rows=200_000, seed=7)
    assert abs(measured - cf.edge_corrected(seq, mean, spread)) <= 3 * stderr


@pytest.mark.parametrize("spread", [0.5, 1.0])
def test_size_biased_far_from_the_edges(spread):
    # Every token of a long i.i.d. stream, no row edge: token i of a document keeps i keys.
    rng = np.random.default_rng(11)
    shape = 1 / spread**2
    lengths = np.maximum(np.floor(rng.gamma(shape, 1024 / shape, 4_000_000) + 0.5), 1)
    kept = lengths * (lengths + 1) / 2
    measured = float(kept.sum() / lengths.sum())
    # a ratio of two sums of i.i.d. terms: its standard error by the delta method (0.03% and
    # 0.07% of the figure; the gaps are 1.8 and 0.03 of them), held at three
    stderr = float((kept - measured * lengths).std(ddof=1)) / lengths.mean() / len(lengths) ** 0.5
    assert abs(measured - cf.size_biased(1024, spread)) <= 3 * stderr


def test_edge_corrected_approaches_size_biased_as_rows_grow():
    short, long = cf.edge_corrected(8192, 256, 1.0), cf.edge_corrected(131072, 256, 1.0)
    assert short < long < cf.size_biased(256, 1.0)
    assert long == pytest.approx(cf.size_biased(256, 1.0), rel=0.01)


# --- blocks ----------------------------------------------------------------------------------


def test_aligned_document_table():
    assert cf.aligned_document_blocks(1024) == (524_800, 589_824)
    assert cf.aligned_document_blocks(256) == (32_896, 49_152)
    for length in (1024, 256, 384):
        documents = np.zeros(length, dtype=np.int64)
        assert cf.aligned_document_blocks(length) == dense_blocks(dense_mask(documents), 128)


@pytest.mark.parametrize(
    ("length", "ratio"), [(2048, 1.19), (1024, 1.37), (512, 1.74), (256, 2.48), (128, 3.94)]
)
def test_phase_averaged_stream_table_at_8k(length, ratio):
    # Ratio of the means; the mean of per-phase ratios rounds the same (see docs/packing.md).
    assert round(cf.fixed_phase_block_ratio(8192, length), 2) == ratio
    kept, computed = cf.fixed_phase_block_counts(8192, length)
    assert round(float((computed * 128 * 128 / kept).mean()), 2) == ratio


@pytest.mark.parametrize(
    ("seq", "length", "block"), [(64, 16, 8), (64, 24, 16), (96, 7, 8), (48, 100, 16)]
)
def test_phase_blocks_count_every_point(seq, length, block):
    kept, computed = cf.fixed_phase_block_counts(seq, length, block)
    for phase in range(length):
        documents = (phase + np.arange(seq)) // length
        dense_kept, dense_computed = dense_blocks(dense_mask(documents), block)
        assert (kept[phase], computed[phase] * block * block) == (dense_kept, dense_computed)
    mean_kept, _ = cf.fixed_phase_blocks(seq, length, block)
    assert mean_kept / seq == pytest.approx(cf.fixed_phase_average(seq, length), rel=1e-14)


def test_block_rule_holds_for_random_rows():
    rng = np.random.default_rng(3)
    seq, block = 96, 8
    rows = np.cumsum(rng.random((200, seq)) < rng.random((200, 1)) * 0.3, axis=1)
    rows -= rows[:, :1]
    first, last = rows[:, ::block], rows[:, block - 1 :: block]
    computed = cf.computed_blocks_of(first, last)
    for row, blocks in zip(rows, computed):
        assert blocks * block * block == dense_blocks(dense_mask(row), block)[1]


@pytest.mark.parametrize("seq", [128, 1024, 8192])
def test_causal_blocks(seq):
    assert cf.causal_blocks(seq, 128) == cf.aligned_document_blocks(seq, 128)
    if seq <= 1024:
        assert cf.causal_blocks(seq, 128) == dense_blocks(dense_mask(np.zeros(seq, int)), 128)


@pytest.mark.parametrize(
    ("seq", "w", "block"),
    [(64, 1, 8), (64, 2, 8), (64, 9, 8), (64, 10, 8), (96, 33, 16), (64, 64, 16)],
)
@pytest.mark.parametrize("causal", [True, False])
def test_window_blocks_count_every_point(seq, w, block, causal):
    keep = dense_mask(np.zeros(seq, dtype=np.int64), window=w, causal=causal)
    assert cf.window_blocks(seq, w, block, causal) == dense_blocks(keep, block)


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: cf.causal(0),
        lambda: cf.full(-1),
        lambda: cf.causal(2.5),
        lambda: cf.causal(True),
        lambda: cf.window(8, 9),
        lambda: cf.window(8, 0),
        lambda: cf.fixed_tiled(0),
        lambda: cf.fixed_phase_average(0, 8),
        lambda: cf.fixed_phase_average(8, 0),
        lambda: cf.size_biased(0, 1),
        lambda: cf.size_biased(8, -1),
        lambda: cf.edge_corrected(8, float("nan"), 1),
        lambda: cf.edge_corrected(8, 8, 11),
        lambda: cf.aligned_document_blocks(0),
        lambda: cf.fixed_phase_blocks(100, 8, 128),
        lambda: cf.window_blocks(256, 300),
        lambda: cf.causal_blocks(256, 0),
    ],
)
def test_bad_input_is_a_tensorcad_error(call):
    with pytest.raises(TensorcadError):
        call()


@pytest.mark.parametrize("mean,spread", [(7, 2.0), (2, 3.0), (1.5, 10.0)])
def test_edge_corrected_counts_whole_tokens_at_tiny_means(mean, spread):
    # Brute force over the whole-token law itself: lengths max(1, round(X)), X ~ gamma, i.i.d.
    rng = np.random.default_rng(7)
    shape, scale = 1 / spread**2, mean * spread**2
    lengths = np.maximum(np.floor(rng.gamma(shape, scale, 2_000_000) + 0.5), 1).astype(np.int64)
    seq = 64
    ends = np.cumsum(lengths)
    starts = rng.integers(0, ends[-1] - seq, 200_000)
    # keys of the query at offset t: 1 + min(age, t), age counted back to its document's start
    t = np.arange(seq)
    doc = np.searchsorted(ends, starts[:, None] + t, side="right")
    age = starts[:, None] + t - np.concatenate(([0], ends))[doc]
    per_window = (1 + np.minimum(age, t)).mean(axis=1)
    # 200,000 windows overlap in a stream of 5-15 million tokens: the error from batch means
    # over 50 stretches of the stream (0.2-0.5% of the figure: the stream's own documents
    # dominate at these spreads), held at three of them; the gaps are -0.4 to +0.8 of them
    batches = np.array_split(per_window[np.argsort(starts)], 50)
    stderr = float(np.std([b.mean() for b in batches], ddof=1)) / 50**0.5
    assert abs(cf.edge_corrected(seq, mean, spread) - per_window.mean()) <= 3 * stderr


# --- every S-th key of the document (the sampler's reference) ---------------------------------


@pytest.mark.parametrize(("seq", "length", "stride"), [(8192, 1024, 2), (1000, 333, 3), (512, 64, 7),
                                                       (64, 1000, 5), (300, 40, 64)])
def test_strided_fixed_lengths_enumerate_every_phase(seq, length, stride):
    # Both sides are sums of a few thousand floats of modest size: 1e-12 is rounding.
    assert cf.strided(seq, length, 0.0, stride) == pytest.approx(
        float(dense_phase_keys(seq, length, stride)), rel=1e-12)


@pytest.mark.parametrize("spread", [0.5, 2.0])
def test_strided_stride_one_is_edge_corrected(spread):
    assert cf.strided(4096, 256, spread, 1) == cf.edge_corrected(4096, 256, spread)


def test_strided_agrees_with_a_brute_force_stream():
    # A piece of n tokens keeps sum_{i < n} (floor(i / S) + 1) = n + S q(q - 1)/2 + r q, with n = qS + r.
    seq, mean, spread, stride, rows = 4096, 256, 1.0, 3, 100_000
    piece, _, _ = stream_pieces(seq, mean, spread, documents=1_000_000, rows=rows, seed=5)
    q, r = piece // stride, piece % stride
    measured = float((piece + stride * q * (q - 1) // 2 + r * q).sum()) / (rows * seq)
    # Over 12 seeds this stream's figure spread by 0.19% (one sigma) about the form
    # (mean gap -0.07%): 0.6% is three sigma.
    assert measured == pytest.approx(cf.strided(seq, mean, spread, stride), rel=0.006)


def test_strided_refuses_a_stride_of_zero():
    with pytest.raises(TensorcadError, match="stride"):
        cf.strided(128, 16, 1.0, 0)
