"""Attention expressions: masks and scores as a closed little language.

One parsed form (``nodes``), three interpreters: numpy (``evaluate``),
intervals (``interval``) and torch source (``to_torch``); ``to_text`` prints
the canonical text back. See ``docs/attention-expressions.md``.
"""

from .intervals import Box, Verdict, interval, read_range
from .nodes import (
    Binary,
    Call,
    Compare,
    Const,
    Expr,
    Param,
    Read,
    Scope,
    Unary,
    Var,
    all_of,
    is_constant,
    kind_of,
    reads,
    variables,
)
from .numpy_eval import Env, evaluate, relative_bucket
from .parse import parse
from .printer import RELATIVE_BUCKET_SOURCE, to_text, to_torch

__all__ = [
    "Binary", "Box", "Call", "Compare", "Const", "Env", "Expr", "Param",
    "RELATIVE_BUCKET_SOURCE", "Read", "Scope", "Unary", "Var", "Verdict", "all_of",
    "evaluate", "interval", "is_constant", "kind_of", "parse", "read_range", "reads",
    "relative_bucket", "to_text", "to_torch", "variables",
]
