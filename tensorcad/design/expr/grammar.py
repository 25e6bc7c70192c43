"""The closed set of Python constructs an expression may use, and why each other one is refused.

``parse`` converts exactly the operators listed here into expression nodes;
any node type in ``REFUSED_NODES`` is refused with its reason, and any other
type not converted is refused by name.
"""

from __future__ import annotations

import ast

ARITHMETIC = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
LOGIC = {ast.BitAnd: "&", ast.BitOr: "|"}
COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
REFUSED_BINOPS = {ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitXor: "^",
                   ast.MatMult: "@"}

# Why each refused Python construct is refused, by node type.
REFUSED_NODES: dict[type, str] = {
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts are not allowed (read a port by calling it: name(b, q))",
    ast.Lambda: "lambdas are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.FormattedValue: "f-strings are not allowed",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.Starred: "starred arguments are not allowed",
    ast.IfExp: "conditional expressions are not allowed (use where(cond, a, b))",
    ast.List: "lists are not allowed",
    ast.Tuple: "tuples are not allowed",
    ast.Set: "sets are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Slice: "slices are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}
