"""The interval interpreter: decide an expression over whole boxes at once.

A box is a range of rows, heads, queries and keys (inclusive, one per array
element, so thousands of 128×128 blocks are decided in one call). Numbers
become ranges ``(lo, hi)`` of float64 arrays (±inf when unbounded); booleans
become a ``Verdict``: whether some point of the box can make it true, and
whether some point can make it false. Everything is SOUND — every point's
value lies in its range, and ``never``/``always`` are never wrong — and exact
for the masks the analysis counts: causal, windows, and equality of
documents read over a range of positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .nodes import Binary, Call, Compare, Const, Expr, Param, Read, Unary, Var, kind_of
from .numpy_eval import relative_bucket

Range = tuple[np.ndarray, np.ndarray]
_UNBOUNDED: Range = (np.asarray(-np.inf), np.asarray(np.inf))
# Beyond 2**52 float64 no longer holds every integer: results there get widened.
_EXACT = 2.0**52


@dataclass(frozen=True)
class Verdict:
    """What a boolean can be over a box: ``can_true``/``can_false`` per element."""

    can_true: np.ndarray
    can_false: np.ndarray

    @property
    def never(self) -> np.ndarray:
        return ~self.can_true

    @property
    def always(self) -> np.ndarray:
        return ~self.can_false

    @property
    def maybe(self) -> np.ndarray:
        return self.can_true & self.can_false


@dataclass(frozen=True)
class Box:
    """Inclusive ranges of ``b h q kv`` and of each tensor read over them.

    ``reads[(port, "q")]`` is the range of ``port(b, q)`` over the box's
    queries (``read_range`` computes it). ``score`` and ``tables`` bound the
    score and each table's values; absent means unbounded.
    """

    b: Range
    h: Range
    q: Range
    kv: Range
    reads: Mapping[tuple[str, str], Range] = field(default_factory=dict)
    score: Range | None = None
    tables: Mapping[str, Range] = field(default_factory=dict)


def read_range(tensor_rows: np.ndarray, b, lo, hi, monotone: bool) -> Range:
    """The range of ``tensor_rows[b, lo..hi]`` (inclusive), vectorised.

    ``monotone`` rows (document ids never fall along a row) give their first
    and last value: O(1) per box. Otherwise a sparse table of minima and
    maxima over power-of-two spans answers each box from two overlapping
    spans: O(B·T·log T) to build, O(1) per box.
    """
    rows = np.asarray(tensor_rows)
    b, lo, hi = (np.asarray(x, dtype=np.int64) for x in (b, lo, hi))
    if monotone:
        return rows[b, lo].astype(np.float64), rows[b, hi].astype(np.float64)
    mins, maxs = [rows], [rows]
    span = 1
    while 2 * span <= rows.shape[1]:
        # Level k holds the min/max of the 2**k positions starting at each index.
        mins.append(np.minimum(mins[-1][:, :-span], mins[-1][:, span:]))
        maxs.append(np.maximum(maxs[-1][:, :-span], maxs[-1][:, span:]))
        span *= 2
    length = hi - lo + 1
    level = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    level = np.minimum(level, len(mins) - 1)
    out_lo = np.empty(np.broadcast(b, lo, hi).shape, dtype=np.float64)
    out_hi = np.empty_like(out_lo)
    b, lo, hi, level = np.broadcast_arrays(b, lo, hi, level)
    for k in np.unique(level):  # one pass per level (at most log T), not per box
        sel = level == k
        start, end = lo[sel], hi[sel] - (1 << int(k)) + 1
        rb = b[sel]
        out_lo[sel] = np.minimum(mins[k][rb, start], mins[k][rb, end])
        out_hi[sel] = np.maximum(maxs[k][rb, start], maxs[k][rb, end])
    return out_lo, out_hi


def interval(expr: Expr, box: Box) -> Verdict | Range:
    """A ``Verdict`` for a boolean expression, a ``(lo, hi)`` range for a number."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _interval(expr, box)


def _const(value) -> Verdict | Range:
    if isinstance(value, (bool, np.bool_)):
        return Verdict(np.asarray(bool(value)), np.asarray(not value))
    v = np.asarray(float(value))
    return v, v


