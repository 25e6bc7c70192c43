"""Calls in an expression: reads of the attention's ports (tensors and tables) and the functions.

The half of ``parse``'s converter that turns ``name(args)`` into a ``Read`` or
a ``Call``: a tensor read at a row and a position only, a table read (scores
only) at one integer index a dimension, and ``bucket``, ``tanh`` (scores
only), ``abs``, ``min``, ``max`` and ``where``, each with its arity and kinds
checked. Anything else called is refused, naming the ports or functions allowed.
"""

from __future__ import annotations

import ast

from .grammar import REFUSED_NODES
from .nodes import BUCKET_DEFAULTS, INDEX_NAMES, Call, Const, Expr, Kind, Read, Var


class CallConverter:
    """Converts calls; the converter it is part of supplies ``convert``, ``refuse`` and the checks."""

    def convert_Call(self, node: ast.Call) -> tuple[Expr, Kind]:
        if not isinstance(node.func, ast.Name):
            if type(node.func) in REFUSED_NODES:
                self.convert(node.func)  # refuses attribute access and the rest, by name
            raise self.refuse(f"only named functions and ports can be called, not "
                              f"{self.source(node)!r}")
        name = node.func.id
        if name.startswith("__"):
            raise self.refuse(f"dunder names are not allowed: {self.source(node)!r}")
        if node.keywords:
            raise self.refuse(f"keyword arguments are not allowed: {self.source(node)!r}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.refuse(f"starred arguments are not allowed: {self.source(node)!r}")
        if name in self.scope.tensors:
            return self.tensor_read(node, name)
        if name in self.scope.tables:
            return self.table_read(node, name)
        handler = getattr(self, "call_" + name, None)
        if handler is None or (name == "tanh" and not self.in_score):
            if name == "tanh":
                raise self.refuse(f"tanh is only allowed in a score: {self.source(node)!r}")
            if name in self.scope.params or name in INDEX_NAMES:
                raise self.refuse(f"{name!r} is not a function: {self.source(node)!r}")
            if _looks_like_a_read(node):
                ports = sorted(self.scope.tensors) + (sorted(self.scope.tables) if self.in_score else [])
                listed = f"(ports: {', '.join(ports)})" if ports else "(no port is wired to this attention)"
                raise self.refuse(f"unknown port {name!r} {listed}")
            raise self.refuse(f"unknown function {name!r} in {self.source(node)!r}; "
                              f"allowed: {self.allowed_calls()}")
        return handler(node)

    def tensor_read(self, node: ast.Call, port: str) -> tuple[Expr, Kind]:
        args = node.args
        names = [a.id if isinstance(a, ast.Name) else None for a in args]
        if len(args) != 2 or names[0] != "b" or names[1] not in ("q", "kv"):
            raise self.refuse(f"a tensor is read at a row and a position only: "
                              f"{port}(b, q) or {port}(b, kv), not {self.source(node)!r}")
        return Read(port, (Var("b"), Var(names[1]))), "int"

    def table_read(self, node: ast.Call, port: str) -> tuple[Expr, Kind]:
        if not self.in_score:
            raise self.refuse("a mask may only read tensors the engine can make up "
                              f"(documents, positions); {port!r} is a learned table")
        ndim = self.scope.tables[port]
        if len(node.args) != ndim:
            raise self.refuse(f"table {port!r} has {ndim} dimension(s), so it takes {ndim} "
                              f"index expression(s): {self.source(node)!r}")
        index = []
        for arg in node.args:
            expr, kind = self.convert(arg)
            self.need_int(arg, kind, f"an index into {port!r}")
            index.append(expr)
        return Read(port, tuple(index), table=True), "float"

    def arity(self, node: ast.Call, low: int, high: int | None = None) -> None:
        n = len(node.args)
        high = low if high is None else high
        if n < low or (high >= 0 and n > high):
            wanted = (f"{low}" if low == high else f"{low} or more" if high < 0
                      else f"{low} to {high}")
            raise self.refuse(f"{node.func.id} takes {wanted} argument(s): "  # type: ignore[attr-defined]
                              f"{self.source(node)!r}")

    def call_bucket(self, node: ast.Call) -> tuple[Expr, Kind]:
        self.arity(node, 1, 3)
        x, kind = self.convert(node.args[0])
        self.need_int(node.args[0], kind, "bucket")
        settings = list(BUCKET_DEFAULTS)
        for i, arg in enumerate(node.args[1:]):
            if not (isinstance(arg, ast.Constant) and type(arg.value) is int):
                raise self.refuse(f"bucket's num_buckets and max_distance must be integer "
                                  f"literals: {self.source(arg)!r} in {self.source(node)!r}")
            settings[i] = arg.value
        num_buckets, max_distance = settings
        if not 2 <= num_buckets <= 2**20 or not num_buckets // 2 < max_distance <= 2**40:
            raise self.refuse(f"bucket needs 2 <= num_buckets <= 2**20 and num_buckets // 2 < "
                              f"max_distance <= 2**40: {self.source(node)!r}")
        return Call("bucket", (x, Const(num_buckets), Const(max_distance))), "int"

    def call_tanh(self, node: ast.Call) -> tuple[Expr, Kind]:
        self.arity(node, 1)
        x, kind = self.convert(node.args[0])
        self.need_number(node.args[0], kind, "tanh")
        return Call("tanh", (x,)), "float"

    def call_abs(self, node: ast.Call) -> tuple[Expr, Kind]:
        self.arity(node, 1)
        x, kind = self.convert(node.args[0])
        self.need_number(node.args[0], kind, "abs")
        return Call("abs", (x,)), kind

    def _min_max(self, node: ast.Call, fn: str) -> tuple[Expr, Kind]:
        self.arity(node, 2, -1)
        result, kind = self.convert(node.args[0])
        self.need_number(node.args[0], kind, fn)
        for arg in node.args[1:]:
            expr, arg_kind = self.convert(arg)
            self.need_number(arg, arg_kind, fn)
            result = Call(fn, (result, expr))
            kind = "float" if "float" in (kind, arg_kind) else "int"
        return result, kind

    def call_min(self, node: ast.Call) -> tuple[Expr, Kind]:
        return self._min_max(node, "min")

    def call_max(self, node: ast.Call) -> tuple[Expr, Kind]:
        return self._min_max(node, "max")

    def call_where(self, node: ast.Call) -> tuple[Expr, Kind]:
        self.arity(node, 3)
        cond, cond_kind = self.convert(node.args[0])
        self.need_bool(node.args[0], cond_kind, "where's condition")
        a, a_kind = self.convert(node.args[1])
        b, b_kind = self.convert(node.args[2])
        if (a_kind == "bool") != (b_kind == "bool"):
            raise self.refuse(f"where's branches must both be booleans or both numbers: "
                              f"{self.source(node)!r}")
        kind: Kind = ("bool" if a_kind == "bool"
                      else "float" if "float" in (a_kind, b_kind) else "int")
        return Call("where", (cond, a, b)), kind


def _looks_like_a_read(node: ast.Call) -> bool:
    """name(b, q) or name(b, kv): a tensor read, so an unknown name is a port misspelled or unwired."""
    args = [a.id if isinstance(a, ast.Name) else None for a in node.args]
    return not node.keywords and len(args) == 2 and args[0] == "b" and args[1] in ("q", "kv")
