"""Lines laid out the way black / ruff format lay them out (88 columns).

The generator writes most lines from fixed templates, already formatted. These
helpers lay out the few whose length depends on the design (calls with sanitised
names, expressions from the design's masks), following black's rules for them:
one line if it fits; else the bracket's contents on one indented line; else one
item a line with a trailing comma (calls), or one operand a line with the operator
leading (expressions, split at their loosest operator).
"""

from __future__ import annotations

WIDTH = 88
BODY = " " * 8  # a method's body: two levels in

# black's delimiter priorities (black/brackets.py): the loosest present splits first.
_PRIORITY = {"==": 10, "!=": 10, "<": 10, "<=": 10, ">": 10, ">=": 10, "|": 9, "&": 7}


def call(indent: str, head: str, args: list[str], tail: str = ")") -> list[str]:
    """`head` ends with an opening bracket; `args` are its items."""
    one = f"{indent}{head}{', '.join(args)}{tail}"
    if len(one) <= WIDTH:
        return [one]
    inner = f"{indent}    {', '.join(args)}"
    if len(inner) <= WIDTH:
        return [f"{indent}{head}", inner, f"{indent}{tail}"]
    return [f"{indent}{head}", *(f"{indent}    {a}," for a in args), f"{indent}{tail}"]


def _split(expr: str) -> list[str] | None:
    """Operands of `expr` at its loosest depth-0 operator, the operator leading."""
    depth, cuts, best = 0, [], 0
    tokens = expr.split(" ")
    for i, token in enumerate(tokens):
        if depth == 0 and i and token in _PRIORITY:
            if _PRIORITY[token] > best:
                best, cuts = _PRIORITY[token], [i]
            elif _PRIORITY[token] == best:
                cuts.append(i)
        depth += sum(token.count(c) for c in "([") - sum(token.count(c) for c in ")]")
    if not cuts:
        return None
    parts, start = [], 0
    for cut in cuts + [len(tokens)]:
        parts.append(" ".join(tokens[start:cut]))
        start = cut
    return parts


def statement(indent: str, head: str, expr: str) -> list[str]:
    """`head + expr` (e.g. `return ` + a mask body), wrapped as black would."""
    one = f"{indent}{head}{expr}"
    if len(one) <= WIDTH:
        return [one]
    inner = f"{indent}    {expr}"
    if len(inner) <= WIDTH:
        return [f"{indent}{head}(", inner, f"{indent})"]
    parts = _split(expr)
    if parts is None:
        return [f"{indent}{head}(", inner, f"{indent})"]
    return [f"{indent}{head}(", *(f"{indent}    {p}" for p in parts), f"{indent})"]
