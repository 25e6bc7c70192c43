"""Mask and score functions of the generated module (attention-gym style).

A mask of positions only is a plain `mask_mod(b, h, q_idx, kv_idx)`. A mask that
reads a tensor (a row's documents) is a factory called with it, returning a
closure whose `__name__` says what it keeps and whose `reads` names the tensors it
indexes, per the prelude's protocol (`runtime/prelude.ATTENTION_RUNTIME`). Scores follow
the same rule with `score_mod(score, b, h, q_idx, kv_idx)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..design import expr as E
from ..design.block_ranges import BlockRanges, block_ranges
from ..design.masks import is_same_document
from ..design.model import Attention
from ..errors import TensorcadError
from . import layout
from .names import Namer, comment_text

INDEX = {"b": "b", "h": "h", "q": "q_idx", "kv": "kv_idx"}


@dataclass(frozen=True)
class Function:
    """One generated mask_mod or score_mod (or the factory making it)."""

    name: str  # the mask_mod's own name: what it keeps
    factory: str | None  # the factory's name, when it reads tensors
    reads: tuple[str, ...]  # sanitised ports the factory takes, in order
    source: str
    roles: tuple[str | None, ...] = ()  # the input role wired to each port read, in order

    def call(self, ports: dict[str, str]) -> str:
        """The expression an attention's forward writes to get the function."""
        if self.factory is None:
            return self.name
        return f"{self.factory}({', '.join(ports[p] for p in self.reads)})"


def _mask_name(attention: Attention, roles: dict[str, str | None], owner: str) -> str:
    parts = []
    if attention.window is not None:
        parts.append("sliding_window" if attention.causal else "local_window")
    elif attention.causal:
        parts.append("causal")
    if attention.mask is not None:
        if is_same_document(attention.mask, roles):
            parts.append("same_document")
        else:
            return f"keeps_{owner}"
    return "_".join(parts)


def _window_comment(attention: Attention) -> list[str]:
    if attention.window is None:
        return []
    w = attention.window
    if attention.causal:
        return [
            f"# Sliding window of {w} keys, the query included: keeps 0 <= q - kv < {w},",
            f"# so kv = q - {w - 1} is the oldest key kept and kv = q - {w} the first dropped.",
        ]
    return [f"# Window of {w}: keeps |q - kv| < {w} (the query and {w - 1} keys each side)."]


def _body_lines(name: str, args: str, body: str, doc: str, indent: str) -> list[str]:
    lines = [f"{indent}def {name}({args}):", f'{indent}    """{doc}"""']
    return lines + layout.statement(indent + "    ", "return ", body)


def _bound(values: tuple[int | None, ...]) -> str:
    return repr(values[0]) if len(values) == 1 else repr(tuple(values))


def _ranges_lines(name: str, ranges: BlockRanges | None, documents: str | None,
                  indent: str) -> list[str]:
    """`name.ranges = dict(...)`: what the prelude builds the block mask from, exactly."""
    if ranges is None:
        return []
    args = [f"documents={documents}", f"behind={_bound(ranges.behind)}",
            f"ahead={_bound(ranges.ahead)}"]
    within = " within one document" if documents else ""
    return [f"{indent}# Blocks decided from each block's first and last position and document,",
            f"{indent}# never score by score: keeps -ahead <= q - kv <= behind{within}"
            " (None: unbounded)."] + layout.call(indent, f"{name}.ranges = dict(", args)


def _emit(name: str, args: str, body: str, doc: str, reads: tuple[str, ...],
          comments: list[str], flags: list[str], factory: str | None,
          ranges: list[str] = ()) -> str:
    if factory is None:
        lines = comments + _body_lines(name, args, body, doc, "")
        lines += ["", ""] + [f"{name}.{flag}" for flag in flags] + list(ranges)
        return "\n".join(lines).rstrip() + "\n"
    lines = comments + [f"def {factory}({', '.join(reads)}):",
                        f'    """Makes `{name}` over the (B, T) tensors it indexes."""', ""]
    lines += _body_lines(name, args, body, doc, "    ")
    lines += ["", f"    {name}.reads = ({', '.join(reads)},)"]
    lines += [f"    {name}.{flag}" for flag in flags]
    lines += list(ranges)
    lines += [f"    return {name}"]
    return "\n".join(lines) + "\n"


