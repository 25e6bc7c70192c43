"""The sampler's parts held to what they must compute: point evaluation, bands, control variates.

``keys_per_query`` samples queries and, for each, decides bands of keys coarse to fine with
the interval interpreter, drawing keys where the budget runs out (``_kept_by_bands``);
points are evaluated with the rows' reads looked up first (``_evaluate_at``). Both are held,
query by query, to the numpy interpreter reading the (rows, seq) tensors directly, on masks
the ranges do not decide: an or, the row and head index, reads at the query and at the key,
every kind of node. The control variates that take the noise out (plain and weighted by
real tokens) are held to the regression estimator on keys linear in the control.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.analysis.attention import (
    _control_variate,
    _evaluate_at,
    _kept_by_bands,
    _weighted_control_variate,
    keys_per_query,
)
from tensorcad.analysis import rows as engine_rows
from tensorcad.analysis.rows import Rows
from tensorcad.design.expr import Env, evaluate
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing

from helpers import attention  # tests/analysis, on sys.path

ROLES = {"doc": "documents", "pos": "positions"}
SEQ = 100


def packed_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three rows of ragged documents, ids from 0 and positions restarting at each."""
    rng = np.random.default_rng(seed)
    starts = rng.random((3, SEQ)) < 0.06
    starts[:, 0] = True
    documents = np.cumsum(starts, axis=1) - 1
    index = np.arange(SEQ)
    positions = index - np.maximum.accumulate(np.where(starts, index, 0), axis=1)
    return documents.astype(np.int64), positions.astype(np.int64)


def every_key(att, documents, positions, row, head, q) -> np.ndarray:
    """Keys each query keeps, every key evaluated by the numpy interpreter on the tensors."""
    kv = np.arange(SEQ)[None, :]
    tensors = {"doc": documents, "pos": positions}
    kept = evaluate(att.keep, Env(b=row[:, None], h=head[:, None], q=q[:, None], kv=kv,
                                  tensors=tensors))
    return np.broadcast_to(kept, (len(q), SEQ)).sum(axis=1).astype(np.float64)


POINT_MASKS = [
    # a read at the query and one at the key, the row, a call, a minus and a modulus:
    # undecidable at a point by intervals, so evaluated
    "(doc(b, q) == doc(b, kv)) & (abs(-pos(b, kv) + 2 * pos(b, q) + b) % 3 != 1)",
    "(pos(b, q) - pos(b, kv) + h) % 4 < 2",
    "(doc(b, kv) >= doc(b, q) - 1) & ((b + kv) % 2 == 0)",
]


@pytest.mark.parametrize("mask", POINT_MASKS)
def test_points_are_evaluated_as_the_numpy_interpreter_reads_the_rows(mask):
    att = attention(mask, causal=False, roles=ROLES)
    documents, positions = packed_rows(seed=1)
    rng = np.random.default_rng(2)
    r, h = rng.integers(0, 3, 5000), rng.integers(0, att.heads, 5000)
    q, kv = rng.integers(0, SEQ, 5000), rng.integers(0, SEQ, 5000)
    role_of = {"doc": "documents", "pos": "positions"}
    mine = _evaluate_at(att.keep, role_of, Rows.from_arrays(documents, positions), r, h, q, kv)
    theirs = evaluate(att.keep, Env(b=r, h=h, q=q, kv=kv,
                                    tensors={"doc": documents, "pos": positions}))
    assert mine.dtype == np.float64
    assert np.array_equal(mine, np.asarray(theirs, dtype=np.float64))
    assert 0 < mine.mean() < 1  # both answers occur


BAND_MASKS = [
    ("(b % 2 == 0) | (q - kv < 20)", True),
    ("(b % 2 == 0) | (abs(q - kv) < 20)", False),
    ("(doc(b, q) == doc(b, kv)) & (pos(b, kv) >= 3)", True),
    ("((doc(b, q) == doc(b, kv)) & (kv <= q + 3)) | (kv < 2)", False),
    ("(pos(b, q) < 10) | (q - kv < 7)", True),
    ("(h == 1) | (q - kv < 5)", True),  # the head read bare
]


