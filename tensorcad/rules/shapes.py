"""Shape checks a designer needs beyond what loading refuses outright."""

from __future__ import annotations

from typing import Iterator

from ..design.model import Design
from .registry import Diagnostic, rule


@rule("past-context", "error", "a sequence longer than the design's context")
def past_context(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None:
        return
    why = design.past_context(op.seq)
    if why is not None:
        yield Diagnostic("past-context", "error", why, "seq")


@rule("position-table", "error", "a learned position table shorter than the sequence it is run at")
def position_table(design: Design, op, context) -> Iterator[Diagnostic]:
    # Past the design's context, past-context says so once; a table is then short by construction.
    if op is None or design.past_context(op.seq) is not None:
        return
    for node, _ in design.walk():
        if node.kind == "pos_embedding" and node.wire("pos") is None and node.params["context"] < op.seq:
            yield Diagnostic(
                "position-table", "error",
                f"{node.name} holds {node.params['context']:,} positions but the sequence is {op.seq:,} tokens",
                f"{node.path}.context",
            )


@rule("window-covers-sequence", "note", "a window at least as long as the sequence keeps what causal attention keeps")
def window_covers_sequence(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None:
        return
    for a, _ in design.attentions():
        if a.window is not None and a.window >= op.seq:
            yield Diagnostic(
                "window-covers-sequence", "note",
                f"window {a.window:,} >= sequence {op.seq:,}: the window removes nothing here",
                f"{a.path}.window",
            )


@rule("head-dim-alignment", "note", "head_dim not a multiple of 8 leaves fused attention kernels on slow paths")
def head_dim_alignment(design: Design, op, context) -> Iterator[Diagnostic]:
    for a, _ in design.attentions():
        if a.head_dim % 8:
            yield Diagnostic(
                "head-dim-alignment", "note",
                f"head_dim {a.head_dim} is not a multiple of 8; FlexAttention and FlashAttention tile by 16",
                f"{a.path}.head_dim",
            )
