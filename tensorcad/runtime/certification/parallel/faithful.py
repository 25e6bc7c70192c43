"""Context-parallel faithfulness: each rank's attention over its shard, with the gathered keys, equals the unsharded.

In one process, for a plan (``cp_plan``): queries, keys and values are drawn
for every position of the batch (float64, seeded). The reference is each
document alone: its own queries against its own keys, causal and windowed as
asked (a dense mask of the batch's documents), nothing of the layout in it. Each rank then attends as it would under
context parallelism: its queries (the positions its slots hold) against every
rank's keys and values in rank order (the all-gather), through its own
BlockMask, ``cp_block_mask`` over the layout and the documents its attention
reads (its ``cu_seqlens`` where the plan gives them, else the batch's), in
the batch's own positions (causality and windows count there). The
attention is computed block by block as FlexAttention computes it (a skipped
block adds nothing, a full block every score, a partial block the scores its
mask_mod keeps), so a block the mask wrongly skips shows, and so does a key
gathered twice or not at all. Each rank's output at each of its positions must
equal the reference there: a difference names the rank, row, document and
position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building.cp_masks import cp_block_mask, document_mask

TOLERANCE = 1e-9  # float64 throughout: two orders of the same sums differ by ~1e-16
HEADS, HEAD_DIM = 1, 8  # the mask is one for every head: one head shows any fault
BLOCK = 128


@dataclass(frozen=True)
class RankDifference:
    """Rank ``rank``'s output at ``position`` of row ``row`` (document ``document``) is not the unsharded one."""

    rank: int
    row: int
    document: int
    position: int
    token: int  # the position within its document
    largest: float
    differing: int  # positions of this document on this rank beyond the tolerance

    def message(self, tolerance: float) -> str:
        return (f"rank {self.rank}'s attention at row {self.row}, position {self.position} (document "
                f"{self.document} token {self.token}) differs from the unsharded by {self.largest:.3g} "
                f"(tolerance {tolerance:g}; {self.differing} of the document's positions on the rank differ)")

    def to_json(self) -> dict:
        return {"rank": self.rank, "row": self.row, "document": self.document, "position": self.position,
                "token": self.token, "largest": self.largest, "differing": self.differing}


def _softmax_attention(q, k, v, keep) -> torch.Tensor:
    """(.., S, D) x (.., L, D) under (.., S, L) booleans; a query keeping nothing gets 0, as in FlexAttention."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~keep, float("-inf"))
    any_kept = keep.any(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~any_kept, 0.0), dim=-1).masked_fill(~keep, 0.0)
    return probs @ v


def unsharded(batch, q, k, v, causal: bool, window: int | None) -> torch.Tensor:
    """The row unsharded: each position's own document's keys, causal and windowed as asked (B, H, T, D)."""
    index = batch.document_index()
    at = torch.arange(index.shape[1])
    distance = at.view(-1, 1) - at.view(1, -1)
    keep = index[:, :, None] == index[:, None, :]
    if causal:
        keep = keep & (distance >= 0)
    if window is not None:
        keep = keep & (distance.abs() < window)
    return _softmax_attention(q, k, v, keep.unsqueeze(1))


def _computed(counts: torch.Tensor, indices: torch.Tensor, blocks: int) -> torch.Tensor:
    """(B, H, Qb, Kb) booleans: the first ``counts`` of each row's ``indices``."""
    listed = torch.arange(indices.shape[-1]) < counts.unsqueeze(-1)
    hits = torch.zeros(*indices.shape[:-1], blocks, dtype=torch.int32)
    return hits.scatter_add_(-1, indices.long(), listed.int()) > 0


