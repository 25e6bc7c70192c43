"""The closed forms on small cases counted by hand or by enumeration, held exactly.

tests/packing/test_closed_form.py holds the headline figures against brute force; this file
pins what mutation testing (tools/mutate.py closed_form) showed it left loose: the
empirical-length forms, the types the exact counts come back as, and the path and
figures every bad value is named by. Exact figures are compared exactly, or at rel
1e-12 where a float sum of many terms sits between the two sides.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tensorcad.packing import closed_form as cf
from tensorcad.packing.corpus.histogram import Lengths
from tensorcad.errors import TensorcadError

EXACT = 1e-12  # float sums of at most a few thousand terms: well under this


def table(lengths: dict[int, int]) -> Lengths:
    values = sorted(lengths)
    return Lengths(tuple(values), tuple(lengths[v] for v in values))


def every_document(lengths: dict[int, int]) -> np.ndarray:
    return np.repeat(np.array(sorted(lengths)), [lengths[v] for v in sorted(lengths)])


def stream_at_every_phase(docs: np.ndarray, seq: int) -> float:
    """Keys a query keeps, documents end to end repeated, a row starting at every token.

    The stream is periodic, so every phase of it is one row; a query at row offset t,
    ``age`` tokens into its document, keeps min(age, t) + 1 keys.
    """
    period = int(docs.sum())
    reps = -(-(seq + period) // period) + 1
    stream = np.tile(docs, reps)
    age = np.concatenate([np.arange(n) for n in stream])
    t = np.arange(seq)
    total = sum(int((np.minimum(age[p + t], t) + 1).sum()) for p in range(period))
    return total / (period * seq)


LENGTH_TABLES = [{3: 1}, {1: 2, 5: 1}, {2: 3, 7: 2, 11: 1}, {4: 1, 9: 4, 30: 2}]


@pytest.mark.parametrize("lengths", LENGTH_TABLES)
def test_empirical_size_biased_counts_every_token(lengths):
    docs = every_document(lengths)
    # token i (from 1) of a document keeps i keys
    brute = sum(n * (n + 1) / 2 for n in docs) / docs.sum()
    assert cf.empirical_size_biased(table(lengths)) == pytest.approx(brute, rel=EXACT)


@pytest.mark.parametrize("lengths", LENGTH_TABLES)
def test_empirical_age_survival_counts_every_token(lengths):
    docs = every_document(lengths)
    age = np.concatenate([np.arange(n) for n in docs])  # tokens before each one in its document
    ages = np.arange(0, int(docs.max()) + 3)
    brute = np.array([(age >= a).mean() for a in ages])
    assert cf.empirical_age_survival(table(lengths), ages) == pytest.approx(brute, rel=EXACT, abs=0)
    # between whole ages the form is E[(L - a)+] / E[L] itself, linear in a
    halves = ages[:-1] + 0.5
    linear = np.array([np.maximum(docs - a, 0).sum() for a in halves]) / docs.sum()
    assert cf.empirical_age_survival(table(lengths), halves) == pytest.approx(linear, rel=EXACT, abs=0)


@pytest.mark.parametrize("lengths", LENGTH_TABLES)
@pytest.mark.parametrize("seq", [1, 4, 13, 40])
def test_empirical_edge_corrected_is_the_stream_at_every_phase(lengths, seq):
    brute = stream_at_every_phase(every_document(lengths), seq)
    assert cf.empirical_edge_corrected(seq, table(lengths)) == pytest.approx(brute, rel=EXACT)


def test_boundary_keys_weighted_and_not():
    # pieces 1, 2, 4: keys 1, 1+2, 1+2+3+4 over 7 tokens
    assert cf.boundary_keys(np.array([1, 2, 4])) == pytest.approx(14 / 7, rel=EXACT)
    # weights count each piece that many times
    assert cf.boundary_keys(np.array([1, 4]), np.array([3, 1])) == pytest.approx(13 / 7, rel=EXACT)
    assert type(cf.boundary_keys(np.array([5]))) is float


@pytest.mark.parametrize("lengths", LENGTH_TABLES)
@pytest.mark.parametrize("seq", [1, 3, 8, 100])
def test_truncated_and_split_keys_count_every_piece(lengths, seq):
    docs = every_document(lengths)
    cut = np.minimum(docs, seq)  # truncated: one piece, the first T tokens
    truncated = (cut * (cut + 1) / 2).sum() / cut.sum()
    pieces = np.concatenate([[seq] * (n // seq) + ([n % seq] if n % seq else []) for n in docs])
    split = (pieces * (pieces + 1) / 2).sum() / pieces.sum()
    assert cf.truncated_keys(seq, table(lengths)) == pytest.approx(truncated, rel=EXACT)
    assert cf.split_keys(seq, table(lengths)) == pytest.approx(split, rel=EXACT)
    assert type(cf.split_keys(seq, table(lengths))) is float


# --- gamma lengths: the whole-token law enumerated from its probabilities ---------------------


def whole_token_law(mean: float, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, P(L = n)) of max(1, round(X)), X ~ gamma, from the gamma's CDF (scipy.stats)."""
    shape, scale = 1 / spread**2, mean * spread**2
    top = int(stats.gamma.isf(1e-17, shape, scale=scale)) + 3
    n = np.arange(1, top + 1)
    upper = stats.gamma.cdf(n + 0.5, shape, scale=scale)
    lower = np.where(n == 1, 0.0, stats.gamma.cdf(n - 0.5, shape, scale=scale))
    return n, upper - lower


