"""Property tests: the three views of an expression agree with each other.

Random masks and scores over documents (non-decreasing consecutive ids),
restarting positions, heads, queries, keys, params and literals:

- every point of a random box, evaluated by numpy, lies inside the interval
  interpreter's range, and a never/always verdict is never contradicted;
- printing and re-parsing gives the same expression;
- hostile text is refused with a TensorcadError and has no side effect;
- causal, window and document masks are decided exactly on aligned blocks.

Examples: 600 + 700 + 300 + 400 + 150 = 2,150.
"""

from __future__ import annotations

import builtins
import functools
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import scaled  # tests/: the profile's example counts

from tensorcad.design.expr import (
    Box,
    Env,
    Scope,
    Verdict,
    evaluate,
    interval,
    parse,
    read_range,
    to_text,
)
from tensorcad.errors import TensorcadError

ROWS, HEADS, T = 2, 4, 24
PARAMS = {"window": 5, "heads": HEADS, "block": 8}
MASK = Scope("mask", params=PARAMS, tensors={"doc", "pos"})
SCORE = Scope("score", params={**PARAMS, "cap": 7.5}, tensors={"doc", "pos"},
              tables={"bias": 2})
FAST = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                   HealthCheck.data_too_large])

# -- expression text -------------------------------------------------------

INT_LEAVES = ["q", "kv", "h", "b", "window", "heads", "block", "doc(b, q)", "doc(b, kv)",
              "pos(b, q)", "pos(b, kv)"]
ARITH = ["+", "-", "*", "//", "%"]
COMPARE = ["==", "!=", "<", "<=", ">", ">="]


def parse_or_skip(text, scope):
    """Parse a generated text; a divisor that folds to 0 is refused by design, so skip that example."""
    try:
        return parse(text, scope)
    except TensorcadError as error:
        assume("division by zero" not in str(error))
        raise


@functools.cache
def ints(depth: int, score: bool = False) -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(INT_LEAVES), st.integers(-20, 20).map(str))
    if depth == 0:
        return leaves
    sub = ints(depth - 1, score)
    composites = st.one_of(
        st.tuples(sub, st.sampled_from(ARITH), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda a: f"-({a})"),
        sub.map(lambda a: f"abs({a})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(bools(depth - 1, score), sub, sub).map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(sub, st.integers(2, 12)).flatmap(
            lambda t: st.integers(t[1] // 2 + 1, 40).map(lambda d: f"bucket({t[0]}, {t[1]}, {d})")),
    )
    return st.one_of(leaves, composites)


@functools.cache
def bools(depth: int, score: bool = False) -> st.SearchStrategy[str]:
    sub_int = ints(min(depth, 2), score)  # depth-bounded: ints and bools recurse into each other
    comparison = st.tuples(sub_int, st.sampled_from(COMPARE), sub_int).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    chained = st.tuples(sub_int, st.sampled_from(["<", "<=", "=="]), sub_int,
                        st.sampled_from(["<", "<="]), sub_int).map(lambda t: "({} {} {} {} {})".format(*t))
    leaves = st.one_of(comparison, comparison, chained, st.sampled_from(["True", "False"]))
    if depth == 0:
        return leaves
    sub = bools(depth - 1, score)
    composites = st.one_of(
        st.tuples(sub, st.sampled_from(["&", "|", "and", "or", "==", "!="]), sub).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["~", "not "]), sub).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(sub, sub, sub).map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})"),
    )
    return st.one_of(leaves, composites)


