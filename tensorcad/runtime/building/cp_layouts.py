"""The shardings the analysis counts, as layouts: which position of the row each gathered slot holds.

A layout (B or 1, L) is what a context-parallel step runs on: rank r holds
slots r·L/N .. (r+1)·L/N − 1, gathers all L keys and values in rank order, and
``-1`` marks padding, which keeps and is kept by nothing. It is the index map
PyTorch's load balancers give (``_generate_indices()``), and what
``cp_block_mask`` (the generated runtime, ``cp_masks``) builds each rank's
BlockMask from. The four shardings are those of ``analysis.context_parallel``,
laid out as it counts them (``tests/runtime/building/test_cp_layouts.py`` holds
them to PyTorch's balancers):

- ``contiguous``: slot p holds position p;
- ``headtail``: the row cut in 2N chunks, rank r holding chunks r and 2N−1−r
  (``_HeadTailLoadBalancer``);
- ``per-document``: every document piece of a row padded to a multiple of 2N
  and cut in 2N chunks, rank r holding chunk r then chunk 2N−1−r of each, in
  row order (the picture in ``_PerDocumentHeadTailLoadBalancer``'s docstring,
  and Megatron's; its own list is document-major), then its share of the
  padding that takes the row to a multiple of N × 128. Rows of a batch are
  padded to the longest, which adds padding only;
- ``ptrr``: whole 128-query blocks dealt by their count of computed key
  blocks (``counts``, (B, blocks)), largest first, in a snake
  (``_PTRRLoadBalancer``), each rank's blocks in row order.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tensorcad.analysis.context_parallel.ranks import SHARDINGS, ptrr_ranks
from tensorcad.errors import TensorcadError

BLOCK = 128


def cp_layout(documents, shard: str, world_size: int, counts=None, block: int = BLOCK) -> torch.Tensor:
    """The layout of ``shard`` over ``world_size`` ranks for rows of ``documents`` (B, T): int64 (B or 1, L)."""
    if shard not in SHARDINGS:
        raise TensorcadError("cp.shard", f"unknown sharding {shard!r} ({', '.join(SHARDINGS)})")
    documents = np.asarray(documents)
    if documents.ndim == 1:
        documents = documents[None, :]
    n, seq = world_size, documents.shape[1]
    if shard == "per-document":
        return torch.from_numpy(_per_document(documents, n, block))
    if shard == "contiguous":
        if seq % n:
            raise TensorcadError("cp.size", f"{n} ranks do not divide the row of {seq:,} tokens")
        return torch.arange(seq).unsqueeze(0)
    if shard == "headtail":
        if seq % (2 * n):
            raise TensorcadError("cp.size", f"head-tail cuts the row in 2 x {n} = {2 * n} chunks, "
                                            f"which does not divide {seq:,} tokens")
        chunks = torch.arange(seq).view(2 * n, seq // (2 * n))
        return torch.cat([torch.cat((chunks[r], chunks[2 * n - 1 - r])) for r in range(n)]).unsqueeze(0)
    if seq % (n * block):
        raise TensorcadError("cp.size", f"PTRR deals whole {block}-token blocks: {n} x {block} does not "
                                        f"divide {seq:,} tokens")
    if counts is None:
        raise TensorcadError("cp.shard", "PTRR deals query blocks by their counts of computed key blocks: "
                                         "give counts (B, blocks)")
    counts = np.asarray(counts.cpu() if isinstance(counts, torch.Tensor) else counts)
    ranks = ptrr_ranks(counts.reshape(counts.shape[0], -1), n)
    order = np.argsort(ranks, axis=1, kind="stable")  # rank 0's blocks in row order, then rank 1's, ...
    slots = order[:, :, None] * block + np.arange(block)[None, None, :]
    return torch.from_numpy(slots.reshape(len(order), -1).astype(np.int64))


def _pieces(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each run of one document id along a row."""
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    return starts, np.diff(np.r_[starts, len(row)])


def _per_document(documents: np.ndarray, n: int, block: int) -> np.ndarray:
    """Each row laid out rank by rank: chunk r then chunk 2N−1−r of every padded piece, then padding."""
    two = 2 * n
    unit = math.lcm(n * block, two)
    ranks_of_rows = []
    for row in documents:
        starts, lengths = _pieces(row)
        per_rank: list[list[np.ndarray]] = [[] for _ in range(n)]
        for start, length in zip(starts, lengths):
            c = -(-int(length) // two)
            within = np.arange(two * c).reshape(two, c)  # the piece's offsets, chunk by chunk
            for r in range(n):
                offsets = np.concatenate((within[r], within[two - 1 - r]))
                per_rank[r].append(np.where(offsets < length, start + offsets, -1))
        ranks_of_rows.append([np.concatenate(p) for p in per_rank])
    total = max(sum(len(p) for p in rows) for rows in ranks_of_rows)
    local = -(-total // unit) * unit // n
    out = np.full((len(documents), n * local), -1, dtype=np.int64)
    for b, rows in enumerate(ranks_of_rows):
        for r, slots in enumerate(rows):
            out[b, r * local: r * local + len(slots)] = slots
    return out
