"""The report's ``contextParallel`` section: each rank's work, the step's imbalance, the cost.

The figures are means over the rows the rest of the analysis draws
(``rows.packed_rows``, the same seed), each row split by the operating
point's sharding (``context_parallel.rank_work``):

- ``ranks``: each rank's kept scores and computed blocks a row, per layer
  (layer-weighted over the design's attentions);
- ``maxOverMean``: E[max over ranks] / E[mean over ranks] of the attention
  FLOPs in whole blocks, the step's imbalance (the step waits for the
  slowest rank), with the sampler's standard error (delta method over rows);
  ``keptMaxOverMean`` the same for kept scores, where they are exact;
- ``paddingTokens``: tokens a row the sharding adds (per-document only), of
  which ``documentPaddingTokens`` take documents to multiples of 2N and the
  rest the row to a multiple of N x 128;
- ``kvGatherBytesPerLayer``: keys and values a rank receives from the
  other N-1 ranks in one layer's all-gather (training dtype);
- ``slowestOverBalanced``: N x the slowest rank's attention over the row's
  own (unsharded) attention, both in whole blocks. The step's forward FLOPs
  a token are the matmuls on every token held (padding included) plus the
  packed attention times this factor; training time and cost count from it;
- ``pytorch``: what PyTorch will do here that the figures above already count
  and a launch would only show later (``context_parallel_pytorch``).

Under PTRR the data is laid out once for every layer, as PyTorch's balancer
lays it out: the query blocks are dealt by the mask with the most attention,
and a design's other masks are counted on that layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..attention import ROWS
from .ranks import ContextParallel, falls_back, ptrr_ranks, query_block_counts, rank_work
from .pytorch import PyTorchCase, default_balancer_none, per_document_undivisible, ptrr_one_mask
from ..cost import attention_flops, train_flops
from ..rows import packed_rows


@dataclass(frozen=True)
class ContextParallelReport:
    cp: ContextParallel
    kept: tuple[float, ...] | None  # a rank's kept scores a row, per layer
    blocks: tuple[float, ...]  # a rank's computed blocks a row, per layer
    max_over_mean: float
    max_over_mean_error: float
    kept_max_over_mean: float | None
    padding_tokens: float
    document_padding_tokens: float  # of padding_tokens, what documents take to multiples of 2N
    seq: int
    kv_gather_bytes_per_layer: float
    slowest_over_balanced: float
    train_per_token: float
    pytorch: tuple[PyTorchCase, ...] = ()

    def to_json(self) -> dict:
        ranks = [{"rank": r, "keptScores": None if self.kept is None else self.kept[r], "blocks": b}
                 for r, b in enumerate(self.blocks)]
        return {
            "size": self.cp.size,
            "shard": self.cp.shard,
            "ranks": ranks,
            "maxOverMean": self.max_over_mean,
            "maxOverMeanError": self.max_over_mean_error,
            "keptMaxOverMean": self.kept_max_over_mean,
            "paddingTokens": self.padding_tokens,
            "paddingShare": self.padding_tokens / self.seq,
            "documentPaddingTokens": self.document_padding_tokens,
            "kvGatherBytesPerLayer": self.kv_gather_bytes_per_layer,
            "slowestOverBalanced": self.slowest_over_balanced,
            "trainPerToken": self.train_per_token,
            "pytorch": [case.to_json() for case in self.pytorch],
        }


def _ratio_of_means(top: np.ndarray, bottom: np.ndarray) -> tuple[float, float]:
    """E[top]/E[bottom] over rows and its standard error (delta method)."""
    ratio = float(top.mean() / bottom.mean())
    if len(top) < 2:
        return ratio, 0.0
    residual = top - ratio * bottom
    return ratio, float(residual.std(ddof=1) / (np.sqrt(len(top)) * bottom.mean()))


def _mask_of(attention) -> tuple:
    """What makes two attentions' block masks the same: the kept-score expression and its tensors' roles."""
    from ..rows import tensor_roles

    return attention.keep, tuple(sorted(tensor_roles(attention).items()))


def _ptrr_layout(design, op, packing_of) -> tuple[np.ndarray, str, int] | None:
    """(rank of each query block, the attention balanced on, distinct masks) when PTRR meets several masks."""
    attentions = design.attentions()
    masks = {_mask_of(a) for a, _ in attentions}
    if len(masks) < 2:
        return None
    weights: dict = {}
    counts = {}
    for a, layers in attentions:
        c = query_block_counts(a, packed_rows(op.seq, packing_of(a), op.seed, ROWS), op.block)
        counts[_mask_of(a)] = (a.path, c)
        weights[_mask_of(a)] = weights.get(_mask_of(a), 0.0) + layers * attention_flops(1.0, a.flops_dim, a.heads) \
            * float(c.sum())
    path, heaviest = counts[max(weights, key=weights.get)]
    return ptrr_ranks(heaviest, op.cp.size), path, len(masks)


def _step(design, op, packing_of, ranks) -> tuple[np.ndarray, dict[str, float]]:
    """(rows, N) block FLOPs of the step, and each attention's own max/mean, under these PTRR ranks."""
    flops, each = 0.0, {}
    for a, layers in design.attentions():
        work = rank_work(a, packed_rows(op.seq, packing_of(a), op.seed, ROWS), op.cp, op.block, ranks=ranks)
        flops = flops + layers * attention_flops(1.0, a.flops_dim, a.heads) * work.blocks
        each[a.path] = float(work.blocks.max(axis=1).mean() / work.blocks.mean())
    return np.asarray(flops), each


