"""ROPE-02: positions handed to an attention that has no rotation to turn by them."""

from __future__ import annotations

from typing import Iterator

from ..design.expr import reads
from ..design.model import Design
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
