"""The gamma lengths evaluated where they change are the lengths of every stratum evaluated, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_profiles import scaled
from scipy.special import gammaincinv

from tensorcad.packing import document_lengths
from tensorcad.packing.whole_quantiles import whole_quantiles


def every_stratum(mean: float, spread: float, count: int, seed: int = 0) -> np.ndarray:
    """The lengths as drawn before whole_quantiles: the quantile at every stratum, rounded, shuffled."""
    strata = (np.arange(count, dtype=np.float64) + 0.5) / count
    whole = np.maximum(np.floor(gammaincinv(1.0 / spread**2, strata) * (mean * spread**2) + 0.5), 1)
    whole = whole.astype(np.int64)
    np.random.default_rng(seed).shuffle(whole)
    return whole


@pytest.mark.parametrize("spread", [1e-4, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0])
@pytest.mark.parametrize("mean", [0.2, 1, 3, 64, 128, 1000.5, 8192, 2**24])
@pytest.mark.parametrize("count", [1, 2, 8193, 32_000, 131_072])
def test_the_same_lengths_as_every_stratum_evaluated(mean, spread, count):
    assert np.array_equal(document_lengths(mean, spread, count, seed=7), every_stratum(mean, spread, count, seed=7))


@settings(max_examples=scaled(60), deadline=None)
@given(mean=st.floats(0.5, 2e4), spread=st.floats(1e-3, 4.0), count=st.integers(8000, 300_000))
def test_the_same_lengths_anywhere_between(mean, spread, count):
    assert np.array_equal(document_lengths(mean, spread, count), every_stratum(mean, spread, count))


def test_a_staircase_is_evaluated_at_a_fraction_of_its_strata():
    asked = []

    def quantile(p):
        asked.append(len(p))
        return gammaincinv(4.0, p) * 16.0  # mean 64, spread 0.5: the chart's shortest documents

    strata = (np.arange(131_072) + 0.5) / 131_072
    whole = whole_quantiles(quantile, strata)
    assert np.array_equal(whole, np.maximum(np.floor(gammaincinv(4.0, strata) * 16.0 + 0.5), 1))
    assert sum(asked) < 131_072 / 10


def test_lengths_too_many_to_refine_are_evaluated_at_every_stratum():
    asked = []

    def quantile(p):
        asked.append(len(p))
        return p * 1e6  # a million distinct lengths over 10,000 strata

    strata = (np.arange(10_000) + 0.5) / 10_000
    assert np.array_equal(whole_quantiles(quantile, strata), np.maximum(np.floor(strata * 1e6 + 0.5), 1))
    assert asked == [2, 10_000]  # the range (a million) is past a quarter of the strata


def test_a_nan_gap_is_evaluated_stratum_by_stratum():
    def quantile(p):
        out = np.floor(p * 10)
        out[(p > 0.3) & (p < 0.6)] = np.nan
        return out

    strata = (np.arange(20_000) + 0.5) / 20_000
    expected = np.maximum(np.floor(quantile(strata) + 0.5), 1)
    assert np.array_equal(whole_quantiles(quantile, strata), expected, equal_nan=True)


def test_refining_is_left_to_where_neighbouring_strata_rise_past_the_solvers_error():
    from tensorcad.packing.settings import rises_past_its_error

    assert rises_past_its_error(0.5, 131_072) and rises_past_its_error(1e-4, 1_000_000)
    assert not rises_past_its_error(1e-4, 2_000_000) and not rises_past_its_error(0.01, 2**31)
    asked = []

    def quantile(p):
        asked.append(len(p))
        return np.floor(p * 10)

    strata = (np.arange(20_000) + 0.5) / 20_000
    assert np.array_equal(whole_quantiles(quantile, strata, refine=False), whole_quantiles(quantile, strata))
    assert asked[0] == 20_000 and sum(asked[1:]) < 20_000 / 4
