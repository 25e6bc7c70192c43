"""The analysis's shardings as layouts: each position once, the chunks where the analysis counts them.

tests/codegen/test_cp_block_mask.py holds every layout to PyTorch's own load balancers; here
the properties each must have whatever PyTorch does: every position of a row on exactly one
slot, padding only where per-document sharding pads, the refusals in one line.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorcad.analysis.context_parallel.ranks import SHARDINGS  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.packing import draw  # noqa: E402
from tensorcad.runtime.building import cp_layout  # noqa: E402


def counts_of(documents: np.ndarray) -> np.ndarray:
    """Key blocks of each query block of a document-causal row, counted here block by block."""
    rows, seq = documents.shape
    out = np.zeros((rows, seq // 128), dtype=np.int64)
    for b in range(rows):
        for i in range(seq // 128):
            q = np.arange(i * 128, i * 128 + 128)
            first = np.searchsorted(documents[b], documents[b, q[0]])  # the first query's document start
            out[b, i] = i - first // 128 + 1
    return out


@pytest.mark.parametrize("shard", SHARDINGS)
@pytest.mark.parametrize("size", [2, 4, 8])
def test_every_position_once(shard, size):
    documents, _ = draw(3, 2048, 150, 1.0, 7)
    layout = cp_layout(documents, shard, size, counts_of(documents)).expand(3, -1)
    assert layout.shape[1] % size == 0
    for row in layout:
        real = row[row >= 0]
        assert sorted(real.tolist()) == list(range(2048))
    if shard != "per-document":
        assert (layout >= 0).all()


def test_per_document_gives_each_rank_chunk_r_and_its_mirror_of_every_document():
    # 7, 4 and 5 tokens on 2 ranks: padded to 8, 4 and 8 (chunks of 2, 1, 2), then to 24 (2 x 4-slot blocks x 3)
    documents = np.array([[0] * 7 + [1] * 4 + [2] * 5])
    layout = cp_layout(documents, "per-document", 2, block=4)[0].tolist()
    assert layout[:12] == [0, 1, 6, -1, 7, 10, 11, 12, -1, -1, -1, -1]  # chunks 0 and 3 of each
    assert layout[12:] == [2, 3, 4, 5, 8, 9, 13, 14, 15, -1, -1, -1]  # chunks 1 and 2 of each


@pytest.mark.parametrize("shard,seq,size,line", [
    ("contiguous", 1000, 3, "3 ranks do not divide the row of 1,000 tokens"),
    ("headtail", 1000, 8, "head-tail cuts the row in 2 x 8 = 16 chunks, which does not divide 1,000 tokens"),
    ("ptrr", 1024, 3, "PTRR deals whole 128-token blocks: 3 x 128 does not divide 1,024 tokens"),
])
def test_refusals_name_the_size(shard, seq, size, line):
    with pytest.raises(TensorcadError) as e:
        cp_layout(np.zeros((1, seq), dtype=np.int64), shard, size, np.ones((1, seq // 128)))
    assert e.value.path == "cp.size" and e.value.message == line
