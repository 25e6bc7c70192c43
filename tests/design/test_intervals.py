"""The interval interpreter against every point of every small box, exactly.

test_expr_properties.py checks soundness on random expressions: a point never lies
outside its range. A looser range is sound too, so a flipped comparison (``<`` for
``<=``) or a dropped corner passes there. Here every box of ``q`` and ``kv`` inside
[-5, 5] (1,936 boxes at once) is decided, and for expressions whose operands are
independent the interval must be the exact hull of the points, and a verdict must say
"can be true" exactly when some point is true. The points come from the numpy
interpreter, a separate implementation.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorcad.design.expr import Box, Env, Scope, Verdict, evaluate, interval, parse
from tensorcad.design.expr.nodes import Const

LOW, HIGH = -5, 5
VALUES = np.arange(LOW, HIGH + 1)
SPANS = np.array([(lo, hi) for lo in VALUES for hi in VALUES if lo <= hi])  # 66 ranges
# every (q range, kv range) pair
Q_SPAN, KV_SPAN = (np.array(s) for s in zip(*itertools.product(range(len(SPANS)), repeat=2)))


def boxes() -> Box:
    zero = (np.zeros(len(Q_SPAN)), np.zeros(len(Q_SPAN)))
    return Box(b=zero, h=zero, q=(SPANS[Q_SPAN, 0].astype(float), SPANS[Q_SPAN, 1].astype(float)),
               kv=(SPANS[KV_SPAN, 0].astype(float), SPANS[KV_SPAN, 1].astype(float)))


def points(text: str, kind: str) -> np.ndarray:
    """The expression at every (q, kv) of the grid, (11, 11), from the numpy interpreter."""
    q, kv = np.meshgrid(VALUES, VALUES, indexing="ij")
    return np.asarray(evaluate(parse(text, Scope(kind)), Env(b=0, h=0, q=q, kv=kv)))


def inside(q_span, kv_span) -> np.ndarray:
    """(boxes, 11, 11): which grid points each box holds."""
    in_q = (VALUES[None, :] >= q_span[:, :1]) & (VALUES[None, :] <= q_span[:, 1:])
    in_kv = (VALUES[None, :] >= kv_span[:, :1]) & (VALUES[None, :] <= kv_span[:, 1:])
    return in_q[:, :, None] & in_kv[:, None, :]


HELD = inside(SPANS[Q_SPAN], SPANS[KV_SPAN])

COMPARISONS = [f"q {op} kv" for op in ("<", "<=", ">", ">=", "==", "!=")] + [
    "q < 2", "2 <= kv", "q > -1", "kv >= 3", "q == 0", "kv != -2", "q - 1 < kv + 1",
    "(q >= 0) & (kv < 2)", "(q >= 0) | (kv < 2)", "~(q < kv)", "(q < 1) == (kv < 1)",
    "(q < 1) != (kv > 0)", "where(q > 0, kv < 2, kv > 3)", "where(q < -1, kv == 0, q > 3)",
]


@pytest.mark.parametrize("text", COMPARISONS)
def test_verdicts_are_exact_on_every_box(text):
    got = interval(parse(text, Scope("mask")), boxes())
    assert isinstance(got, Verdict)
    values = points(text, "mask").astype(bool)
    some_true = (HELD & values[None]).any(axis=(1, 2))
    some_false = (HELD & ~values[None]).any(axis=(1, 2))
    assert np.array_equal(np.broadcast_to(got.can_true, some_true.shape), some_true)
    assert np.array_equal(np.broadcast_to(got.can_false, some_false.shape), some_false)
    assert np.array_equal(got.maybe, some_true & some_false)


EXACT_RANGES = ["q + kv", "q - kv", "q * kv", "0 - q", "-kv", "min(q, kv)", "max(q, kv)", "abs(q)",
                "abs(kv - 2)", "q // 3", "kv // 2", "q % 3", "kv % 4", "q // -2", "q * 3 - kv", "tanh(q)",
                "tanh(kv - 2)"]
# Sound but not tight by design: a negative constant divisor gives (m, 0]; a `where` whose
# condition can go either way gives the union of both branches' whole ranges.
SOUND_RANGES = ["q % -3", "where(q > 0, q, 7)", "where(kv < q, q - kv, kv * 2)"]


def hull(text: str, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = points(text, "score").astype(float)
    lo = np.where(held, values[None], np.inf).min(axis=(1, 2))
    hi = np.where(held, values[None], -np.inf).max(axis=(1, 2))
    return lo, hi


@pytest.mark.parametrize("text", EXACT_RANGES)
def test_ranges_are_the_exact_hull_of_every_box(text):
    lo, hi = interval(parse(text, Scope("score")), boxes())
    want_lo, want_hi = hull(text, HELD)
    assert np.array_equal(np.broadcast_to(lo, want_lo.shape), want_lo)
    assert np.array_equal(np.broadcast_to(hi, want_hi.shape), want_hi)


@pytest.mark.parametrize("text", SOUND_RANGES)
def test_loose_ranges_still_hold_every_point(text):
    lo, hi = interval(parse(text, Scope("score")), boxes())
    want_lo, want_hi = hull(text, HELD)
    assert np.all(lo <= want_lo) and np.all(hi >= want_hi)
    assert np.any(lo < want_lo) or np.any(hi > want_hi)  # loose somewhere, as the comment says


def test_division_by_a_range_is_exact_clear_of_zero_and_unbounded_across_it():
    lo, hi = interval(parse("q // kv", Scope("score")), boxes())
    kv_lo, kv_hi = SPANS[KV_SPAN, 0], SPANS[KV_SPAN, 1]
    across = (kv_lo <= 0) & (kv_hi >= 0)
    assert np.all(lo[across] == -np.inf) and np.all(hi[across] == np.inf)
    held = HELD & (VALUES != 0)[None, None, :]
    want_lo, want_hi = hull("q // max(kv, 1)", held)  # kv is never 0 where it matters
    clear = ~across & (kv_lo > 0)
    assert np.array_equal(lo[clear], want_lo[clear]) and np.array_equal(hi[clear], want_hi[clear])
    negative = ~across & (kv_hi < 0)
    want_lo, want_hi = hull("q // min(kv, -1)", held)
    assert np.array_equal(lo[negative], want_lo[negative])
    assert np.array_equal(hi[negative], want_hi[negative])


def test_mod_by_a_range_stays_inside_the_divisors_sign():
    lo, hi = interval(parse("q % kv", Scope("score")), boxes())
    kv_lo, kv_hi = SPANS[KV_SPAN, 0], SPANS[KV_SPAN, 1]
    want_lo, want_hi = hull("q % where(kv == 0, 1, kv)", HELD & (VALUES != 0)[None, None, :])
    positive, negative = (kv_lo > 0) & (kv_lo < kv_hi), (kv_hi < 0) & (kv_lo < kv_hi)
    # sound everywhere the divisor keeps its sign, and bounded by it: [0, max - 1] or [min + 1, 0]
    assert np.all(lo[positive] <= want_lo[positive]) and np.all(hi[positive] >= want_hi[positive])
    assert np.all(lo[positive] == 0) and np.all(hi[positive] == kv_hi[positive] - 1)
    assert np.all(lo[negative] == kv_lo[negative] + 1) and np.all(hi[negative] == 0)
    across = (kv_lo <= 0) & (kv_hi >= 0)
    assert np.all(lo[across] == -np.inf) and np.all(hi[across] == np.inf)
    # one divisor and q inside one of its periods: exact
    single = (kv_lo == kv_hi) & (kv_lo != 0)
    assert np.all(lo[single] <= want_lo[single]) and np.all(hi[single] >= want_hi[single])
    one_period = single & (kv_lo > 0) & (SPANS[Q_SPAN, 0] // np.maximum(kv_lo, 1)
                                          == SPANS[Q_SPAN, 1] // np.maximum(kv_lo, 1))
    assert np.array_equal(lo[one_period], want_lo[one_period])
    assert np.array_equal(hi[one_period], want_hi[one_period])


def test_products_past_float64s_integers_are_widened_outward():
    # (2**30 + 1)(2**30 + 3) = 2**60 + 2**32 + 3 rounds down in float64: the range must still hold it
    q, kv = 2**30 + 1, 2**30 + 3
    box = Box(b=(0.0, 0.0), h=(0.0, 0.0), q=(np.float64(q), np.float64(q)),
              kv=(np.float64(kv), np.float64(kv)))
    lo, hi = interval(parse("q * kv", Scope("score")), box)
    assert float(lo) < q * kv < float(hi)  # Python compares the int and the floats exactly
    lo, hi = interval(parse("q * kv", Scope("score")), Box(b=(0.0, 0.0), h=(0.0, 0.0),
                                                        q=(3.0, 3.0), kv=(5.0, 5.0)))
    assert (float(lo), float(hi)) == (15.0, 15.0)  # below 2**52 nothing is widened


def test_unbounded_ends_times_zero_are_zero_not_nan():
    box = Box(b=(0.0, 0.0), h=(0.0, 0.0), q=(0.0, 0.0), kv=(0.0, 0.0))
    lo, hi = interval(parse("q * score", Scope("score")), box)  # score unbounded: 0 × ±inf
    assert (float(lo), float(hi)) == (0.0, 0.0)


def test_where_takes_one_branch_when_its_condition_is_decided():
    lo, hi = interval(parse("where(q > 0, q, 7)", Scope("score")), boxes())
    q_lo, q_hi = SPANS[Q_SPAN, 0], SPANS[Q_SPAN, 1]
    always, never = q_lo > 0, q_hi <= 0
    assert np.array_equal(lo[always], q_lo[always]) and np.array_equal(hi[always], q_hi[always])
    assert np.all(lo[never] == 7) and np.all(hi[never] == 7)


def box(**ranges) -> Box:
    spans = {"b": (0.0, 0.0), "h": (0.0, 0.0), "q": (0.0, 0.0), "kv": (0.0, 0.0), **ranges}
    return Box(**{k: (np.float64(v[0]), np.float64(v[1])) if k in "b h q kv".split() else v
                  for k, v in spans.items()})


def span(text: str, **ranges) -> tuple[float, float]:
    lo, hi = interval(parse(text, Scope("score", tensors={"doc"}, tables={"bias": 2})), box(**ranges))
    return float(lo), float(hi)


def test_constants_scores_reads_and_tables_take_their_ranges():
    true, false = interval(Const(True), box()), interval(Const(False), box())
    assert (bool(true.can_true), bool(true.can_false)) == (True, False)
    assert (bool(false.can_true), bool(false.can_false)) == (False, True)
    assert span("score + 1", score=(np.float64(1.0), np.float64(2.5))) == (2.0, 3.5)
    assert span("score") == (-np.inf, np.inf)  # no score range given: unbounded
    reads = {("doc", "q"): (np.int64(3), np.int64(5)), ("doc", "kv"): (np.int64(-2), np.int64(0))}
    assert span("doc(b, q) * 10 + doc(b, kv)", reads=reads) == (28.0, 50.0)
    assert span("doc(b, q)") == (-np.inf, np.inf)  # a read the box does not hold: unbounded
    assert span("bias(h, h) * 2", tables={"bias": (np.float64(-1.5), np.float64(0.25))}) == (-3.0, 0.5)
    assert span("bias(h, h)") == (-np.inf, np.inf)
    lo, hi = interval(parse("doc(b, q) + 0", Scope("score", tensors={"doc"})), box(reads=reads))
    assert lo.dtype == hi.dtype == np.float64


def test_float_division_and_mod_widen_where_integers_would_be_exact():
    # float operands: x // d may round across an integer, so one either side
    assert span("score // 2", score=(np.float64(3.0), np.float64(7.0))) == (0.0, 4.0)
    # float mod by a positive constant: [0, m], by a negative one: [m, 0] (not m - 1 / m + 1)
    assert span("score % 3", score=(np.float64(0.5), np.float64(1.5))) == (0.0, 3.0)
    assert span("score % -3", score=(np.float64(0.5), np.float64(1.5))) == (-3.0, 0.0)
    assert span("abs(score)", score=(np.float64(0.5), np.float64(2.0))) == (0.5, 2.0)
    assert span("abs(score)", score=(np.float64(-3.0), np.float64(-0.5))) == (0.5, 3.0)


def test_integers_past_2_to_52_are_widened_and_those_below_are_not():
    big = 2.0**53
    # a // 3 with a beyond float64's integers: floor of the float quotient, then one either side
    lo, hi = span("q // 3", q=(big, big))
    assert lo == np.floor(big / 3) - 1 and hi == np.floor(big / 3) + 1
    lo, hi = span("q // 3", q=(-big, 0.0))  # the large end is the low one
    assert lo == np.floor(-big / 3) - 1 and hi == 1.0
    lo, hi = span("q // kv", q=(2.0**30, 2.0**30), kv=(-(2.0**30), -1.0))  # |a| * |d| = 2**60
    assert (lo, hi) == (-(2.0**30) - 1, 0.0)
    # exactly 2**52 is already past: widened; just below is exact
    assert span("q // kv", q=(2.0**26, 2.0**26), kv=(2.0**26, 2.0**26)) == (0.0, 2.0)
    assert span("q // kv", q=(2.0**26 - 1, 2.0**26 - 1), kv=(2.0**26, 2.0**26)) == (0.0, 0.0)
    # mod: inside one period it is exact only while |a| * m stays below 2**52
    assert span("q % 4", q=(2.0**50, 2.0**50)) == (0.0, 3.0)
    assert span("q % 4", q=(2.0**50 - 3, 2.0**50 - 2)) == (1.0, 2.0)
    assert span("q % 3", q=(2.0**52, 2.0**52 + 1)) == (0.0, 2.0)
    # products reaching 2**52 get one ulp outward, at either sign
    for q, kv in ((2.0**26, 2.0**26), (-(2.0**26), 2.0**26)):
        lo, hi = span("q * kv", q=(q, q), kv=(kv, kv))
        assert lo < q * kv < hi
    lo, hi = span("q * kv", q=(-(2**30 + 1), -(2**30 + 1)), kv=(2**30 + 3, 2**30 + 3))
    assert float(lo) < -(2**30 + 1) * (2**30 + 3) < float(hi)


def test_interval_arithmetic_raises_no_floating_point_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's invalid / overflow / divide-by-zero warnings
        for text in ("q // kv", "q % kv", "score * 0 + q // kv", "score // score", "score * score"):
            interval(parse(text, Scope("score")), boxes())
            interval(parse(text, Scope("score")), box(score=(np.float64(-np.inf), np.float64(np.inf)),
                                                      q=(0.0, 0.0), kv=(0.0, 0.0)))
        # invalid (0 x inf) and overflow, which numpy would warn of
        interval(parse("score * 0", Scope("score")), box(score=(np.float64(-np.inf), np.float64(np.inf))))
        interval(parse("score * score", Scope("score")), box(score=(np.float64(1e200), np.float64(1e200))))


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 9, 16, 17])
def test_read_range_is_every_spans_min_and_max(width):
    # every (lo, hi) span of three rows, against the span's own min and max
    from tensorcad.design.expr import read_range

    rows = np.random.default_rng(width).integers(-20, 20, (3, width))
    spans = [(b, lo, hi) for b in range(3) for lo in range(width) for hi in range(lo, width)]
    b, lo, hi = (np.array(x) for x in zip(*spans))
    got_lo, got_hi = read_range(rows, b, lo, hi, monotone=False)
    assert got_lo.dtype == got_hi.dtype == np.float64
    assert got_lo.tolist() == [rows[r, a:z + 1].min() for r, a, z in spans]
    assert got_hi.tolist() == [rows[r, a:z + 1].max() for r, a, z in spans]
    ordered = np.sort(rows, axis=1)  # monotone rows: the ends are the range
    m_lo, m_hi = read_range(ordered, b, lo, hi, monotone=True)
    assert m_lo.tolist() == ordered[b, lo].tolist() and m_hi.tolist() == ordered[b, hi].tolist()
    assert m_lo.dtype == np.float64


def test_an_unbounded_quotient_stays_a_number_and_a_stranger_is_refused():
    # inf / inf is nan at one corner: the range must still be numbers, not nan
    lo, hi = span("score // score", score=(np.float64(1.0), np.float64(np.inf)))
    assert lo == lo and hi == hi and lo <= 0 and hi == np.inf
    with pytest.raises(TypeError, match="not an expression node: 'q'"):
        interval("q", box())


def test_read_range_broadcasts_rows_starts_and_ends_against_each_other():
    from tensorcad.design.expr import read_range

    rows = np.random.default_rng(0).integers(-9, 9, (2, 5))
    b, lo, hi = np.arange(2).reshape(2, 1, 1), np.arange(3).reshape(1, 3, 1), np.array([3, 4]).reshape(1, 1, 2)
    got_lo, got_hi = read_range(rows, b, lo, hi, monotone=False)
    assert got_lo.shape == got_hi.shape == (2, 3, 2)
    for r, a, z in np.ndindex(2, 3, 2):
        assert got_lo[r, a, z] == rows[r, a : hi[0, 0, z] + 1].min()
        assert got_hi[r, a, z] == rows[r, a : hi[0, 0, z] + 1].max()
