"""The numpy interpreter: evaluate an expression at many points at once.

Indices are integer arrays broadcastable together; the result has their
broadcast shape. Integer arithmetic follows Python (``//`` and ``%`` floor,
``%`` takes the divisor's sign), as torch's ``//`` and ``%`` do on tensors.
Integers are int64: values beyond ±2**63 wrap, as they would in torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tensorcad.errors import TensorcadError

from .nodes import Binary, Call, Compare, Const, Expr, Param, Read, Unary, Var


@dataclass(frozen=True)
class Env:
    """The points to evaluate at, and the tensors and tables the ports hold.

    ``tensors[port]`` is a (B, T) integer array read at ``[b, q]``/``[b, kv]``;
    ``tables[port]`` is a learned table indexed by the read's index values.
    """

    b: np.ndarray | int
    h: np.ndarray | int
    q: np.ndarray | int
    kv: np.ndarray | int
    score: np.ndarray | float | None = None
    tensors: Mapping[str, np.ndarray] = field(default_factory=dict)
    tables: Mapping[str, np.ndarray] = field(default_factory=dict)


def relative_bucket(relative_position, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's unidirectional relative-position bucket, in numpy.

    Mirrors HF ``T5Attention._relative_position_bucket(bidirectional=False)``
    step by step, including its float32 logarithm, so that numpy and the
    generated torch agree at every bucket boundary. Non-increasing in
    ``relative_position`` (= kv - q): the interval interpreter relies on it.
    Accepts float input (interval bounds, possibly infinite).
    """
    x = np.asarray(relative_position)
    # Positions further back than 2**31 all land in the last bucket anyway.
    n = np.clip(-np.clip(x, None, 0), 0, 2**31).astype(np.int64)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    ratio = np.maximum(n, 1).astype(np.float32) / np.float32(max_exact)
    scale = np.float32(math.log(max_distance / max_exact))
    with np.errstate(divide="ignore", invalid="ignore"):
        large = max_exact + (np.log(ratio) / scale * np.float32(num_buckets - max_exact)).astype(
            np.int64)
    large = np.minimum(large, num_buckets - 1)
    return np.where(is_small, n, large)


def evaluate(expr: Expr, env: Env) -> np.ndarray:
    """The value of ``expr`` at every point of ``env`` (broadcast)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(_eval(expr, env))


def _eval(expr: Expr, env: Env) -> np.ndarray:
    if isinstance(expr, Const):
        return np.asarray(expr.value)
    if isinstance(expr, Param):
        return np.asarray(expr.value)
    if isinstance(expr, Var):
        value = getattr(env, expr.name)
        if value is None:
            raise TensorcadError("", f"the expression reads {expr.name!r}, which the "
                                     "evaluation environment does not provide")
        return np.asarray(value)
    if isinstance(expr, Read):
        return _read(expr, env)
    if isinstance(expr, Unary):
        value = _eval(expr.operand, env)
        return np.negative(value) if expr.op == "-" else np.logical_not(value)
    if isinstance(expr, Binary):
        return _BINARY[expr.op](_eval(expr.left, env), _eval(expr.right, env))
    if isinstance(expr, Compare):
        return _COMPARE[expr.op](_eval(expr.left, env), _eval(expr.right, env))
    if isinstance(expr, Call):
        args = [_eval(a, env) for a in expr.args]
        if expr.fn == "bucket":
            return relative_bucket(args[0], int(args[1]), int(args[2]))
        if expr.fn == "where":
            return np.where(args[0], args[1], args[2])
        return _FUNCTIONS[expr.fn](*args)
    raise TypeError(f"not an expression node: {expr!r}")


def _read(expr: Read, env: Env) -> np.ndarray:
    source = env.tables if expr.table else env.tensors
    if expr.port not in source:
        what = "table" if expr.table else "tensor"
        raise TensorcadError("", f"the expression reads {what} {expr.port!r}, which the "
                                 "evaluation environment does not provide")
    array = np.asarray(source[expr.port])
    index = tuple(np.asarray(_eval(i, env)).astype(np.int64) for i in expr.index)
    if len(index) != array.ndim:
        raise TensorcadError("", f"{expr.port!r} has {array.ndim} dimension(s), read with "
                                 f"{len(index)} index(es)")
    for axis, (i, size) in enumerate(zip(index, array.shape)):
        # Validate rather than wrap: torch would fail (or read garbage) here too.
        if i.size and (i.min() < 0 or i.max() >= size):
            raise TensorcadError("", f"index {axis} into {expr.port!r} reaches "
                                     f"[{i.min()}, {i.max()}], outside [0, {size - 1}]")
    return array[index]


_BINARY = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "//": np.floor_divide,
    "%": np.mod,  # Python's sign convention, like torch.remainder
    "&": np.logical_and,
    "|": np.logical_or,
}
_COMPARE = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}
_FUNCTIONS = {"tanh": np.tanh, "abs": np.abs, "min": np.minimum, "max": np.maximum}