@pytest.mark.parametrize("mask,causal", BAND_MASKS)
def test_bands_add_up_to_every_key_each_query_keeps(mask, causal):
    # Within its budget the descent decides every band or evaluates its one key, so each
    # query's count is exact, not an estimate: every query of every row and head, forward
    # bands too when the mask is not causal
    att = attention(mask, causal=causal, roles=ROLES, heads=2)
    documents, positions = packed_rows(seed=3)
    row, head, q = (a.ravel() for a in np.meshgrid(np.arange(3), np.arange(2), np.arange(SEQ),
                                                   indexing="ij"))
    role_of = {port: ROLES[port] for port in ROLES if port in mask}
    kept, evaluated = _kept_by_bands(att.keep, role_of, Rows.from_arrays(documents, positions),
                                     row, head, q, SEQ, causal, np.random.default_rng(0))
    assert np.array_equal(kept, every_key(att, documents, positions, row, head, q))
    assert 0 < evaluated < len(q) * SEQ  # fewer evaluations than keys: bands were decided whole


def test_the_weighted_control_variate_is_the_regression_estimator():
    # Padded rows weigh each query by its row's real tokens. With keys exactly linear in the
    # control C = position + 1 (K = 2C + 5), the regression slope is 2 and the estimate is
    # exactly 2 E[C] + 5, E[C] the rows' exact causal mean, whatever the queries drawn
    rows = engine_rows.packed_rows(512, Packing(100, 1.0, strategy="pad"), 0, 64)
    rng = np.random.default_rng(1)
    query_row = rng.integers(0, rows.count, 4000)
    query_t = np.minimum(rng.integers(0, 512, 4000), rows.real[query_row] - 1)
    weight = rows.real[query_row] / rows.real.mean()
    control = rows.at("positions", query_row, query_t) + 1.0
    mean, stderr = _weighted_control_variate(2 * control + 5, rows, query_row, query_t, weight)
    assert mean == pytest.approx(2 * rows.causal_keys + 5, rel=1e-12)
    # the residual weight (K - 2C) = 5 weight: its spread is the weights' own
    assert stderr == pytest.approx(float(np.std(5 * weight, ddof=1)) / 4000**0.5, rel=1e-9)
    # keys that do not move with C are their weighted mean; no slope to take out
    kept = rng.random(4000)
    at_start = np.zeros(4000, dtype=np.int64)
    flat, _ = _weighted_control_variate(kept, rows, query_row, at_start, weight)
    assert flat == pytest.approx(float((weight * kept).sum() / weight.sum()), rel=1e-12)
    # one query has no spread to report; two at one position (nothing to regress on) have
    one = _weighted_control_variate(kept[:1], rows, query_row[:1], query_t[:1], weight[:1])
    assert one[1] == 0.0
    two = _weighted_control_variate(kept[:2], rows, query_row[:2], at_start[:2], np.ones(2))
    assert two[1] == pytest.approx(abs(kept[0] - kept[1]) / 2, rel=1e-12)


def band_queries():
    return (a.ravel() for a in np.meshgrid(np.arange(3), np.arange(2), np.arange(SEQ), indexing="ij"))


@pytest.mark.parametrize("mask", [
    "(q - kv) % 3 != 1",
    # the same within documents, past their first key, shifted by row: a key drawn outside
    # its band would cross into the previous document or past the first key
    "((q - kv + b) % 3 != 1) & (doc(b, q) == doc(b, kv)) & (pos(b, kv) >= 1)",
])
def test_keys_drawn_past_the_budget_are_unbiased(mask):
    # A modulus is undecided on every band wider than one key: the descent runs out of
    # budget and draws one key in each band left. Over 40 seeds the mean kept per query is
    # the exact count within three of the seeds' own standard error
    att = attention(mask, heads=2, roles=ROLES)
    documents, positions = packed_rows(seed=3)
    row, head, q = band_queries()
    rows = Rows.from_arrays(documents, positions)
    role_of = {port: ROLES[port] for port in ROLES if f"{port}(" in mask}
    if "doc(" in mask:  # the queries the other way round: the last one needs no draw
        row, head, q = row[::-1].copy(), head[::-1].copy(), q[::-1].copy()
    exact = every_key(att, documents, positions, row, head, q).mean()
    means = np.array([_kept_by_bands(att.keep, role_of, rows, row, head, q, SEQ, True,
                                     np.random.default_rng(seed))[0].mean() for seed in range(40)])
    assert means.std() > 0  # keys were drawn
    assert abs(means.mean() - exact) <= 3 * means.std(ddof=1) / len(means) ** 0.5