@functools.cache
def scores(depth: int) -> st.SearchStrategy[str]:
    leaves = st.one_of(
        st.sampled_from(["score", "cap", "bias(bucket(kv - q), h)", "bias(h, h)"]),
        st.floats(-8, 8, allow_nan=False).map(repr),
        ints(1, score=True),
    )
    if depth == 0:
        return leaves
    sub = scores(depth - 1)
    return st.one_of(
        leaves,
        st.tuples(sub, st.sampled_from(["+", "-", "*"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(sub, st.sampled_from(["//", "%"]), st.sampled_from(["3", "2.5", "cap"])).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda a: f"tanh({a})"),
        sub.map(lambda a: f"abs({a})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(bools(1), sub, sub).map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})"),
    )


MASK_TEXT = bools(4)
SCORE_TEXT = scores(3)

# -- packings and boxes ----------------------------------------------------


@st.composite
def packings(draw) -> tuple[np.ndarray, np.ndarray]:
    """Document ids (consecutive, never falling along a row) and the
    positions within each document (restarting at 0), as a collator makes."""
    docs = np.zeros((ROWS, T), dtype=np.int64)
    first = draw(st.integers(0, 5))
    for r in range(ROWS):
        starts = draw(st.lists(st.booleans(), min_size=T - 1, max_size=T - 1))
        docs[r] = first + np.concatenate([[0], np.cumsum(starts)])
    pos = np.zeros_like(docs)
    for r in range(ROWS):
        for t in range(1, T):
            pos[r, t] = pos[r, t - 1] + 1 if docs[r, t] == docs[r, t - 1] else 0
    return docs, pos


def span(draw, size: int) -> tuple[int, int]:
    lo = draw(st.integers(0, size - 1))
    return lo, draw(st.integers(lo, min(size - 1, lo + 7)))


@st.composite
def boxes(draw, count: int = 3) -> list[dict[str, tuple[int, int]]]:
    out = []
    for _ in range(count):
        b = draw(st.integers(0, ROWS - 1))
        out.append({"b": (b, b), "h": span(draw, HEADS), "q": span(draw, T), "kv": span(draw, T)})
    return out


def make_box(spans: list[dict], docs, pos, score=None, tables=None) -> Box:
    arr = {k: (np.array([s[k][0] for s in spans]), np.array([s[k][1] for s in spans]))
           for k in ("b", "h", "q", "kv")}
    b = arr["b"][0]
    reads = {}
    for name, rows, monotone in (("doc", docs, True), ("pos", pos, False)):
        for axis in ("q", "kv"):
            reads[(name, axis)] = read_range(rows, b, arr[axis][0], arr[axis][1], monotone)
    return Box(arr["b"], arr["h"], arr["q"], arr["kv"], reads, score=score, tables=tables or {})


def grid(s: dict) -> dict[str, np.ndarray]:
    axes = [np.arange(s[k][0], s[k][1] + 1) for k in ("b", "h", "q", "kv")]
    return dict(zip(("b", "h", "q", "kv"), np.meshgrid(*axes, indexing="ij")))


def assert_sound(result, values: np.ndarray, i: int, text: str, n: int = 3) -> None:
    if isinstance(result, Verdict):
        can_true = np.broadcast_to(result.can_true, (n,))[i]
        can_false = np.broadcast_to(result.can_false, (n,))[i]
        assert can_true or not values.any(), f"said never, but true somewhere: {text}"
        assert can_false or values.all(), f"said always, but false somewhere: {text}"
    else:
        lo = np.broadcast_to(result[0], (n,))[i]
        hi = np.broadcast_to(result[1], (n,))[i]
        assert values.dtype != bool
        assert np.all(values >= lo) and np.all(values <= hi), (text, lo, hi, values.min(),
                                                                values.max())


# -- the properties --------------------------------------------------------


@settings(max_examples=scaled(600), **FAST)
@given(text=st.one_of(MASK_TEXT, SCORE_TEXT))
def test_printing_and_reparsing_gives_the_same_expression(text):
    scope = SCORE if "score" in text or "cap" in text or "bias" in text or "." in text else MASK
    try:
        expr = parse_or_skip(text, scope)
    except TensorcadError:
        expr = parse_or_skip(text, SCORE)  # a numeric text built from integer parts only
        scope = SCORE
    printed = to_text(expr)
    assert parse(printed, scope) == expr
    assert to_text(parse(printed, scope)) == printed


@settings(max_examples=scaled(700), **FAST)
@given(text=MASK_TEXT, packing=packings(), spans=boxes())
def test_numpy_points_lie_inside_the_mask_intervals(text, packing, spans):
    docs, pos = packing
    expr = parse_or_skip(text, MASK)
    result = interval(expr, make_box(spans, docs, pos))
    assert isinstance(result, Verdict)
    for i, s in enumerate(spans):
        values = evaluate(expr, Env(**grid(s), tensors={"doc": docs, "pos": pos}))
        assert_sound(result, np.broadcast_to(values, grid(s)["q"].shape), i, text)


@settings(max_examples=scaled(300), **FAST)
@given(text=SCORE_TEXT, packing=packings(), spans=boxes(),
       score_range=st.tuples(st.floats(-50, 50), st.floats(0, 40)),
       seed=st.integers(0, 2**16))
def test_numpy_points_lie_inside_the_score_ranges(text, packing, spans, score_range, seed):
    docs, pos = packing
    expr = parse_or_skip(text, SCORE)
    table = np.random.default_rng(seed).normal(size=(32, 32))
    s_lo, s_hi = score_range[0], score_range[0] + score_range[1]
    box = make_box(spans, docs, pos, score=(np.array(s_lo), np.array(s_hi)),
                   tables={"bias": (np.array(table.min()), np.array(table.max()))})
    result = interval(expr, box)
    for i, s in enumerate(spans):
        for score in (s_lo, (s_lo + s_hi) / 2, s_hi):
            values = evaluate(expr, Env(**grid(s), score=score, tensors={"doc": docs, "pos": pos},
                                        tables={"bias": table}))
            assert_sound(result, np.asarray(values, dtype=np.float64), i, text)


SENTINEL = "tensorcad-expr-hostile-sentinel"
HOSTILE = [
    "q.__class__", "q.__class__.__bases__", "__import__('os')", f"__import__('os').system('touch {SENTINEL}')",
    f"open('{SENTINEL}', 'w')", "eval('1')", "exec('x = 1')", "compile('1', 'f', 'eval')",
    "globals()", "getattr(q, 'real')", "(lambda: q)()", "[q for q in range(3)]",
    "{q: 1 for q in h}", "(q for q in h)", "f'{q}'", "'text'", "b'bytes'", "2 ** 64",
    "1099511627777", "1e999", "(x := q)", "q if h else kv", "doc[0]", "doc.__len__()",
    "__builtins__", "print(q)", "q @ kv", "*q", "...", "None",
    "(" * 10_000 + "q" + ")" * 10_000, "-" * 10_000 + "q", "~" * 10_000 + "(q>kv)",
    "(" * 120 + "q" + ")" * 120, "-" * 150 + "q", "not " * 120 + "q",
]


@settings(max_examples=scaled(400), **FAST)
@given(valid=MASK_TEXT, hostile=st.sampled_from(HOSTILE),
       where=st.sampled_from(["{v} & ({h})", "({h}) > {v}", "where({v}, {h}, q) > 0", "{h}"]))
def test_hostile_text_is_refused_without_side_effects(valid, hostile, where, tmp_path_factory):
    text = where.format(v=valid, h=hostile)
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.getbasetemp())
    trap = mock.Mock(side_effect=AssertionError("eval/exec was called"))
    try:
        with mock.patch.object(builtins, "eval", trap), mock.patch.object(builtins, "exec", trap):
            with pytest.raises(TensorcadError):
                parse(text, MASK, "nodes[0].mask")
        assert not os.path.exists(SENTINEL)
        trap.assert_not_called()
    finally:
        os.chdir(cwd)


@settings(max_examples=scaled(150), **FAST)
@given(packing=packings(), block=st.sampled_from([1, 2, 3, 4, 6, 8]),
       window=st.integers(1, 12))
def test_causal_window_and_document_masks_are_exact_on_aligned_blocks(packing, block, window):
    docs, pos = packing
    scope = Scope("mask", params={"window": window}, tensors={"doc"})
    masks = [
        "q >= kv",
        "(q >= kv) & (q - kv < window)",
        "abs(q - kv) < window",
        "doc(b, q) == doc(b, kv)",
        "(q >= kv) & (doc(b, q) == doc(b, kv))",
        "(q >= kv) & (q - kv < window) & (doc(b, q) == doc(b, kv))",
    ]
    n = -(-T // block)
    b, qi, ki = np.meshgrid(np.arange(ROWS), np.arange(n), np.arange(n), indexing="ij")
    b, qi, ki = b.ravel(), qi.ravel(), ki.ravel()
    q_lo, q_hi = qi * block, np.minimum(qi * block + block - 1, T - 1)
    k_lo, k_hi = ki * block, np.minimum(ki * block + block - 1, T - 1)
    reads = {("doc", "q"): read_range(docs, b, q_lo, q_hi, monotone=True),
             ("doc", "kv"): read_range(docs, b, k_lo, k_hi, monotone=True)}
    box = Box((b, b), (np.zeros_like(b), np.zeros_like(b)), (q_lo, q_hi), (k_lo, k_hi), reads)
    for text in masks:
        expr = parse_or_skip(text, scope)
        verdict = interval(expr, box)
        full = evaluate(expr, Env(b=np.arange(ROWS)[:, None, None], h=0,
                                  q=np.arange(T)[None, :, None], kv=np.arange(T)[None, None, :],
                                  tensors={"doc": docs}))
        full = np.broadcast_to(full, (ROWS, T, T))
        for j in range(len(b)):
            cell = full[b[j], q_lo[j]:q_hi[j] + 1, k_lo[j]:k_hi[j] + 1]
            if block > 1 and q_hi[j] - q_lo[j] != k_hi[j] - k_lo[j]:
                continue  # a ragged last block is not square; soundness is tested above
            assert verdict.can_true[j] == cell.any(), (text, j)
            assert verdict.can_false[j] == (~cell).any(), (text, j)


# -- read_range ------------------------------------------------------------


@settings(max_examples=scaled(100), **FAST)
@given(rows=st.lists(st.lists(st.integers(-50, 50), min_size=T, max_size=T), min_size=2,
                     max_size=2), spans=st.lists(st.tuples(st.integers(0, 1), st.integers(0, T - 1),
                                                          st.integers(0, T - 1)), min_size=1, max_size=20))
def test_read_range_matches_brute_force(rows, spans):
    rows = np.array(rows)
    b = np.array([s[0] for s in spans])
    lo = np.array([min(s[1], s[2]) for s in spans])
    hi = np.array([max(s[1], s[2]) for s in spans])
    got_lo, got_hi = read_range(rows, b, lo, hi, monotone=False)
    for j in range(len(spans)):
        assert got_lo[j] == rows[b[j], lo[j]:hi[j] + 1].min()
        assert got_hi[j] == rows[b[j], lo[j]:hi[j] + 1].max()
    sorted_rows = np.sort(rows, axis=1)
    m_lo, m_hi = read_range(sorted_rows, b, lo, hi, monotone=True)
    assert np.array_equal(m_lo, sorted_rows[b, lo]) and np.array_equal(m_hi, sorted_rows[b, hi])


# -- interval unit checks: tightness of the common cases ---------------------


def _range(text: str, **box) -> tuple[float, float]:
    full = {"b": (0, 0), "h": (0, 0), "q": (0, 0), "kv": (0, 0)}
    full.update(box)
    lo, hi = interval(parse(text, Scope("score")), Box(**{k: (np.array(v[0]), np.array(v[1]))
                                                          for k, v in full.items()}))
    return float(lo), float(hi)


@pytest.mark.parametrize("text, q, expected", [
    ("q // 8", (3, 20), (0, 2)),
    ("q % 8", (9, 14), (1, 6)),          # inside one period: exact
    ("q % 8", (6, 9), (0, 7)),           # wraps: the whole residue range
    ("q % 8", (-3, -1), (5, 7)),         # Python's sign convention
    ("abs(q - 5)", (2, 9), (0, 4)),
    ("abs(q - 5)", (7, 9), (2, 4)),
    ("min(q, 4) + max(q, 6)", (2, 9), (8, 13)),
    ("q * (0 - q)", (-2, 3), (-9, 0)),   # corners give [-9, 6]: sound, not tight
    ("where(q > 4, q, 0 - q)", (2, 9), (-9, 9)),  # a union of both branches
    ("bucket(0 - q)", (0, 200), (0, 31)),
    ("bucket(0 - q)", (0, 15), (0, 15)),
    ("q // (q - 3)", (0, 9), (-np.inf, np.inf)),  # a divisor that can be 0
])
def test_interval_ranges_are_tight_for_common_cases(text, q, expected):
    lo, hi = _range(text, q=q)
    assert lo <= expected[0] and hi >= expected[1]
    if text != "q * (0 - q)":
        assert (lo, hi) == expected


def test_equality_verdicts():
    scope = Scope("mask")
    def verdict(text, q, kv):
        v = interval(parse(text, scope), Box((0, 0), (0, 0), (np.array(q[0]), np.array(q[1])),
                                             (np.array(kv[0]), np.array(kv[1]))))
        return bool(v.never), bool(v.maybe), bool(v.always)
    assert verdict("q == kv", (3, 3), (3, 3)) == (False, False, True)
    assert verdict("q == kv", (0, 3), (4, 9)) == (True, False, False)
    assert verdict("q == kv", (0, 4), (4, 9)) == (False, True, False)
    assert verdict("q != kv", (0, 3), (4, 9)) == (False, False, True)
    assert verdict("not (q >= kv)", (0, 3), (4, 9)) == (False, False, True)
