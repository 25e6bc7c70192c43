"""Every sharding against a brute force of its own definition, on random small rows (hypothesis).

The brute force lays the row out as the ranks hold it (index arrays written
from the definitions in docs/context-parallel.md, not from the engine),
evaluates the document-causal mask at every (query, key) of the reordered
row, and counts each rank's non-empty block x block tiles and kept scores.
Small blocks (8 to 32 tokens) make small rows meet many of them; PyTorch's
own balancers, at 128, are in test_context_parallel_torch.py.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_profiles import scaled  # tests/: the profile's example counts

import tensorcad
from tensorcad.analysis.context_parallel.ranks import ContextParallel, row_work

LLAMA = tensorcad.load("llama-3-8b-documents").attentions()[0][0]


def _pieces_to_ids(lengths: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(lengths)), lengths)


def brute_force(lengths: list[int], size: int, shard: str, block: int,
                window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, kept) of each rank, from the dense mask of the row as the ranks hold it."""
    ids = _pieces_to_ids(lengths)
    seq = len(ids)
    if shard == "per-document":
        padded_ids, starts, chunks = [], [], []
        for d, n in enumerate(lengths):
            p = -(-n // (2 * size)) * (2 * size)
            starts.append(len(padded_ids))
            chunks.append(p // (2 * size))
            padded_ids += [d] * n + [-1] * (p - n)
        extra = -len(padded_ids) % math.lcm(size * block, 2 * size)
        if extra:
            starts.append(len(padded_ids))
            chunks.append(extra // (2 * size))
            padded_ids += [-1] * extra
        ids, seq = np.array(padded_ids), len(padded_ids)
        order = [s + k * c + j for r in range(size) for s, c in zip(starts, chunks)
                 for k in (r, 2 * size - 1 - r) for j in range(c)]
    elif shard == "contiguous":
        order = list(range(seq))
    elif shard == "headtail":
        k = seq // (2 * size)
        order = [c * k + j for r in range(size) for c in (r, 2 * size - 1 - r) for j in range(k)]
    order = np.array(order) if shard != "ptrr" else None
    q, kv = np.arange(seq)[:, None], np.arange(seq)[None, :]
    mask = (q >= kv) & (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0)
    if window is not None:
        mask &= q - kv < window
    if shard == "ptrr":
        tiles = mask.reshape(seq // block, block, seq // block, block).any(axis=(1, 3)).sum(axis=1)
        # Largest first (ties by position), dealt 0..N-1 then N-1..0.
        ranked = sorted(range(len(tiles)), key=lambda i: (-tiles[i], i))
        owner = {}
        for k, i in enumerate(ranked):
            slot = k % size
            owner[i] = slot if (k // size) % 2 == 0 else size - 1 - slot
        order = np.array([i * block + j for r in range(size) for i in sorted(b for b in owner if owner[b] == r)
                          for j in range(block)])
    held = mask[order][:, order]
    tiles = held.reshape(seq // block, block, seq // block, block).any(axis=(1, 3)).sum(axis=1)
    blocks = tiles.reshape(size, -1).sum(axis=1)
    kept = held.sum(axis=1).reshape(size, -1).sum(axis=1).astype(np.float64)
    return blocks, kept


@st.composite
def rows(draw, shard: str):
    size = draw(st.sampled_from([1, 2, 3, 4, 8]))
    block = draw(st.sampled_from([8, 16, 32]))
    unit = 2 * size * block if shard == "headtail" else size * block
    seq = unit * draw(st.integers(1, max(1, 384 // unit)))
    lengths, left = [], seq
    while left:
        n = min(left, draw(st.integers(1, max(1, seq // 2))))
        lengths.append(n)
        left -= n
    return lengths, size, block


@settings(max_examples=scaled(60))
@given(st.sampled_from(["contiguous", "headtail", "per-document", "ptrr"]).flatmap(
    lambda shard: st.tuples(st.just(shard), rows(shard))))
def test_every_sharding_equals_its_brute_force(case):
    shard, (lengths, size, block) = case
    engine = row_work(LLAMA, _pieces_to_ids(lengths)[None, :], ContextParallel(size, shard), block)
    blocks, kept = brute_force(lengths, size, shard, block)
    assert engine.blocks[0].tolist() == blocks.tolist()
    assert engine.kept[0].tolist() == kept.tolist()


_WINDOWED = {}


def _windowed(window: int):
    if window not in _WINDOWED:
        source = tensorcad.load("llama-3-8b-documents").source
        nodes = []
        for n in source["nodes"]:
            if n["id"] == "layers":
                block = n["params"]["block"]
                attention = {**block["params"]["attention"], "window": window}
                n = {**n, "params": {**n["params"], "block": {**block, "params": {**block["params"],
                                                                                    "attention": attention}}}}
            nodes.append(n)
        _WINDOWED[window] = tensorcad.load({**source, "nodes": nodes}).attentions()[0][0]
    return _WINDOWED[window]


@settings(max_examples=scaled(60))
@given(st.sampled_from(["contiguous", "headtail", "per-document", "ptrr"]).flatmap(
    lambda shard: st.tuples(st.just(shard), rows(shard))), st.integers(1, 200))
def test_sliding_windows_equal_their_brute_force(case, window):
    shard, (lengths, size, block) = case
    engine = row_work(_windowed(window), _pieces_to_ids(lengths)[None, :], ContextParallel(size, shard), block)
    blocks, kept = brute_force(lengths, size, shard, block, window)
    assert engine.blocks[0].tolist() == blocks.tolist()
    assert engine.kept[0].tolist() == kept.tolist()
