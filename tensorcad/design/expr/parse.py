"""Text → AST: Python's own parser, then a closed-world conversion.

The text is parsed with ``ast.parse(mode="eval")`` and every Python node is
converted into one of the types in ``nodes``; any node type not listed is
refused, quoting the offending text. Nothing is ever ``eval``ed or compiled
to bytecode. Before the C parser sees the text, its length and nesting are
bounded by a token scan (``limits``), so pathological inputs (10,000 nested
brackets or unary operators) are refused without recursing. Which constructs
are accepted, and why the others are not, is ``grammar``; calls are ``calls``.
"""

from __future__ import annotations

import ast
import math
import threading

import numpy as np

from tensorcad.errors import TensorcadError

from .calls import CallConverter
from .grammar import ARITHMETIC, COMPARE, LOGIC, REFUSED_BINOPS, REFUSED_NODES
from .limits import (
    MAX_LENGTH,
    MAX_LITERAL,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    check_text_nesting,
    check_tree_depth,
    clip,
)
from .nodes import (
    INDEX_NAMES,
    SCORE_NAME,
    Binary,
    Compare,
    Const,
    Expr,
    Kind,
    Param,
    Scope,
    Unary,
    Var,
    children,
    is_constant,
    walk,
)

# CPython 3.11 keeps ast.parse's recursion count in state its threads share, so two
# parses at once (the editor's threaded server) can fail with "AST constructor
# recursion depth mismatch" (cpython gh-106905); one parse at a time here.
_AST_LOCK = threading.Lock()

def parse(text: str, scope: Scope, path: str = "") -> Expr:
    """Parse a mask or score expression in ``scope``; refuse anything else.

    Raises ``TensorcadError(path, message)`` naming the offending text.
    """
    if not isinstance(text, str):
        raise TensorcadError(path, f"an expression must be text, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise TensorcadError(path, f"expression is {len(text):,} characters long; "
                                   f"the limit is {MAX_LENGTH:,}")
    text = text.strip()
    if not text:
        raise TensorcadError(path, "expression is empty")
    check_text_nesting(text, path)
    try:
        with _AST_LOCK:
            tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        where = f" at column {e.offset}" if e.offset else ""
        raise TensorcadError(path, f"not a valid expression{where}: {e.msg} in {clip(text)!r}") from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise TensorcadError(path, f"expression could not be parsed ({type(e).__name__}): "
                                   f"{clip(text)!r}") from None
    check_tree_depth(tree.body, text, path)
    converter = _Converter(text, scope, path)
    expr, kind = converter.convert(tree.body)
    nodes = sum(1 for _ in walk(expr))
    if nodes > MAX_TREE_NODES:
        raise TensorcadError(path, f"expression has {nodes:,} terms; the limit is {MAX_TREE_NODES:,}: "
                                   f"{clip(text, 60)!r}")
    if scope.kind == "mask" and kind != "bool":
        raise TensorcadError(path, f"a mask must be boolean, but {clip(text)!r} is a number")
    if scope.kind == "score" and kind == "bool":
        raise TensorcadError(path, f"a score must be a number, but {clip(text)!r} is boolean")
    return expr


