"""What PyTorch's context parallelism will do with an operating point, said before launch.

Three things PyTorch 2.13 does (``torch.distributed.tensor.experimental.
_context_parallel``) that no balance figure shows until a run goes slowly or
stops, each a ``PyTorchCase`` with the figure it costs:

- ``default-balancer-none``: ``_create_default_load_balancer`` returns None
  unless the row divides into 2N head-tail chunks, and ``context_parallel()``
  then shards the row contiguously, silently. The report counts those
  contiguous chunks (``context_parallel.falls_back``); the cost is their
  imbalance where head-tail was asked for;
- ``per-document-undivisible``: ``_PerDocumentHeadTailLoadBalancer`` asserts
  that 2N divides every document (a bare ``AssertionError``). The report pads
  each document to a multiple of 2N, as Megatron does; the cost is that
  padding and the blocks its chunks cut;
- ``ptrr-one-mask``: ``_PTRRLoadBalancer`` takes one BlockMask, and the data is
  laid out once for every layer, so a design whose attentions keep different
  masks (sliding windows and global layers) is balanced for one of them. The
  report deals the blocks by the mask with the most attention and counts every
  other mask on that layout; the cost is the step's imbalance against each
  mask balanced alone (which PyTorch cannot do).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PyTorchCase:
    """One thing PyTorch will do here: ``case`` (its id), a sentence saying it and its cost, the figures."""

    case: str
    message: str
    figures: dict

    def to_json(self) -> dict:
        return {"case": self.case, "message": self.message, "figures": dict(self.figures)}


def default_balancer_none(size: int, seq: int, max_over_mean: float, kept: float | None) -> PyTorchCase:
    """Head-tail asked for, on a row 2N chunks do not divide: PyTorch shards it contiguously."""
    chunk = -(-seq // size)
    scores = "" if kept is None else f" ({kept:.2f}x in kept scores)"
    return PyTorchCase(
        "default-balancer-none",
        f"PyTorch's default load balancer becomes none: {seq:,} tokens do not divide into 2 x {size} = "
        f"{2 * size} head-tail chunks (_create_default_load_balancer), so context_parallel() shards the row "
        f"contiguously ({chunk:,} tokens a rank) without a word, and the slowest rank computes "
        f"{max_over_mean:.2f}x the mean rank's attention blocks{scores}; pad rows to a multiple of {2 * size}",
        {"seq": seq, "chunk": chunk, "maxOverMean": max_over_mean, "keptMaxOverMean": kept})


def per_document_undivisible(size: int, seq: int, share: float, padding: float, document_padding: float,
                             slowest_over_balanced: float) -> PyTorchCase | None:
    """Per-document head-tail on documents 2N does not divide: PyTorch's balancer refuses them."""
    if share == 0:
        return None
    return PyTorchCase(
        "per-document-undivisible",
        f"PyTorch's _PerDocumentHeadTailLoadBalancer asserts that 2 x {size} = {2 * size} divides every "
        f"document, and {share:.1%} of these documents it does not (a bare AssertionError at launch); padded "
        f"to multiples of {2 * size}, as counted here, they add {document_padding:,.0f} tokens a row "
        f"({document_padding / seq:.1%}; {padding:,.0f} with the row's own padding), and the step computes "
        f"{slowest_over_balanced:.2f}x the row's own attention blocks",
        {"undivisibleShare": share, "documentPaddingTokens": document_padding, "paddingTokens": padding,
         "slowestOverBalanced": slowest_over_balanced})


def ptrr_one_mask(masks: int, balanced_on: str, per_attention: dict[str, float], step: float,
                  alone: float) -> PyTorchCase:
    """PTRR on a design of several masks: one layout, balanced for one mask."""
    worst = max(per_attention, key=per_attention.get)
    return PyTorchCase(
        "ptrr-one-mask",
        f"PyTorch's _PTRRLoadBalancer balances one block mask, and this design's attentions keep {masks}: "
        f"dealt by the mask of {balanced_on} (the most attention), {worst}'s slowest rank computes "
        f"{per_attention[worst]:.2f}x its mean, and the step {step:.2f}x the mean rank's blocks, where each mask "
        f"balanced alone would give {alone:.2f}",
        {"masks": masks, "balancedOn": balanced_on, "maxOverMeanByAttention": dict(per_attention),
         "maxOverMean": step, "maxOverMeanEachAlone": alone})
