"""Rules about packing: a packing no mask reads, and documents short against the kernel's blocks."""

from __future__ import annotations

from typing import Iterator

from ..design.model import Design
from .registry import Diagnostic, rule

NOTE_RATIO = 1.25  # whole-block scores over kept scores
WARN_SHARE = 1 / 20  # of a token's forward pass


@rule("packing-unused", "note", "packing is set but every attention reads across documents")
def packing_unused(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.packing is None:
        return
    if context.report().packed is None:
        yield Diagnostic(
            "packing-unused", "note",
            f"packing ({op.packing.mean:g}-token documents) is set, but no mask reads a documents input, "
            "so attention crosses documents and the figures are those of one document a row "
            "(Llama 3 found the mask optional at ordinary lengths)",
            "packing",
        )


@rule("document-blocks", "warn", "documents short against the kernel's 128 x 128 blocks: "
      "note past 1.25x whole-block scores over kept ones, warn once the difference is 1/20 of the forward pass")
def document_blocks(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.packing is None:
        return
    packed = context.report().packed
    if packed is None or packed.block_ratio <= NOTE_RATIO:
        return
    # Measured on the whole forward pass: on attention alone nearly every packing fires.
    extra = (packed.fwd_attention_blocks - packed.fwd_attention) / packed.fwd_per_token
    severity = "warn" if extra >= WARN_SHARE else "note"
    yield Diagnostic(
        "document-blocks", severity,
        f"in {op.packing.mean:g}-token documents the kernel computes {packed.block_ratio:.2f}x the scores the mask "
        f"keeps ({op.block} x {op.block} blocks); the difference is {extra:.1%} of a token's forward pass",
        "packing",
    )