class _Converter(CallConverter):
    """Python AST → expression AST, type-checking as it goes.

    ``convert`` returns the node and its kind (``bool``, ``int``, ``float``).
    """

    def __init__(self, text: str, scope: Scope, path: str):
        self.depths: dict[int, int] = {}  # id of a converted node -> its depth
        self.keep: list[Expr] = []  # holds the nodes whose ids key ``depths``
        self.text = text
        self.scope = scope
        self.path = path
        self.in_score = scope.kind == "score"

    def depth(self, expr: Expr) -> int:
        """The tree depth of ``expr``, iteratively, reusing what earlier conversions measured."""
        stack = [(expr, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in self.depths:
                continue
            kids = children(node)
            if ready or not kids:
                self.depths[id(node)] = 1 + max((self.depths[id(k)] for k in kids), default=0)
                self.keep.append(node)
            else:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if id(k) not in self.depths)
        return self.depths[id(expr)]

    # -- errors ------------------------------------------------------------

    def source(self, node: ast.AST) -> str:
        return clip(ast.get_source_segment(self.text, node) or self.text)

    def refuse(self, message: str) -> TensorcadError:
        return TensorcadError(self.path, message)

    def allowed_names(self) -> str:
        names = list(INDEX_NAMES) + ([SCORE_NAME] if self.in_score else [])
        names += sorted(self.scope.params)
        return ", ".join(names)

    def allowed_calls(self) -> str:
        functions = ["bucket", "abs", "min", "max", "where"] + (["tanh"] if self.in_score else [])
        ports = sorted(self.scope.tensors) + (sorted(self.scope.tables) if self.in_score else [])
        listed = "functions " + ", ".join(functions)
        return listed + (("; ports " + ", ".join(ports)) if ports else "")

    # -- type checks -------------------------------------------------------

    def need_bool(self, node: ast.AST, kind: Kind, what: str, hint: str = "") -> None:
        if kind != "bool":
            raise self.refuse(f"{what} needs booleans, but {self.source(node)!r} is a number{hint}")

    def need_number(self, node: ast.AST, kind: Kind, what: str) -> None:
        if kind == "bool":
            raise self.refuse(f"{what} needs numbers, but {self.source(node)!r} is boolean")

    def need_int(self, node: ast.AST, kind: Kind, what: str) -> None:
        if kind != "int":
            raise self.refuse(f"{what} needs an integer, but {self.source(node)!r} is "
                              f"{'boolean' if kind == 'bool' else 'a float'}")

    # -- conversion --------------------------------------------------------

    def convert(self, node: ast.AST) -> tuple[Expr, Kind]:
        method = getattr(self, "convert_" + type(node).__name__, None)
        if method is not None:
            expr, kind = method(node)
            if self.depth(expr) > MAX_TREE_DEPTH:
                raise self.refuse(f"expression nests {MAX_TREE_DEPTH}+ operations deep (min/max of many "
                                  f"arguments and long comparison chains count one level each); the limit "
                                  f"is {MAX_TREE_DEPTH}: {clip(self.text, 60)!r}")
            return expr, kind
        reason = REFUSED_NODES.get(type(node), f"{type(node).__name__} is not allowed")
        raise self.refuse(f"{reason}: {self.source(node)!r}")

    def convert_Constant(self, node: ast.Constant) -> tuple[Expr, Kind]:
        value = node.value
        if isinstance(value, bool):
            return Const(value), "bool"
        if isinstance(value, int):
            if abs(value) > MAX_LITERAL:
                raise self.refuse(f"literal {self.source(node)!r} is too large "
                                  f"(the limit is 2**40)")
            return Const(value), "int"
        if isinstance(value, float):
            if not math.isfinite(value) or abs(value) > MAX_LITERAL:
                raise self.refuse(f"literal {self.source(node)!r} is too large "
                                  f"(the limit is 2**40)")
            if not self.in_score:
                raise self.refuse(f"float literal {self.source(node)!r} is only allowed in a "
                                  "score; a mask is integers and booleans")
            return Const(value), "float"
        if isinstance(value, (str, bytes)):
            raise self.refuse(f"strings are not allowed: {self.source(node)!r}")
        raise self.refuse(f"only numbers and True/False are literals, not {self.source(node)!r}")

    def convert_Name(self, node: ast.Name) -> tuple[Expr, Kind]:
        name = node.id
        if name.startswith("__"):
            raise self.refuse(f"dunder names are not allowed: {clip(name, 60)!r}")
        if name in INDEX_NAMES:
            return Var(name), "int"
        if name == SCORE_NAME:
            if not self.in_score:
                raise self.refuse("'score' may only be used in a score, not in a mask")
            return Var(name), "float"
        if name in self.scope.params:
            value = self.scope.params[name]
            kind: Kind = ("bool" if isinstance(value, bool)
                          else "int" if isinstance(value, int) else "float")
            if kind == "float" and not self.in_score:
                raise self.refuse(f"param {clip(name, 60)!r} is a float ({value}); a mask is integers "
                                  "and booleans")
            return Param(name, value), kind
        if name in self.scope.tensors:
            raise self.refuse(f"port {clip(name, 60)!r} is read by calling it: {name}(b, q) or {name}(b, kv)")
        if name in self.scope.tables:
            raise self.refuse(f"table {clip(name, 60)!r} is read by calling it with "
                              f"{self.scope.tables[name]} index expression(s)")
        raise self.refuse(f"unknown name {clip(name, 60)!r} in {self.textclip()!r}; "
                          f"allowed: {self.allowed_names()}")

    def textclip(self) -> str:
        return clip(self.text)

    def convert_UnaryOp(self, node: ast.UnaryOp) -> tuple[Expr, Kind]:
        if isinstance(node.op, ast.UAdd):
            raise self.refuse(f"unary + is not allowed: {self.source(node)!r}")
        operand, kind = self.convert(node.operand)
        if isinstance(node.op, ast.USub):
            self.need_number(node.operand, kind, "unary -")
            if isinstance(operand, Const):
                # Fold so that a negative literal prints and re-parses as itself.
                return Const(-operand.value), kind
            return Unary("-", operand), kind
        what = "not" if isinstance(node.op, ast.Not) else "~"
        self.need_bool(node.operand, kind, what,
                       " (~ is logical here: it applies to comparisons, not integers)")
        return Unary("~", operand), "bool"

    def convert_BinOp(self, node: ast.BinOp) -> tuple[Expr, Kind]:
        op_type = type(node.op)
        if op_type is ast.Div:
            raise self.refuse(f"'/' is not allowed (use '//' for integer division): "
                              f"{self.source(node)!r}")
        if op_type in REFUSED_BINOPS:
            raise self.refuse(f"operator {REFUSED_BINOPS[op_type]!r} is not allowed: "
                              f"{self.source(node)!r}")
        left, left_kind = self.convert(node.left)
        right, right_kind = self.convert(node.right)
        if op_type in LOGIC:
            op = LOGIC[op_type]
            hint = (" (comparisons bind looser than & and | in Python: "
                    "write (a >= b) & (c == d), or use 'and'/'or')")
            self.need_bool(node.left, left_kind, op, hint)
            self.need_bool(node.right, right_kind, op, hint)
            return Binary(op, left, right), "bool"
        op = ARITHMETIC[op_type]
        self.need_number(node.left, left_kind, op)
        self.need_number(node.right, right_kind, op)
        if op in ("//", "%") and is_constant(right) and _constant_value(right) == 0:
            # numpy would give 0 and the generated torch code would raise: refuse it here.
            raise self.refuse(f"division by zero: {self.source(node)!r}")
        kind: Kind = "float" if "float" in (left_kind, right_kind) else "int"
        return Binary(op, left, right), kind

    def convert_BoolOp(self, node: ast.BoolOp) -> tuple[Expr, Kind]:
        op = "&" if isinstance(node.op, ast.And) else "|"
        word = "and" if op == "&" else "or"
        result: Expr | None = None
        for value in node.values:
            expr, kind = self.convert(value)
            self.need_bool(value, kind, word)
            result = expr if result is None else Binary(op, result, expr)
        assert result is not None
        return result, "bool"

    def convert_Compare(self, node: ast.Compare) -> tuple[Expr, Kind]:
        operands = [node.left, *node.comparators]
        converted = [self.convert(operand) for operand in operands]
        result: Expr | None = None
        for i, op_node in enumerate(node.ops):
            op = COMPARE.get(type(op_node))
            if op is None:
                raise self.refuse(f"only == != < <= > >= compare; not {self.source(node)!r}")
            (left, left_kind), (right, right_kind) = converted[i], converted[i + 1]
            if op in ("==", "!="):
                if (left_kind == "bool") != (right_kind == "bool"):
                    raise self.refuse(f"{op} compares a boolean with a number in "
                                      f"{self.source(node)!r}")
            else:
                self.need_number(operands[i], left_kind, op)
                self.need_number(operands[i + 1], right_kind, op)
            comparison = Compare(op, left, right)
            # a < b < c means (a < b) & (b < c), as in Python.
            result = comparison if result is None else Binary("&", result, comparison)
        assert result is not None
        return result, "bool"


def _constant_value(expr: Expr) -> float:
    """The value of an expression that reads no index, tensor or table."""
    from .numpy_eval import Env, evaluate

    zero = np.zeros((), np.int64)
    return float(evaluate(expr, Env(b=zero, h=zero, q=zero, kv=zero)))
