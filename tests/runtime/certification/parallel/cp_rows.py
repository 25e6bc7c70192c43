"""Batches small enough to lay out by hand, and plans written slot by slot, for the CP plan certificate's tests.

``ONE`` is one row of two documents (3 and 5 tokens), ``TWO`` adds a second row of
three (4, 2 and 2); the token at row b, position p is 100 + 10·b + p + 1.
"""

from __future__ import annotations

import torch


def hand_batch(*rows: tuple[int, ...]):
    documents = torch.tensor([[d for d, n in enumerate(lengths) for _ in range(n)] for lengths in rows])
    positions = torch.tensor([[p for n in lengths for p in range(n)] for lengths in rows])
    ids = torch.tensor([[101 + 10 * b + p for p in range(documents.shape[1])] for b in range(len(rows))])
    return ids, documents, positions


ONE = hand_batch((3, 5))
TWO = hand_batch((3, 5), (4, 2, 2))


def split(indices, **per_rank):
    """A callable plan: rank r gets ``indices[r]`` and, for each key, ``per_rank[key][r]`` (None: left out)."""

    def plan(batch, rank, world_size):
        part = {"indices": indices[rank]}
        for key, values in per_rank.items():
            value = values[rank] if isinstance(values, tuple) else values
            if value is not None:
                part[key] = value
        return part

    return plan
