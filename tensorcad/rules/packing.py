"""Rules about packing: a packing no mask reads, documents short against the kernel's blocks, tokens a packer
drops and rows it pads."""

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
            f"packing ({op.packing.mean:g}-token documents) is set, but no mask reads a documents input: "
            "this design's attention crosses documents, so its figures are those of one document a row "
            "(Llama 3 found the mask optional at ordinary lengths)"
            + ("; a model trained with the document mask (DataCollatorWithFlattening's position_ids and "
               "use_cache=False) is imported with --documents --positions" if "hf" in design.source else ""),
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


DROP_SHARE = 0.001  # of the corpus's tokens
PAD_SHARE = 0.10  # of a row
# The strategy that keeps what a truncating one drops: the same packer, splitting instead of cutting.
KEEPS = {"bfd": "split", "ffd": "split", "pad": "split", "trl-bfd": "trl-bfd-split", "torchtune": "torchtune-split"}
# The strategy that fills the rows a padding one leaves empty; the stream fills every row.
FILLS = {"pad": "bfd", "torchtune": "torchtune-split"}


def _packed_figures(op, context, strategy: str | None = None) -> dict | None:
    """What a packing did to the corpus (``Packed.to_json``), for the operating point's strategy or another."""
    packed = context.report().packed
    if packed is None or packed.packing is None:
        return None
    if strategy is None:
        return packed.packing
    from dataclasses import replace

    from ..analysis.attention import ROWS
    from ..analysis.rows import packed_rows

    return {"strategy": strategy, **packed_rows(op.seq, replace(op.packing, strategy=strategy), op.seed,
                                                ROWS).packed.to_json()}


def _past(op, context, figure: str, limit: float) -> dict | None:
    """The packing's figures when one of them is past its limit, else None."""
    found = None if op is None or op.packing is None else _packed_figures(op, context)
    return found if found is not None and found[figure] > limit else None


@rule("packing-drops-tokens", "warn", f"a packing that drops more than {DROP_SHARE:.1%} of the corpus's tokens "
      "(documents longer than a row cut to one), naming the strategy that keeps them")
def packing_drops_tokens(design: Design, op, context) -> Iterator[Diagnostic]:
    found = _past(op, context, "tokensDropped", DROP_SHARE)
    if found is None:
        return
    keeper = _packed_figures(op, context, KEEPS[op.packing.strategy])
    yield Diagnostic(
        "packing-drops-tokens", "warn",
        f"{op.packing.strategy} drops {found['tokensDropped']:.2%} of the corpus's tokens: the "
        f"{found['truncated']:.2%} of documents longer than a row ({op.seq:,} tokens) are cut to one; "
        f"{keeper['strategy']} keeps every token ({keeper['split']:.2%} of documents split, "
        f"{keeper['padding']:.2%} padding)",
        "packing.strategy",
    )


@rule("packing-pads", "warn", f"rows more than {PAD_SHARE:.0%} padding, naming the strategy that fills them")
def packing_pads(design: Design, op, context) -> Iterator[Diagnostic]:
    found = _past(op, context, "padding", PAD_SHARE)
    if found is None:
        return
    filler = _packed_figures(op, context, FILLS.get(op.packing.strategy, "stream"))
    yield Diagnostic(
        "packing-pads", "warn",
        f"{op.packing.strategy} leaves {found['padding']:.1%} of its rows ({op.seq:,} tokens) padding: a real token "
        f"carries {1 / (1 - found['padding']):.2f}x the matmul work of a full row's; {filler['strategy']} fills "
        f"them ({filler['padding']:.2%} padding, {filler['split']:.2%} of documents split, "
        f"{filler['tokensDropped']:.2%} of tokens dropped)",
        "packing.strategy",
    )