def _interval(expr: Expr, box: Box) -> Verdict | Range:
    if isinstance(expr, (Const, Param)):
        return _const(expr.value)
    if isinstance(expr, Var):
        if expr.name == "score":
            return box.score if box.score is not None else _UNBOUNDED
        lo, hi = getattr(box, expr.name)
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if isinstance(expr, Read):
        if expr.table:
            found = box.tables.get(expr.port)
        else:
            found = box.reads.get((expr.port, expr.index[1].name))  # type: ignore[union-attr]
        if found is None:
            return _UNBOUNDED
        return np.asarray(found[0], dtype=np.float64), np.asarray(found[1], dtype=np.float64)
    if isinstance(expr, Unary):
        inner = _interval(expr.operand, box)
        if expr.op == "~":
            return Verdict(inner.can_false, inner.can_true)  # type: ignore[union-attr]
        return -inner[1], -inner[0]  # type: ignore[index]
    if isinstance(expr, Binary):
        left, right = _interval(expr.left, box), _interval(expr.right, box)
        if expr.op == "&":
            return Verdict(left.can_true & right.can_true, left.can_false | right.can_false)
        if expr.op == "|":
            return Verdict(left.can_true | right.can_true, left.can_false & right.can_false)
        return _ARITHMETIC[expr.op](left, right, kind_of(expr) == "int")
    if isinstance(expr, Compare):
        return _compare(expr.op, _interval(expr.left, box), _interval(expr.right, box))
    if isinstance(expr, Call):
        return _call(expr, box)
    raise TypeError(f"not an expression node: {expr!r}")


# -- arithmetic ------------------------------------------------------------


def _add(a: Range, b: Range, _: bool) -> Range:
    return a[0] + b[0], a[1] + b[1]


def _sub(a: Range, b: Range, _: bool) -> Range:
    return a[0] - b[1], a[1] - b[0]


def _products(a: Range, b: Range) -> np.ndarray:
    corners = np.stack(np.broadcast_arrays(a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]))
    # 0 × ∞ is nan: an unbounded end is a large finite number, so the product is 0.
    return np.where(np.isnan(corners), 0.0, corners)


def _widen(lo: np.ndarray, hi: np.ndarray) -> Range:
    """One ulp outward where float64 may have rounded an integer result."""
    big_lo, big_hi = np.abs(lo) >= _EXACT, np.abs(hi) >= _EXACT
    return (np.where(big_lo, np.nextafter(lo, -np.inf), lo),
            np.where(big_hi, np.nextafter(hi, np.inf), hi))


def _mul(a: Range, b: Range, _: bool) -> Range:
    corners = _products(a, b)
    return _widen(corners.min(axis=0), corners.max(axis=0))


def _floordiv(a: Range, b: Range, is_int: bool) -> Range:
    # x // d is floor(x / d); for a divisor range clear of 0, x / d is
    # monotone in each argument, so its extremes sit at the corners.
    with np.errstate(divide="ignore", invalid="ignore"):
        corners = np.stack(np.broadcast_arrays(a[0] / b[0], a[0] / b[1], a[1] / b[0],
                                               a[1] / b[1]))
    corners = np.where(np.isnan(corners), 0.0, corners)
    lo, hi = np.floor(corners.min(axis=0)), np.floor(corners.max(axis=0))
    # float division may round x / d across an integer: widen unless exact.
    exact = is_int & (np.maximum(np.abs(a[0]), np.abs(a[1])) * np.maximum(np.abs(b[0]),
                      np.abs(b[1])) < _EXACT)
    lo, hi = np.where(exact, lo, lo - 1), np.where(exact, hi, hi + 1)
    spans_zero = (b[0] <= 0) & (b[1] >= 0)
    return np.where(spans_zero, -np.inf, lo), np.where(spans_zero, np.inf, hi)