def blockwise_attention(q, k, v, block_mask) -> torch.Tensor:
    """q (B, H, S, D) against k, v (B, H, L, D) through ``block_mask`` as FlexAttention computes it."""
    B, H, S, _ = q.shape
    L = k.shape[-2]
    kb = -(-L // BLOCK)
    partial = _computed(block_mask.kv_num_blocks, block_mask.kv_indices, kb)
    full = _computed(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, kb)

    def scores_of(blocks):  # blocks to scores, cut to (S, L)
        return blocks.repeat_interleave(BLOCK, -1).repeat_interleave(BLOCK, -2)[..., :S, :L]

    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(S).view(1, 1, S, 1)
    ki = torch.arange(L).view(1, 1, 1, L)
    keep = scores_of(full) | (scores_of(partial) & block_mask.mask_mod(b, h, qi, ki))
    return _softmax_attention(q, k, v, keep.expand(B, H, S, L))


def rank_documents(plan, rank: int, batch) -> torch.Tensor | None:
    """(B, T) the document of each position as rank ``rank``'s attention reads them: the segments of
    its cu_seqlens (over the plan's row) at the positions their slots hold, else the batch's own; None
    where its cu_seqlens do not describe the row (the structural check names them)."""
    from tensorcad.packing import documents_of_cu_seqlens

    cu = plan.shards[rank].cu_seqlens
    if cu is None:
        return batch.document_index()
    rows, slots = plan.row.shape
    try:
        segments = torch.as_tensor(documents_of_cu_seqlens(cu, slots, rows)).long().reshape(rows, slots)
    except TensorcadError:
        return None
    # Positions no slot holds keep their batch document (they are reported lost), shifted clear of segments.
    documents = batch.document_index() + int(segments.max()) + 1
    real = plan.row >= 0
    for b in range(rows):
        documents[b, plan.row[b][real[b]]] = segments[b][real[b]]
    return documents


def check_cp_faithful(plan, batch, *, causal: bool = True, window: int | None = None,
                      atol: float | None = None, seed: int = 0) -> tuple[list[RankDifference], float, float]:
    """(differences, largest difference, tolerance) of every rank's attention against the unsharded.

    ``plan`` and ``batch`` are ``cp_plan``'s ``Plan`` and ``CpBatch`` (which imports this module).
    """
    tolerance = TOLERANCE if atol is None else atol
    rows, seq = batch.ids.shape
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(rows, HEADS, seq, HEAD_DIM, generator=generator, dtype=torch.float64) for _ in range(3))
    reference = unsharded(batch, q, k, v, causal, window)
    # The layout in the batch's positions: the mask reads documents, causality and windows there.
    positions = plan.row.gather(1, plan.gathered())  # (B, L) the position of every gathered slot, -1 padding

    def at(x, where):  # (B, H, n, D) at positions, zero at padding
        picked = x.gather(2, where.clamp(min=0)[:, None, :, None].expand(-1, x.shape[1], -1, x.shape[3]))
        return picked * (where >= 0)[:, None, :, None]

    keys, values = at(k, positions), at(v, positions)
    index = batch.document_index()
    differences, largest = [], 0.0
    for r, shard in enumerate(plan.shards):
        documents = rank_documents(plan, r, batch)
        if documents is None:
            continue
        mask = cp_block_mask(document_mask(documents, causal=causal, window=window), positions, r,
                             len(plan.shards), rows, HEADS)
        mine = plan.row.gather(1, shard.indices)
        out = blockwise_attention(at(q, mine), keys, values, mask)
        want = reference.gather(2, mine.clamp(min=0)[:, None, :, None].expand_as(out))
        diff = torch.where(mine >= 0, (out - want).abs().amax(dim=(1, 3)), torch.zeros_like(mine, dtype=out.dtype))
        diff = torch.nan_to_num(diff, nan=math.inf)
        largest = max(largest, float(diff.max()))
        for b in range(rows):
            over = diff[b] > tolerance
            for d in torch.unique(index[b].gather(0, mine[b].clamp(min=0))[over]).tolist():
                here = over & (index[b].gather(0, mine[b].clamp(min=0)) == d)
                i = int(torch.argmax(torch.where(here, diff[b], torch.zeros_like(diff[b]))))
                p = int(mine[b, i])
                differences.append(RankDifference(r, b, d, p, int(batch.positions[b, p]), float(diff[b, i]),
                                                  int(here.sum())))
    return differences, largest, tolerance
