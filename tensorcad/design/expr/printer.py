"""Two printers of the AST: canonical text and torch source.

``to_text`` is the test oracle (numexpr's practice): it prints Python syntax
that parses back to the same expression, with only the brackets Python's
precedence needs. ``to_torch`` prints the body of FlexAttention's
``mask_mod(b, h, q_idx, kv_idx)`` / ``score_mod(score, b, h, q_idx, kv_idx)``.
It never prints text from the design: identifiers come from the caller's
``names`` (already sanitised) and everything else is an operator, a torch
function or a number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .nodes import (
    BUCKET_DEFAULTS,
    Binary,
    Call,
    Compare,
    Const,
    Expr,
    Param,
    Read,
    Unary,
    Var,
    children,
)
from .numpy_eval import Env, evaluate

# Python's precedence, loosest first (the language reference's table); the
# printers bracket a child only when Python would otherwise re-associate it.
_LEVEL = {"|": 5, "&": 7, "+": 9, "-": 9, "*": 10, "//": 10, "%": 10}
_COMPARE_LEVEL = 4
_UNARY_LEVEL = 11
_ATOM_LEVEL = 13

# The helper every generated module that buckets defines; codegen pastes it
# verbatim (it needs ``import math`` and ``import torch``). Only torch ops and
# no Python branching on tensor values, so it runs under vmap and compile.
RELATIVE_BUCKET_SOURCE = '''\
def _relative_bucket(relative_position, num_buckets: int, max_distance: int):
    """T5's unidirectional relative-position bucket (HF T5Attention.
    _relative_position_bucket, bidirectional=False): keys ahead of the query
    share bucket 0; keys up to num_buckets // 2 back get a bucket each; further
    back, buckets grow logarithmically out to max_distance, then saturate."""
    n = torch.clamp(-relative_position, min=0)  # distance back from the query
    max_exact = num_buckets // 2
    is_small = n < max_exact
    ratio = torch.clamp(n, min=1).float() / max_exact  # clamp: no log(0), same result
    large = max_exact + (
        torch.log(ratio)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(n.dtype)
    large = torch.clamp(large, max=num_buckets - 1)
    return torch.where(is_small, n, large)
'''


# -- canonical text --------------------------------------------------------


def to_text(expr: Expr) -> str:
    """Canonical Python-syntax text; ``parse(to_text(e), scope) == e``."""
    return _text(expr)[0]


def _literal(value: bool | int | float) -> tuple[str, int]:
    if isinstance(value, (bool, np.bool_)):
        return ("True" if value else "False"), _ATOM_LEVEL
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            return f"float({str(value)!r})", _ATOM_LEVEL
        text = repr(value)
    else:
        text = str(int(value))
    return text, (_UNARY_LEVEL if text.startswith("-") else _ATOM_LEVEL)


def _wrap(child: tuple[str, int], need: int) -> str:
    text, level = child
    return f"({text})" if level < need else text


def _text(expr: Expr) -> tuple[str, int]:
    if isinstance(expr, Const):
        return _literal(expr.value)
    if isinstance(expr, (Var, Param)):
        return expr.name, _ATOM_LEVEL
    if isinstance(expr, Read):
        return f"{expr.port}({', '.join(_text(i)[0] for i in expr.index)})", _ATOM_LEVEL
    if isinstance(expr, Call):
        args = expr.args
        if expr.fn == "bucket" and tuple(a.value for a in args[1:]) == BUCKET_DEFAULTS:
            args = args[:1]
        return f"{expr.fn}({', '.join(_text(a)[0] for a in args)})", _ATOM_LEVEL
    if isinstance(expr, Unary):
        return expr.op + _wrap(_text(expr.operand), _UNARY_LEVEL), _UNARY_LEVEL
    if isinstance(expr, Binary):
        level = _LEVEL[expr.op]
        left = _wrap(_text(expr.left), level)
        right = _wrap(_text(expr.right), level + 1)  # left-associative
        return f"{left} {expr.op} {right}", level
    if isinstance(expr, Compare):
        # Bracket both sides: Python would chain ``a < b < c``.
        left = _wrap(_text(expr.left), _COMPARE_LEVEL + 1)
        right = _wrap(_text(expr.right), _COMPARE_LEVEL + 1)
        return f"{left} {expr.op} {right}", _COMPARE_LEVEL
    raise TypeError(f"not an expression node: {expr!r}")


# -- torch source ----------------------------------------------------------

_TORCH_FUNCTIONS = {"abs": "torch.abs", "tanh": "torch.tanh", "min": "torch.minimum",
                    "max": "torch.maximum"}
_NO_VALUE = object()


def to_torch(expr: Expr, names: Mapping[str, str]) -> str:
    """A torch expression for a FlexAttention ``mask_mod``/``score_mod`` body.

    ``names`` maps ``b h q kv score`` and each port to the identifier to print.
    Sub-expressions whose value depends on no index are folded to literals, so
    every function is applied to tensors; a constant mask prints as a
    comparison of the query index (``(q_idx >= 0)`` is always true).
    """
    printer = _TorchPrinter(names)
    value = printer.static(expr)
    if value is _NO_VALUE:
        return printer.print(expr)[0]
    q = names["q"]
    if isinstance(value, (bool, np.bool_)):
        return f"({q} >= 0)" if value else f"({q} < 0)"
    literal = _literal(value)[0]
    if "score" in names:
        return f"torch.full_like({names['score']}, {literal})"
    return f"({q} * 0 + {literal})"


class _TorchPrinter:
    """One pass printing tensor expressions, with constant values memoised."""

    def __init__(self, names: Mapping[str, str]):
        self.names = names
        self.memo: dict[int, object] = {}

    def static(self, expr: Expr) -> object:
        """The value of ``expr`` if no index can change it, else ``_NO_VALUE``."""
        key = id(expr)
        if key not in self.memo:
            self.memo[key] = self._static(expr)
        return self.memo[key]

    def _static(self, expr: Expr) -> object:
        if isinstance(expr, (Const, Param)):
            return expr.value
        if isinstance(expr, (Var, Read)):
            return _NO_VALUE
        if isinstance(expr, Call) and expr.fn == "where":
            cond = self.static(expr.args[0])
            if cond is not _NO_VALUE:
                return self.static(expr.args[1] if cond else expr.args[2])
        values = [self.static(child) for child in children(expr)]
        if any(v is _NO_VALUE for v in values):
            return _NO_VALUE
        folded = _with_children(expr, tuple(Const(_python(v)) for v in values))
        return _python(evaluate(folded, Env(0, 0, 0, 0)).item())

    def print(self, expr: Expr) -> tuple[str, int]:
        value = self.static(expr)
        if value is not _NO_VALUE:
            return _literal(value)
        names = self.names
        if isinstance(expr, Var):
            return names[expr.name], _ATOM_LEVEL
        if isinstance(expr, Read):
            if expr.table:
                index = ", ".join(self.print(i)[0] for i in expr.index)
            else:
                # Flat indexing: chained t[b][q] crashes compiled CPU flex.
                index = ", ".join(names[i.name] for i in expr.index)  # type: ignore[union-attr]
            return f"{names[expr.port]}[{index}]", _ATOM_LEVEL
        if isinstance(expr, Unary):
            return expr.op + _wrap(self.print(expr.operand), _UNARY_LEVEL), _UNARY_LEVEL
        if isinstance(expr, Binary):
            level = _LEVEL[expr.op]
            left = _wrap(self.print(expr.left), level)
            right = _wrap(self.print(expr.right), level + 1)
            return f"{left} {expr.op} {right}", level
        if isinstance(expr, Compare):
            left = _wrap(self.print(expr.left), _COMPARE_LEVEL + 1)
            right = _wrap(self.print(expr.right), _COMPARE_LEVEL + 1)
            return f"{left} {expr.op} {right}", _COMPARE_LEVEL
        if isinstance(expr, Call):
            return self.call(expr), _ATOM_LEVEL
        raise TypeError(f"not an expression node: {expr!r}")

    def call(self, expr: Call) -> str:
        if expr.fn == "where":
            cond = self.static(expr.args[0])
            if cond is not _NO_VALUE:
                return "(" + self.print(expr.args[1] if cond else expr.args[2])[0] + ")"
            args = ", ".join(self.print(a)[0] for a in expr.args)
            return f"torch.where({args})"
        if expr.fn == "bucket":
            x = self.print(expr.args[0])[0]
            return f"_relative_bucket({x}, {expr.args[1].value}, {expr.args[2].value})"  # type: ignore[union-attr]
        if expr.fn in ("min", "max"):
            left, right = expr.args
            if self.static(left) is not _NO_VALUE:
                left, right = right, left
            if self.static(right) is not _NO_VALUE:
                # torch.minimum/maximum take tensors only; clamp takes a number.
                bound = "max" if expr.fn == "min" else "min"
                return f"torch.clamp({self.print(left)[0]}, {bound}={self.print(right)[0]})"
            return f"{_TORCH_FUNCTIONS[expr.fn]}({self.print(left)[0]}, {self.print(right)[0]})"
        return f"{_TORCH_FUNCTIONS[expr.fn]}({self.print(expr.args[0])[0]})"


def _python(value: object) -> bool | int | float:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return float(value)  # type: ignore[arg-type]


def _with_children(expr: Expr, new: tuple[Expr, ...]) -> Expr:
    if isinstance(expr, Read):
        return Read(expr.port, new, expr.table)
    if isinstance(expr, Call):
        return Call(expr.fn, new)
    if isinstance(expr, Unary):
        return Unary(expr.op, new[0])
    if isinstance(expr, (Binary, Compare)):
        return type(expr)(expr.op, new[0], new[1])
    return expr