def _mod(a: Range, b: Range, is_int: bool) -> Range:
    # With a positive divisor m the result lies in [0, m) (Python's sign rule);
    # when x's range stays inside one period of a constant m it is exact.
    d_lo, d_hi = np.broadcast_arrays(b[0], b[1])
    top = d_hi - 1 if is_int else d_hi
    bottom = d_lo + 1 if is_int else d_lo
    lo = np.where(d_lo > 0, 0.0, np.where(d_hi < 0, bottom, -np.inf))
    hi = np.where(d_lo > 0, top, np.where(d_hi < 0, 0.0, np.inf))
    single = (d_lo == d_hi) & (d_lo > 0) & np.isfinite(a[0]) & np.isfinite(a[1])
    m = np.where(single, d_lo, 1.0)
    same_period = single & (np.floor(a[0] / m) == np.floor(a[1] / m))
    exact = same_period & (is_int & (np.maximum(np.abs(a[0]), np.abs(a[1])) * m < _EXACT))
    lo = np.where(exact, a[0] - np.floor(a[0] / m) * m, lo)
    hi = np.where(exact, a[1] - np.floor(a[1] / m) * m, hi)
    return lo, hi


_ARITHMETIC = {"+": _add, "-": _sub, "*": _mul, "//": _floordiv, "%": _mod}


# -- comparisons -----------------------------------------------------------


def _compare(op: str, a, b) -> Verdict:
    if isinstance(a, Verdict):  # == / != between booleans
        same = Verdict((a.can_true & b.can_true) | (a.can_false & b.can_false),
                       (a.can_true & b.can_false) | (a.can_false & b.can_true))
        return same if op == "==" else Verdict(same.can_false, same.can_true)
    (a_lo, a_hi), (b_lo, b_hi) = a, b
    if op in ("==", "!="):
        overlap = (a_lo <= b_hi) & (b_lo <= a_hi)
        one_value = (a_lo == a_hi) & (b_lo == b_hi) & (a_lo == b_lo)
        equal = Verdict(overlap, ~one_value)
        return equal if op == "==" else Verdict(equal.can_false, equal.can_true)
    if op in (">", ">="):  # a > b is b < a
        (a_lo, a_hi), (b_lo, b_hi) = (b_lo, b_hi), (a_lo, a_hi)
        op = "<" if op == ">" else "<="
    if op == "<":
        return Verdict(a_lo < b_hi, a_hi >= b_lo)
    return Verdict(a_lo <= b_hi, a_hi > b_lo)


# -- functions -------------------------------------------------------------


def _call(expr: Call, box: Box) -> Verdict | Range:
    if expr.fn == "where":
        cond = _interval(expr.args[0], box)
        a, b = _interval(expr.args[1], box), _interval(expr.args[2], box)
        take_a, take_b = cond.can_true, cond.can_false  # type: ignore[union-attr]
        if isinstance(a, Verdict):
            return Verdict((take_a & a.can_true) | (take_b & b.can_true),
                           (take_a & a.can_false) | (take_b & b.can_false))
        lo = np.minimum(np.where(take_a, a[0], np.inf), np.where(take_b, b[0], np.inf))
        hi = np.maximum(np.where(take_a, a[1], -np.inf), np.where(take_b, b[1], -np.inf))
        return lo, hi
    args = [_interval(a, box) for a in expr.args]
    if expr.fn == "bucket":
        (lo, hi), n, d = args[0], int(expr.args[1].value), int(expr.args[2].value)  # type: ignore[union-attr]
        # The bucket never rises as kv - q rises: the high end gives the low bucket.
        return (relative_bucket(hi, n, d).astype(np.float64),
                relative_bucket(lo, n, d).astype(np.float64))
    if expr.fn == "tanh":
        lo, hi = args[0]
        return np.tanh(lo), np.tanh(hi)
    if expr.fn == "abs":
        lo, hi = args[0]
        return (np.where(lo >= 0, lo, np.where(hi <= 0, -hi, 0.0)),
                np.maximum(np.abs(lo), np.abs(hi)))
    (a_lo, a_hi), (b_lo, b_hi) = args
    if expr.fn == "min":
        return np.minimum(a_lo, b_lo), np.minimum(a_hi, b_hi)
    return np.maximum(a_lo, b_lo), np.maximum(a_hi, b_hi)