def mask_function(attention: Attention, roles: dict[str, str | None], ports: Namer,
                  names: Namer, owner: str) -> Function | None:
    """The mask_mod of what `attention` keeps (causal, window and mask ANDed)."""
    keep = attention.keep
    if keep is None:
        return None
    read_ports = sorted(E.reads(keep))
    reads = tuple(ports(p) for p in read_ports)
    name = names(("mask", keep), _mask_name(attention, roles, owner))
    factory = names(("mask factory", keep), f"{name}_mask") if reads else None
    body = E.to_torch(keep, {**INDEX, **{p: ports(p) for p in read_ports}})
    used = E.variables(keep)
    flags = []
    if not reads and "b" not in used:
        flags.append("uses_batch = False")
    if "h" not in used:
        flags.append("uses_head = False")
    doc = f"Keeps {comment_text(E.to_text(keep))}."
    exact = block_ranges(attention)
    documents = None if exact is None or exact.documents is None else ports(exact.documents)
    ranges = _ranges_lines(name, exact, documents, "    " if factory else "")
    source = _emit(name, "b, h, q_idx, kv_idx", body, doc, reads, _window_comment(attention),
                   flags, factory, ranges)
    return Function(name, factory, reads, source, tuple(roles.get(p) for p in read_ports))


def _is_relative_bias(expr: E.Expr) -> bool:
    return (
        isinstance(expr, E.Binary) and expr.op == "+"
        and isinstance(expr.left, E.Var) and expr.left.name == "score"
        and isinstance(expr.right, E.Read) and expr.right.table
        and any(isinstance(i, E.Call) and i.fn == "bucket" for i in expr.right.index)
    )


def score_function(attention: Attention, ports: Namer, names: Namer, owner: str) -> Function | None:
    """The score_mod rewriting each score, or None when scores are left alone."""
    score = attention.score
    if score is None:
        return None
    read_ports = sorted(E.reads(score))
    reads = tuple(ports(p) for p in read_ports)
    text = "relative_position_bias" if _is_relative_bias(score) else f"score_{owner}"
    name = names(("score", score), text)
    factory = names(("score factory", score), f"{name}_score") if reads else None
    body = E.to_torch(score, {**INDEX, "score": "score", **{p: ports(p) for p in read_ports}})
    doc = f"Scores {comment_text(E.to_text(score))}."
    source = _emit(name, "score, b, h, q_idx, kv_idx", body, doc, reads, [], [], factory)
    return Function(name, factory, reads, source)


_SAFE_PATH = re.compile(r"[A-Za-z0-9_.\[\]]+")


def mask_table(uses: dict[str, tuple[Function, list[str]]]) -> str:
    """`MASKS`: the module's statement of its masks, which tensorcad's runtime reads.

    Each entry: the mask_mod itself (a mask of positions only) or the factory making
    it, the forward's inputs that factory takes (by role, in order), and the design
    paths of the attentions that run it. Paths are the design's JSON paths, made of
    node indices and fixed keys only; anything else is refused, never pasted in.
    """
    lines = [
        "# The masks this module's attentions run, so tensorcad's runtime can make each",
        "# one anew over other rows: the mask_mod (a mask of positions only) or the",
        "# factory that makes it from the forward's inputs named in `reads`, and the",
        "# design's attentions that run it.",
    ]
    if not uses:
        return "\n".join(lines + ["MASKS = {}"]) + "\n"
    lines.append("MASKS = {")
    for name, (fn, paths) in uses.items():
        for path in paths:
            if not _SAFE_PATH.fullmatch(path):
                raise TensorcadError(path, "an attention's path holds characters codegen will not write")
        roles = ", ".join("None" if r is None else f'"{r}"' for r in fn.roles) + ("," if len(fn.roles) == 1 else "")
        attentions = ", ".join(f'"{p}"' for p in paths) + ("," if len(paths) == 1 else "")
        listed = [f'        "attentions": ({attentions}),']
        if len(listed[0]) > layout.WIDTH:  # black's own layout: one path a line, a trailing comma
            listed = ['        "attentions": (', *(f'            "{p}",' for p in paths), "        ),"]
        lines += [
            f'    "{name}": {{',
            f'        "mask_mod": {name if fn.factory is None else "None"},',
            f'        "factory": {fn.factory if fn.factory is not None else "None"},',
            f'        "reads": ({roles}),',
            *listed,
            "    },",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"
