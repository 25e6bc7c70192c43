"""The preview's overlay: which 128 x 128 blocks of the row the kernel skips, computes whole, or masks.

A block-sparse kernel (FlexAttention) visits the score matrix a block at a
time: it skips a block the mask removes entirely, computes a block it keeps
entirely, and computes and then masks a block that straddles an edge. The
verdicts are the engine's own: ``analysis.tiles.tile_verdicts`` for each
block of the sampled row (what the harness holds to FlexAttention's
``BlockMask``), and the counts ``analysis.tiles.row_tile_counts``, the
coarse-to-fine counter the report's block figures come from (without the kept
scores, which it would count score by score). A test holds the two to each other.

Every block is drawn while the row has at most ``MAX_DRAWN`` blocks a side
(32,768 tokens at 128); past that a block is under two pixels of the
preview, so only the counts are sent.
"""

from __future__ import annotations

import numpy as np

from tensorcad.analysis.tiles import row_tile_counts, tile_verdicts
from tensorcad.design.model import Attention
from tensorcad.views.preview import SampledRow

MAX_DRAWN = 256
# One letter a block, a string a query block: small to send, plain to read in a test.
SKIPPED, WHOLE, MASKED = "s", "f", "p"


def _head_index(heads_decided: int, head: int) -> int:
    """The verdicts hold one head when the mask does not read ``h``; else the preview's head."""
    return 0 if heads_decided == 1 else head


def block_overlay(attention: Attention, row: SampledRow, block: int, head: int = 0) -> dict:
    """The blocks of ``row`` as the kernel visits them: counts always, each block's verdict when drawable."""
    documents, positions = row.documents[None, :], row.positions[None, :]
    seq = len(row.documents)
    n = -(-seq // block)
    full_counts, partial_counts = row_tile_counts(attention, documents, positions, block=block)
    h = _head_index(full_counts.shape[1], head)
    whole = int(full_counts[0, h].sum())
    masked = int(partial_counts[0, h].sum())
    out = {"block": block, "blocks": n, "total": n * n,
           "counts": {"skipped": n * n - whole - masked, "whole": whole, "masked": masked},
           "drawn": n <= MAX_DRAWN, "states": None}
    if n <= MAX_DRAWN:
        full, partial = tile_verdicts(attention, documents, positions, block=block)
        h = _head_index(full.shape[1], head)
        letters = np.full((n, n), SKIPPED)
        letters[partial[0, h]] = MASKED
        letters[full[0, h]] = WHOLE
        out["states"] = ["".join(line) for line in letters]
    return out


def rank_strip(attention: Attention, row: SampledRow, cp, block: int) -> dict:
    """Which context-parallel rank holds each query block of ``row``, and the blocks each then computes.

    The engine's own assignment (``context_parallel.block_ranks``: contiguous,
    head-tail, PTRR) over its own per-query-block counts; per-document
    sharding lays the row's documents out afresh, so it has no one rank a
    query block of this row.
    """
    from tensorcad.analysis.context_parallel.ranks import block_ranks, falls_back, query_block_counts
    from tensorcad.analysis.rows import Rows
    from tensorcad.errors import TensorcadError

    out = {"size": cp.size, "shard": cp.shard, "ranks": None, "blocks": None, "reason": None}
    if cp.shard == "per-document":
        out["reason"] = "per-document sharding cuts every document in chunks: no one rank holds a query block"
        return out
    if falls_back(cp, row.documents.shape[-1]):
        out["reason"] = (f"PyTorch's default balancer becomes none here (2 x {cp.size} does not divide the row): "
                         "its contiguous chunks are not whole query blocks")
        return out
    try:
        rows = Rows.from_arrays(row.documents[None, :], row.positions[None, :])
        counts = query_block_counts(attention, rows, block)
    except TensorcadError as e:  # a mask that differs by head: PyTorch's balancers need one mask
        out["reason"] = e.message
        return out
    ranks = np.asarray(block_ranks(cp.shard, counts, cp.size))[0]
    out["ranks"] = [int(r) for r in ranks]
    out["blocks"] = [int(b) for b in np.bincount(ranks, weights=counts[0], minlength=cp.size)]
    return out
