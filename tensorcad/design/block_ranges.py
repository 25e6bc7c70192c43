"""Masks whose 128 x 128 blocks the ranges decide exactly, in the terms generated code builds from.

The interval interpreter (``expr.intervals``) decides a block of queries and keys
from the ranges they span: the range of ``q - kv``, and of each tensor read over
the block's positions. That verdict is always sound; for the masks below it is
also exact, so a block mask built from ranges alone equals ``create_block_mask``'s
(``tests/codegen/test_block_mask_from_ranges.py`` holds it there):

- ``doc(b, q) == doc(b, kv)`` over a documents input, and
- bounds on the distance ``d = q - kv`` by numbers that depend on the head at most:
  causal ``q >= kv`` (d >= 0), a window ``q - kv < w`` or ``abs(q - kv) < w``,
  per-head windows ``q - kv < where(h < 4, 64, 1024)``,

ANDed, when the distances kept include 0 (every query may keep itself).

Why exact. Each part alone is: the distances over a block are every integer from
``q_lo - kv_hi`` to ``q_hi - kv_lo``, and document ids never fall along a row, so
an id between a block's first and last is in the block. Together: two blocks
share a document only if it runs from one to the other, so their nearest pair of
positions (the kept distance closest to 0) is in that document; on the diagonal
every query and itself is. The distances kept form an interval holding 0, so if
any pair of the shared document is kept, the nearest one is. A block is kept
whole exactly when every part keeps it whole.

Anything else (positions, ``b``, ``|``, a bound that leaves out 0) is decided
point by point by ``create_block_mask`` in the generated module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .expr.nodes import Binary, Call, Compare, Const, Expr, Param, Read, Unary, Var, reads, variables
from .expr.numpy_eval import Env, evaluate
from .masks import conjuncts, is_same_document
from .model import Attention

Bound = int | None  # None: unbounded


@dataclass(frozen=True)
class BlockRanges:
    """What a block decision from ranges needs: ``-ahead <= q - kv <= behind``, per head.

    ``behind``/``ahead`` hold one entry when every head keeps the same distances,
    else one a head. ``documents`` is the port read as ``doc(b, q) == doc(b, kv)``.
    """

    documents: str | None
    behind: tuple[Bound, ...]
    ahead: tuple[Bound, ...]


def _per_head(expr: Expr, heads: int) -> np.ndarray | None:
    """The value of a number that reads at most ``h``, for every head; None otherwise."""
    if reads(expr) or variables(expr) - {"h"}:
        return None
    if isinstance(expr, (Const, Param)) and isinstance(expr.value, bool):
        return None
    value = evaluate(expr, Env(b=0, h=np.arange(heads), q=0, kv=0))
    value = np.broadcast_to(np.asarray(value, dtype=np.float64), (heads,))
    return value if np.isfinite(value).all() else None


def _linear(expr: Expr, heads: int) -> tuple[int, int, np.ndarray] | None:
    """``expr`` as ``a * q + c * kv + rest(h)``: (a, c, rest per head), or None."""
    constant = _per_head(expr, heads)
    if constant is not None:
        return 0, 0, constant
    if isinstance(expr, Var) and expr.name in ("q", "kv"):
        return (1, 0, np.zeros(heads)) if expr.name == "q" else (0, 1, np.zeros(heads))
    if isinstance(expr, Unary) and expr.op == "-":
        inner = _linear(expr.operand, heads)
        return None if inner is None else (-inner[0], -inner[1], -inner[2])
    if isinstance(expr, Binary) and expr.op in ("+", "-"):
        left, right = _linear(expr.left, heads), _linear(expr.right, heads)
        if left is None or right is None:
            return None
        sign = 1 if expr.op == "+" else -1
        return left[0] + sign * right[0], left[1] + sign * right[1], left[2] + sign * right[2]
    return None


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _distance_bounds(part: Expr, heads: int) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """(upper, lower) bounds on ``q - kv`` that a comparison keeps, per head; None if it is not one."""
    if not (isinstance(part, Compare) and part.op in _FLIP):
        return None
    op, left, right = part.op, part.left, part.right
    if isinstance(right, Call) and right.fn == "abs":  # w > abs(d) is abs(d) < w
        op, left, right = _FLIP[op], right, left
    if isinstance(left, Call) and left.fn == "abs":
        inner, limit = _linear(left.args[0], heads), _per_head(right, heads)
        if inner is None or limit is None or op not in ("<", "<=") or abs(inner[0]) != 1 \
                or inner[1] != -inner[0] or inner[2].any():
            return None
        upper = np.ceil(limit) - 1 if op == "<" else np.floor(limit)
        return upper, -upper
    lhs, rhs = _linear(left, heads), _linear(right, heads)
    if lhs is None or rhs is None:
        return None
    a, c, rest = lhs[0] - rhs[0], lhs[1] - rhs[1], lhs[2] - rhs[2]
    if abs(a) != 1 or c != -a:
        return None
    if a == -1:  # -(q - kv) + rest op 0 is (q - kv) - rest flipped op 0
        op, rest = _FLIP[op], -rest
    limit = -rest  # q - kv op limit
    if op == "<":
        return np.ceil(limit) - 1, None
    if op == "<=":
        return np.floor(limit), None
    if op == ">":
        return None, np.floor(limit) + 1
    return None, np.ceil(limit)


def _bounds(values: np.ndarray | None) -> tuple[Bound, ...]:
    if values is None:
        return (None,)
    ints = tuple(int(v) for v in values)
    return ints[:1] if len(set(ints)) == 1 else ints


def block_ranges(attention: Attention) -> BlockRanges | None:
    """How the ranges decide ``attention``'s blocks exactly; None when they do not."""
    if attention.keep is None:
        return None
    roles = {port: wire.role for port, wire in attention.tensors.items()}
    return ranges_of(attention.keep, roles, attention.heads)


def ranges_of(keep: Expr, roles: dict[str, str | None], heads: int) -> BlockRanges | None:
    """``block_ranges`` of a kept set whose tensor ports have these roles, over ``heads`` heads."""
    documents = None
    upper = lower = None
    for part in conjuncts(keep):
        if isinstance(part, Const) and part.value is True:
            continue
        port = part.left.port if is_same_document(part, roles) else None
        if port is not None and documents in (None, port):
            documents = port
            continue
        found = _distance_bounds(part, heads)
        if found is None:
            return None
        hi, lo = found
        if hi is not None:
            upper = hi if upper is None else np.minimum(upper, hi)
        if lo is not None:
            lower = lo if lower is None else np.maximum(lower, lo)
    # Exact only while the query itself is kept (the module docstring says why).
    if (upper is not None and (upper < 0).any()) or (lower is not None and (lower > 0).any()):
        return None
    if upper is not None and not all(math.isfinite(v) for v in upper):
        return None
    return BlockRanges(documents, _bounds(upper), _bounds(None if lower is None else -lower))
