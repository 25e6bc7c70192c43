"""How large and how deep an expression may be, checked before and after Python parses it.

Every interpreter (numpy, intervals, the torch printer) walks an expression recursively,
and CPython's own parser recurses on nested text, so hostile input (10,000 nested brackets,
a comparison chain of thousands) is bounded here: the text's length and nesting by a flat
token scan before ``ast.parse`` sees it, the parsed tree's depth without recursing.
"""

from __future__ import annotations

import ast
import io
import tokenize

from tensorcad.errors import TensorcadError

MAX_LENGTH = 2_000
MAX_DEPTH = 100
# Limits on the parsed tree itself, which every interpreter (numpy, intervals,
# torch source) walks recursively and whose printed form Python must parse
# again: min/max of many arguments and comparison chains are flat in the text
# but a chain in the tree, so the text's nesting alone does not bound them.
MAX_TREE_DEPTH = 64
MAX_TREE_NODES = 1_000
MAX_LITERAL = 2**40

_PREFIX_TOKENS = {"-", "+", "~", "not", "(", "[", "{"}


def clip(text: str, limit: int = 120) -> str:
    """The text cut to ``limit`` characters, for quoting in a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_text_nesting(text: str, path: str) -> None:
    """Bound bracket depth and runs of prefix operators with a flat token scan.

    This keeps deeply nested text away from the recursive C parser. A scan
    that stops on a tokenize error leaves the error for ``ast.parse`` to word.
    """
    depth = deepest = run = longest = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER,
                              tokenize.COMMENT):
                continue
            if token.string in ("(", "[", "{"):
                depth += 1
                deepest = max(deepest, depth)
            elif token.string in (")", "]", "}"):
                depth -= 1
            run = run + 1 if token.string in _PREFIX_TOKENS else 0
            longest = max(longest, run)
            if deepest > MAX_DEPTH or longest > MAX_DEPTH:
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    if deepest > MAX_DEPTH or longest > MAX_DEPTH:
        raise TensorcadError(path, f"expression is nested deeper than {MAX_DEPTH}: "
                                   f"{clip(text, 60)!r}")


def check_tree_depth(root: ast.AST, text: str, path: str) -> None:
    """Refuse a parsed tree deeper than MAX_DEPTH (iteratively, no recursion)."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise TensorcadError(path, f"expression is nested deeper than {MAX_DEPTH}: "
                                       f"{clip(text, 60)!r}")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