@pytest.mark.parametrize(("mean", "spread"), [(6.0, 0.5), (3.0, 2.0), (40.0, 1.0), (1.2, 5.0)])
def test_age_survival_is_the_whole_token_law(mean, spread):
    n, p = whole_token_law(mean, spread)
    ages = np.array([0, 1, 2, 3, 5, 8, 20, 60, 10**6])
    # P(age >= a) = E[(L - a)+] / E[L], summed over every length
    brute = np.array([(p * np.maximum(n - a, 0)).sum() for a in ages]) / (p * n).sum()
    # the two sums differ in order and in the CDF's rounding near 1: 1e-9 of figures near 1
    assert cf.age_survival(mean, spread, ages) == pytest.approx(brute, rel=1e-9, abs=1e-15)
    assert cf.age_survival(mean, spread, [0])[0] == 1.0


@pytest.mark.parametrize(("mean", "spread"), [(6.0, 0.5), (3.0, 2.0)])
def test_edge_corrected_is_the_whole_token_law_at_every_offset(mean, spread):
    n, p = whole_token_law(mean, spread)
    seq = 24
    # keys(t) = 1 + sum_{a=1}^{t} P(age >= a); mean over t in [0, T)
    survival = np.array([(p * np.maximum(n - a, 0)).sum() for a in range(seq)]) / (p * n).sum()
    brute = np.mean([1 + survival[1 : t + 1].sum() for t in range(seq)])
    assert cf.edge_corrected(seq, mean, spread) == pytest.approx(brute, rel=1e-9)


@pytest.mark.parametrize("mean", [0.3, 1.0, 4.4, 4.6])
def test_fixed_lengths_round_to_whole_tokens_of_at_least_one(mean):
    length = max(1, int(np.floor(mean + 0.5)))
    ages = np.arange(0, 7)
    assert cf.age_survival(mean, 0.0, ages).tolist() == [max(length - a, 0) / length for a in ages]


@pytest.mark.parametrize(("mean", "spread"), [(1024.0, 0.5), (256.0, 1.0), (3.0, 2.0)])
def test_size_biased_is_the_gammas_second_moment(mean, spread):
    # E[X(X + 1)/2] / E[X] for the continuous gamma, moments from scipy.stats
    law = stats.gamma(1 / spread**2, scale=mean * spread**2)
    expected = (law.moment(2) + law.mean()) / (2 * law.mean())
    assert cf.size_biased(mean, spread) == pytest.approx(expected, rel=EXACT)
    assert cf.size_biased(mean, 0.0) == mean / 2 + 0.5


# --- exact counts come back as integers --------------------------------------------------------


def test_exact_counts_are_integers():
    for value in (*cf.aligned_document_blocks(300, 64), *cf.causal_blocks(256, 64),
                  *cf.window_blocks(256, 70, 64), *cf.window_blocks(256, 70, 64, causal=False)):
        assert type(value) is int, value
    kept, computed = cf.fixed_phase_block_counts(64, 24, 16)
    assert kept.dtype.kind == "i" and computed.dtype.kind == "i"
    # default block is FlexAttention's 128, and the window's default is causal
    assert cf.causal_blocks(256) == cf.causal_blocks(256, 128)
    assert cf.window_blocks(256, 70) == cf.window_blocks(256, 70, 128, True)
    assert cf.window(10, 3) == cf.window(10, 3, True) == (1 + 2 + 3 * 8) / 10
    assert cf.window_blocks(256, 70) != cf.window_blocks(256, 70, 128, False)


