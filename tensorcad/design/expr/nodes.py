"""The attention-expression AST: a closed set of immutable node types.

Every pass (printing, numpy evaluation, interval arithmetic, torch source)
is a separate visitor over these nodes; nothing here knows how to run them.
Nodes are frozen dataclasses, hashable and compared structurally, so a
parsed expression can be a dictionary key and a round trip can be checked
with ``==``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Union

# The index names an expression may use, in the order FlexAttention passes them.
INDEX_NAMES = ("b", "h", "q", "kv")
SCORE_NAME = "score"

Kind = Literal["bool", "int", "float"]


@dataclass(frozen=True, eq=False)
class Const:
    """A literal: ``True``/``False``, an int or a float.

    Equality includes the Python type, because ``True == 1 == 1.0`` in
    Python but a boolean, an integer and a float literal are different
    expressions (different types, different printed text).
    """

    value: bool | int | float

    def _key(self) -> tuple:
        return (type(self.value), self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("Const",) + self._key())


@dataclass(frozen=True)
class Var:
    """One of ``b h q kv`` (and ``score`` inside a score)."""

    name: str


@dataclass(frozen=True)
class Param:
    """A numeric param of the attention, read by name; prints as its name."""

    name: str
    value: bool | int | float


@dataclass(frozen=True)
class Read:
    """A read through a port: a B×T tensor at ``(b, q)``/``(b, kv)``, or a
    learned table (``table=True``) at integer index expressions."""

    port: str
    index: tuple["Expr", ...]
    table: bool = False


@dataclass(frozen=True)
class Call:
    """``bucket``, ``tanh``, ``abs``, ``min``, ``max`` or ``where``.

    ``bucket`` always carries its three arguments ``(x, num_buckets,
    max_distance)`` (the parser fills in the defaults), so every pass sees
    one shape.
    """

    fn: str
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Unary:
    """``-`` (numbers) or ``~`` (booleans)."""

    op: str
    operand: "Expr"


@dataclass(frozen=True)
class Binary:
    """Arithmetic ``+ - * // %`` or elementwise logic ``& |``."""

    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Compare:
    """One comparison ``== != < <= > >=``; chains are split by the parser."""

    op: str
    left: "Expr"
    right: "Expr"


Expr = Union[Const, Var, Param, Read, Call, Unary, Binary, Compare]

ARITHMETIC_OPS = ("+", "-", "*", "//", "%")
LOGIC_OPS = ("&", "|")
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
FUNCTIONS = ("bucket", "tanh", "abs", "min", "max", "where")

# T5's defaults (HF ``T5Attention``: relative_attention_num_buckets=32,
# relative_attention_max_distance=128).
BUCKET_DEFAULTS = (32, 128)


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Scope:
    """What an expression may name.

    ``kind`` is ``"mask"`` (boolean, integers only) or ``"score"`` (numeric,
    may read ``score``, learned tables, ``tanh`` and floats). ``params`` are the
    attention's numeric params; ``tensors`` the ports holding B×T integer
    tensors (documents, positions); ``tables`` the learned-table ports with
    their number of dimensions.
    """

    kind: Literal["mask", "score"]
    params: Mapping[str, bool | int | float] = field(default_factory=dict)
    tensors: frozenset[str] = frozenset()
    tables: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("mask", "score"):
            raise ValueError(f"Scope.kind must be 'mask' or 'score', not {self.kind!r}")
        object.__setattr__(self, "params", _frozen(self.params))
        object.__setattr__(self, "tensors", frozenset(self.tensors))
        object.__setattr__(self, "tables", _frozen(self.tables))

    def __hash__(self) -> int:
        return hash((self.kind, tuple(sorted(self.params.items())), self.tensors,
                     tuple(sorted(self.tables.items()))))


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(expr, Read):
        return expr.index
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Unary):
        return (expr.operand,)
    if isinstance(expr, (Binary, Compare)):
        return (expr.left, expr.right)
    return ()


def walk(expr: Expr):
    """Every node of ``expr``, parents before children (iterative)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def variables(expr: Expr) -> frozenset[str]:
    """Which of ``b h q kv score`` the expression depends on (reads included)."""
    return frozenset(node.name for node in walk(expr) if isinstance(node, Var))


def reads(expr: Expr) -> frozenset[str]:
    """The port names the expression reads (tensors and tables)."""
    return frozenset(node.port for node in walk(expr) if isinstance(node, Read))


@functools.lru_cache(maxsize=256)  # asked on every sampler and block pass over one expression
def tensor_reads(expr: Expr) -> tuple[tuple[str, str], ...]:
    """(port, "q" | "kv") of every tensor read in the expression, sorted."""
    return tuple(sorted({(n.port, n.index[1].name) for n in walk(expr) if isinstance(n, Read) and not n.table}))


def is_constant(expr: Expr) -> bool:
    """True when the value depends on no index, score or port."""
    return not any(isinstance(node, (Var, Read)) for node in walk(expr))


def all_of(*exprs: Expr | None) -> Expr | None:
    """The conjunction of the given masks, ``None``s dropped; ``None`` if empty."""
    kept = [e for e in exprs if e is not None]
    if not kept:
        return None
    result = kept[0]
    for e in kept[1:]:
        result = Binary("&", result, e)
    return result


def _value_kind(value: bool | int | float) -> Kind:
    if isinstance(value, bool):
        return "bool"
    return "int" if isinstance(value, int) else "float"


def _join(a: Kind, b: Kind) -> Kind:
    return "float" if "float" in (a, b) else "int"


def kind_of(expr: Expr) -> Kind:
    """The type of a well-typed expression (the parser has checked it)."""
    if isinstance(expr, (Const, Param)):
        return _value_kind(expr.value)
    if isinstance(expr, Var):
        return "float" if expr.name == SCORE_NAME else "int"
    if isinstance(expr, Read):
        return "float" if expr.table else "int"
    if isinstance(expr, Compare):
        return "bool"
    if isinstance(expr, Unary):
        return "bool" if expr.op == "~" else kind_of(expr.operand)
    if isinstance(expr, Binary):
        if expr.op in LOGIC_OPS:
            return "bool"
        return _join(kind_of(expr.left), kind_of(expr.right))
    if isinstance(expr, Call):
        if expr.fn == "bucket":
            return "int"
        if expr.fn == "tanh":
            return "float"
        if expr.fn == "abs":
            return kind_of(expr.args[0])
        if expr.fn == "where":
            a, b = kind_of(expr.args[1]), kind_of(expr.args[2])
            return "bool" if a == "bool" else _join(a, b)
        return _join(kind_of(expr.args[0]), kind_of(expr.args[1]))
    raise TypeError(f"not an expression node: {expr!r}")
