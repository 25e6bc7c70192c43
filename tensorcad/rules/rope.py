"""The rope rules: ROPE-02, positions handed to an attention that has no rotation to turn by them;
ROPE-03, a rope scaling that reads the longest position of the batch, under packing."""

from __future__ import annotations

from typing import Iterator

from ..design.expr import reads
from ..design.model import Design
from ..design.rope_scaling import ROW_DEPENDENT
from .registry import Diagnostic, rule


@rule("ROPE-02", "error", "positions are wired into an attention that has no rope to turn")
def positions_without_rope(design: Design, op, context) -> Iterator[Diagnostic]:
    for node, _ in design.walk():
        if node.kind != "gqa_attention":
            continue
        wire = node.wire("pos")
        if wire is None or node.params["rope"] is not None:
            continue
        sdpa = node.child("sdpa").attention
        if sdpa.keep is not None and "pos" in reads(sdpa.keep):
            continue  # the mask reads them: they are used, just not rotated by
        yield Diagnostic(
            "ROPE-02", "error",
            f"positions reach {node.name} ({' -> '.join(wire.route)}) but it has no rope to turn by them "
            "and its mask does not read them; give it rope or do not wire pos",
            node.path,
        )


@rule("ROPE-03", "warn", "a dynamic or longrope scaling under packing: each document's rotation depends on the "
      "longest position of its batch")
def row_dependent_rope(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.packing is None:
        return
    for node, _ in design.walk():
        if node.kind != "gqa_attention" or node.params["rope"] is None:
            continue
        scaling = node.child("rope_q").params["scaling"]
        if scaling is None or scaling["type"] not in ROW_DEPENDENT or op.seq <= scaling["original_context"]:
            continue
        original = scaling["original_context"]
        yield Diagnostic(
            "ROPE-03", "warn",
            f"{node.name}'s {scaling['type']} rope scaling recomputes its frequencies from the longest position of "
            f"the whole batch once it passes {original}: in {op.seq}-token packed rows, documents beside one longer "
            f"than {original} tokens are rotated as that one is, not as they would be alone; give such documents "
            "rows of their own, or use a static scaling (linear, llama3, yarn)",
            node.path,
        )
