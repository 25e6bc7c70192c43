"""Tiles counted from ranges equal the interval interpreter's, tile for tile.

``range_tiles.decide_from_ranges`` is the engine's fast path for masks the ranges
decide exactly; ``tiles._decide_by_intervals`` the general one. On the packing's
own rows and on hand-made ones (one-token documents, a document filling the row,
lengths not a multiple of the block), every family agrees, per row, head and
query block.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tensorcad
from tensorcad.analysis.range_tiles import decide_from_ranges
from tensorcad.analysis.rows import Rows, tensor_roles
from tensorcad.analysis.tiles import _decide_by_intervals
from tensorcad.design.block_ranges import block_ranges
from tensorcad.packing import draw

FAMILIES = {
    "document-causal": {},
    "document-window": {"window": 100},
    "document-local-window": {"causal": False, "window": 200},
    "document-bidirectional": {"causal": False},
    "per-head-windows": {"mask": "(doc(b, q) == doc(b, kv)) & (q - kv < where(h < 2, 64, 300))"},
    "sliding-window": {"window": 192, "mask": None},
    "local-window": {"causal": False, "window": 129, "mask": None},
    "causal": {"mask": None},
}


def attention(name):
    source = copy.deepcopy(tensorcad.load("nano-sort").to_dict())
    params = source["nodes"][1]["params"]["block"]["params"]["attention"]
    params.update(FAMILIES[name])
    if params.get("mask", "") is None:
        del params["mask"]
        source["nodes"][1]["in"].pop("doc")
    return tensorcad.load(source).attentions()[0][0]


def hand_made(seq: int) -> np.ndarray:
    rng = np.random.default_rng(seq)
    return np.stack([np.zeros(seq, dtype=np.int64), np.arange(seq),  # one document; one-token ones
                     np.cumsum(rng.random(seq) < 0.02), np.cumsum(rng.random(seq) < 0.3)])


@pytest.mark.parametrize("counted", ["tabulated", "searched"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("seq", [1, 127, 1000, 2048])
def test_ranges_and_intervals_agree(name, seq, counted, monkeypatch):
    # The key blocks of a row's documents are counted from a table or by binary search (by the
    # table's size): both ways, every verdict.
    from tensorcad.analysis import range_tiles

    if counted == "searched":
        monkeypatch.setattr(range_tiles, "TABLE_PER_ENTRY", 0)
        monkeypatch.setattr(range_tiles, "TABLE_FREE", 0)
    a = attention(name)
    ranges = block_ranges(a)
    assert ranges is not None
    documents = np.concatenate([draw(12, seq, 96, 1.0, seed=seq)[0], hand_made(seq)])
    batch = Rows.from_arrays(documents, None)
    block = 128
    blocks = -(-seq // block)
    heads = a.heads
    row, head, qb = (x.ravel() for x in np.meshgrid(np.arange(batch.count), np.arange(heads),
                                                    np.arange(blocks), indexing="ij"))
    keep, roles = a.keep, dict(tensor_roles(a))
    fast = decide_from_ranges(ranges, batch, row, head, qb, block, seq)
    general = _decide_by_intervals(keep, roles, batch, row, head, qb, block, seq)
    assert np.array_equal(fast[0], general[0]) and np.array_equal(fast[1], general[1])
    assert fast[0].sum() + fast[1].sum() > 0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_keys_from_ranges_equal_the_bands(name):
    # The sampler's bands, decided coarse to fine, against the run each query keeps.
    from tensorcad.analysis.attention import _kept_by_bands
    from tensorcad.analysis.range_tiles import kept_from_ranges

    a = attention(name)
    seq = 1000
    documents = np.concatenate([draw(12, seq, 96, 1.0, seed=5)[0], hand_made(seq)])
    batch = Rows.from_arrays(documents, None)
    rng = np.random.default_rng(0)
    row = np.repeat(np.arange(batch.count), 40)
    t = rng.integers(0, seq, len(row))
    head = rng.integers(0, a.heads, len(row))
    bands, _ = _kept_by_bands(a.keep, dict(tensor_roles(a)), batch, row, head, t, seq, a.causal,
                              np.random.default_rng(1))
    assert np.array_equal(kept_from_ranges(block_ranges(a), batch, row, head, t), bands)