def test_phase_blocks_at_a_length_past_the_row():
    # one block, documents longer than the row: every phase is one or two documents
    kept, computed = cf.fixed_phase_block_counts(16, 40, 16)
    assert computed.tolist() == [1] * 40
    heads = np.minimum(40 - np.arange(40), 16)
    assert kept.tolist() == (heads * (heads + 1) // 2 + (16 - heads) * (17 - heads) // 2).tolist()


# --- bad input names its path and its value ---------------------------------------------------


@pytest.mark.parametrize(
    ("call", "path", "shown"),
    [
        (lambda: cf.causal(0), "seq", "0"),
        (lambda: cf.full(-1), "seq", "-1"),
        (lambda: cf.window(0, 1), "seq", "0"),
        (lambda: cf.window(8, 0), "window", "0"),
        (lambda: cf.window(8, 9), "window", "window 9 is longer than the sequence 8"),
        (lambda: cf.fixed_tiled(0), "length", "0"),
        (lambda: cf.fixed_phase_average(0, 8), "seq", "0"),
        (lambda: cf.fixed_phase_average(8, 0), "length", "0"),
        (lambda: cf.size_biased(0, 1), "mean", "0"),
        (lambda: cf.size_biased(8, -1), "spread", "-1"),
        (lambda: cf.age_survival(-2, 1, [1]), "mean", "-2"),
        (lambda: cf.age_survival(8, 99, [1]), "spread", "99"),
        (lambda: cf.edge_corrected(0, 8, 1), "seq", "0"),
        (lambda: cf.aligned_document_blocks(0), "length", "0"),
        (lambda: cf.aligned_document_blocks(8, 0), "block", "0"),
        (lambda: cf.causal_blocks(0), "seq", "0"),
        (lambda: cf.causal_blocks(256, 0), "block", "0"),
        (lambda: cf.causal_blocks(200, 64), "seq", "200 is not a whole number of 64-token blocks"),
        (lambda: cf.window_blocks(0, 1), "seq", "0"),
        (lambda: cf.window_blocks(256, 300), "window", "300"),
        (lambda: cf.fixed_phase_blocks(0, 8, 128), "seq", "0"),
        (lambda: cf.fixed_phase_blocks(128, 0, 128), "length", "0"),
        (lambda: cf.fixed_phase_blocks(100, 8, 128), "seq", "100 is not a whole number of 128"),
        (lambda: cf.empirical_edge_corrected(0, table({3: 1})), "seq", "0"),
        (lambda: cf.truncated_keys(0, table({3: 1})), "seq", "0"),
        (lambda: cf.split_keys(0, table({3: 1})), "seq", "0"),
        (lambda: cf.strided(0, 8, 1.0, 2), "seq", "0"),
        (lambda: cf.strided(64, 8, 1.0, 0), "stride", "0"),
    ],
)
def test_bad_input_names_its_path_and_value(call, path, shown):
    with pytest.raises(TensorcadError) as error:
        call()
    assert error.value.path == path
    assert shown in error.value.message


def test_block_sizes_other_than_the_default_are_used():
    # 256 tokens in 64-token blocks: 4 on and below the diagonal each way, 10 tiles of 64²
    q, kv = np.arange(256)[:, None], np.arange(256)[None, :]
    causal = q >= kv
    assert cf.causal_blocks(256, 64) == (int(causal.sum()), 10 * 64 * 64)
    kept, computed = cf.fixed_phase_block_counts(64, 24, 16)
    assert cf.fixed_phase_block_ratio(64, 24, 16) == pytest.approx(
        computed.mean() * 16 * 16 / kept.mean(), rel=EXACT)


def test_ages_before_a_documents_start_always_survive():
    # P(age >= a) is 1 for every a <= 0: the gamma path clips negative ages to the table's start
    assert cf.age_survival(7.0, 1.0, [-3, -1, 0]).tolist() == [1.0, 1.0, 1.0]