def context_parallel_report(design, op, matmul: float, attention_fwd: float, packing_of,
                            dtype_bytes: float) -> ContextParallelReport:
    """The section for ``op.cp``; ``packing_of(attention)`` is the packing that attention sees
    (None where its mask reads no documents), ``attention_fwd`` the packed attention FLOPs a token."""
    cp, block, n = op.cp, op.block, op.cp.size
    rank_flops = kept_flops = base = 0.0
    kept_layers: np.ndarray | None = np.zeros(n)
    block_layers = np.zeros(n)
    layers_total = 0
    gathered = 0.0
    tokens = None
    document_padding = 0.0
    undivisible = None
    shared = _ptrr_layout(design, op, packing_of) if cp.shard == "ptrr" else None
    for a, layers in design.attentions():
        rows = packed_rows(op.seq, packing_of(a), op.seed, ROWS)
        work = rank_work(a, rows, cp, block, ranks=None if shared is None else shared[0])
        per_score = layers * attention_flops(1.0, a.flops_dim, a.heads)
        rank_flops = rank_flops + per_score * block * block * work.blocks
        base = base + per_score * block * block * query_block_counts(a, rows, block).sum(axis=1)
        block_layers += layers * work.blocks.mean(axis=0)
        if work.kept is None or kept_layers is None:
            kept_layers = None
        else:
            kept_layers += layers * work.kept.mean(axis=0)
            kept_flops = kept_flops + per_score * work.kept
        layers_total += layers
        tokens = work.tokens if tokens is None else np.maximum(tokens, work.tokens)
        if work.document_padding is not None:
            document_padding = float(work.document_padding.mean())
            undivisible = float(work.undivisible.sum() / work.pieces.sum())
        # A rank receives the other ranks' keys and values (2 x kv_heads x head_dim a token; a latent
        # attention's latent, what its cache holds too).
        gathered += layers * (n - 1) / n * float(work.tokens.mean()) * a.cache_numbers * dtype_bytes
    top = np.asarray(rank_flops).max(axis=1)
    ratio, error = _ratio_of_means(top, np.asarray(rank_flops).mean(axis=1))
    kept_ratio = None
    if kept_layers is not None:
        kept_ratio, _ = _ratio_of_means(np.asarray(kept_flops).max(axis=1), np.asarray(kept_flops).mean(axis=1))
    slowest = float(n * top.mean() / np.asarray(base).mean())
    held = float(tokens.mean())
    forward = matmul * held / op.seq + attention_fwd * slowest
    cases = []
    if falls_back(cp, op.seq):
        cases.append(default_balancer_none(n, op.seq, ratio, kept_ratio))
    if undivisible is not None:
        cases.append(per_document_undivisible(n, op.seq, undivisible, held - op.seq, document_padding, slowest))
    if shared is not None:
        alone, _ = _step(design, op, packing_of, None)
        _, each = _step(design, op, packing_of, shared[0])
        cases.append(ptrr_one_mask(shared[2], shared[1], each, ratio, float(alone.max(axis=1).mean() / alone.mean())))
    return ContextParallelReport(
        cp=cp,
        kept=None if kept_layers is None else tuple(float(x) for x in kept_layers / layers_total),
        blocks=tuple(float(x) for x in block_layers / layers_total),
        max_over_mean=ratio, max_over_mean_error=error, kept_max_over_mean=kept_ratio,
        padding_tokens=held - op.seq, document_padding_tokens=document_padding, seq=op.seq,
        kv_gather_bytes_per_layer=gathered / layers_total,
        slowest_over_balanced=slowest,
        train_per_token=train_flops(forward),
        pytorch=tuple(c for c in cases if c is not None),
    )