def test_the_evaluations_reported_are_the_evaluations_made(monkeypatch):
    # KeysEstimate.samples: every box the interpreter decided plus every key evaluated
    import tensorcad.analysis.attention as sampler

    made = []
    interval, evaluate_at = sampler.interval, sampler._evaluate_at
    monkeypatch.setattr(sampler, "interval", lambda keep, box: made.append(np.size(box.q[0]))
                        or interval(keep, box))
    monkeypatch.setattr(sampler, "_evaluate_at", lambda *args: made.append(np.size(args[-1]))
                        or evaluate_at(*args))
    documents, positions = packed_rows(seed=3)
    row, head, q = band_queries()
    rows = Rows.from_arrays(documents, positions)
    for mask in ("(q - kv) % 3 != 1", "(b % 2 == 0) | (q - kv < 20)"):
        made.clear()
        att = attention(mask, heads=2)
        _, evaluated = _kept_by_bands(att.keep, {}, rows, row, head, q, SEQ, True,
                                      np.random.default_rng(0))
        assert evaluated == sum(made) > 0


def test_the_control_variate_over_given_rows_takes_their_own_exact_mean():
    # Rows handed in (no stream behind them): E[C] is the rows' own mean of position + 1,
    # counted here token by token. Keys linear in C give exactly 2 E[C] + 5
    documents, positions = packed_rows(seed=4)
    rows = Rows.from_arrays(documents, positions)
    assert rows.causal_keys is None
    expected = float((positions + 1).mean())
    rng = np.random.default_rng(2)
    query_row, query_t = rng.integers(0, 3, 500), rng.integers(0, SEQ, 500)
    control = positions[query_row, query_t] + 1.0
    mean, stderr = _control_variate(2 * control + 5, rows, query_row, query_t)
    assert mean == pytest.approx(2 * expected + 5, rel=1e-12) and stderr == pytest.approx(0, abs=1e-9)
    noise = rng.random(500)
    mean, stderr = _control_variate(2 * control + noise, rows, query_row, query_t)
    residual = 2 * control + noise - float(np.polyfit(control, 2 * control + noise, 1)[0]) * control
    assert stderr == pytest.approx(residual.std(ddof=1) / 500**0.5, rel=1e-9)
    flat, _ = _control_variate(noise, rows, query_row, np.zeros(500, dtype=np.int64))
    assert flat == pytest.approx(noise.mean(), rel=1e-12)
    assert _control_variate(noise[:1], rows, query_row[:1], query_t[:1])[1] == 0.0


def test_keys_per_query_takes_seed_0_and_sequences_up_to_the_largest():
    from tensorcad.packing import MAX_SEQ

    att = attention("(b % 2 == 0) | (q - kv < 20)")
    assert keys_per_query(att, 256, None) == keys_per_query(att, 256, None, seed=0)
    assert keys_per_query(attention(), MAX_SEQ).mean == (MAX_SEQ + 1) / 2
    with pytest.raises(TensorcadError) as error:
        keys_per_query(att, MAX_SEQ + 1)
    assert (error.value.path, error.value.message) == (
        "seq", f"expected an integer in [1, {MAX_SEQ}], got {MAX_SEQ + 1}")


@pytest.mark.parametrize("weighted", [False, True])
def test_two_queries_are_enough_for_a_slope_and_a_spread(weighted):
    # positions 0 and 1: the control's spread is 1/2, small but enough to regress on
    # (K = 2C + 5 gives 2 E[C] + 5 exactly); at one position there is no slope, and the
    # standard error is that of the two keys
    if weighted:
        rows = engine_rows.packed_rows(512, Packing(100, 1.0, strategy="pad"), 0, 64)
        estimate = lambda kept, t: _weighted_control_variate(  # noqa: E731
            kept, rows, np.zeros(2, dtype=np.int64), t, np.ones(2))
        expected = rows.causal_keys
    else:
        documents, positions = packed_rows(seed=4)
        rows = Rows.from_arrays(documents, positions)
        estimate = lambda kept, t: _control_variate(kept, rows, np.zeros(2, dtype=np.int64), t)  # noqa: E731
        expected = float((positions + 1).mean())
    t = np.array([0, 1])
    assert rows.at("positions", np.zeros(2, dtype=np.int64), t).tolist() == [0, 1]
    mean, _ = estimate(2 * (t + 1.0) + 5, t)
    assert mean == pytest.approx(2 * expected + 5, rel=1e-12)
    kept = np.array([3.0, 8.0])
    assert estimate(kept, np.zeros(2, dtype=np.int64))[1] == pytest.approx(2.5, rel=1e-12)
