"""Each rank's work under context parallelism, held to PyTorch's own load balancers, on CPU.

For each drawn row: take the balancer's reorder indices (``_HeadTailLoadBalancer``,
``_PerDocumentHeadTailLoadBalancer``, ``_PTRRLoadBalancer``; none for contiguous),
build FlexAttention's ``BlockMask`` of the reordered row with ``create_block_mask``
(the mask_mod reads the original positions through the indices, as
``_create_cp_block_mask`` rewrites it), and count the blocks of each rank's slice
of query blocks; kept scores from ``create_mask``, the dense mask itself. The
engine's per-rank figures must equal them row by row, and its expectation (the
report's ``maxOverMean`` over its 1,024 stratified rows) must lie within the
sampler's error of the mean over 256 other rows (``-m slow``).

PyTorch 2.13's per-document balancer lists its indices document by document
(each document's rank-0 head and tail, rank-1 head and tail, ...), while its
docstring draws, and Megatron's THD split does, rank by rank. Cut contiguously,
as ``_context_parallel_shard`` cuts every buffer, the document-major list puts
whole documents on rank 0. The sharding modelled (and documented) is the one
its docstring draws: each rank's slice of every document, taken from PyTorch's
own list (``_rank_major``). ``test_per_document_indices_are_document_major``
pins the reading, so a change upstream shows here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (  # noqa: E402
    _HeadTailLoadBalancer,
    _PerDocumentHeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import create_block_mask, create_mask  # noqa: E402

import tensorcad  # noqa: E402
from tensorcad.analysis.context_parallel.ranks import ContextParallel, row_work  # noqa: E402
from tensorcad.analysis.report import analyze  # noqa: E402
from tensorcad.packing import Packing, draw  # noqa: E402

DESIGN = tensorcad.load("llama-3-8b-documents")
LLAMA = DESIGN.attentions()[0][0]
BLOCK = 128


def _padded(documents: np.ndarray, size: int) -> tuple[np.ndarray, list[int]]:
    """The row laid out for per-document sharding: each document padded (id -1) to a multiple
    of 2N, then a document of padding to a multiple of N x 128; and the padded lengths."""
    two = 2 * size
    ids, lengths = [], []
    _, starts, counts = np.unique(documents, return_index=True, return_counts=True)
    for d, (start, n) in enumerate(zip(starts, counts)):
        padded = -(-int(n) // two) * two
        ids += [d] * int(n) + [-1] * (padded - int(n))
        lengths.append(padded)
    unit = math.lcm(size * BLOCK, two)
    extra = -len(ids) % unit
    if extra:
        ids += [-1] * extra
        lengths.append(extra)
    return np.array(ids), lengths


def _rank_major(indices: torch.Tensor, lengths: list[int], size: int) -> torch.Tensor:
    """PyTorch's per-document list regrouped rank by rank: each document's 2c entries for rank r."""
    parts: list[list[torch.Tensor]] = [[] for _ in range(size)]
    start = 0
    for length in lengths:
        chunk = length // (2 * size)
        for r in range(size):
            parts[r].append(indices[start + 2 * r * chunk: start + 2 * (r + 1) * chunk])
        start += length
    return torch.cat([torch.cat(p) for p in parts])


def torch_ranks(documents: np.ndarray, size: int, shard: str, kept: bool = True, window: int | None = None):
    """(blocks, kept) of each rank for one row, from PyTorch's balancers and BlockMask
    (kept None unless asked: the dense mask is the slow part)."""
    if shard == "per-document":
        ids, lengths = _padded(documents, size)
        balancer = _PerDocumentHeadTailLoadBalancer([lengths], size, "cpu")
        indices = _rank_major(balancer._generate_indices()[0], lengths, size)
    else:
        ids = documents
    seq = len(ids)
    doc = torch.from_numpy(ids)

    def document_causal(b, h, q, kv):
        keep = (q >= kv) & (doc[q] == doc[kv]) & (doc[q] >= 0)
        return keep if window is None else keep & (q - kv < window)

    if shard == "contiguous":
        indices = torch.arange(seq)
    elif shard == "headtail":
        indices = _HeadTailLoadBalancer(seq, size, "cpu")._generate_indices()[0]
    elif shard == "ptrr":
        original = create_block_mask(document_causal, 1, None, seq, seq, device="cpu", BLOCK_SIZE=BLOCK)
        indices = _PTRRLoadBalancer(original, size)._generate_indices()[0]
    indices = indices.long()

    def reordered(b, h, q, kv):
        return document_causal(b, h, indices[q], indices[kv])

    mask = create_block_mask(reordered, 1, None, seq, seq, device="cpu", BLOCK_SIZE=BLOCK)
    per_block = (mask.kv_num_blocks + mask.full_kv_num_blocks)[0, 0].numpy()
    blocks = per_block.reshape(size, -1).sum(axis=1)
    if not kept:
        return blocks, None
    dense = create_mask(reordered, 1, 1, seq, seq, device="cpu")[0, 0]
    return blocks, dense.sum(dim=1).reshape(size, -1).sum(dim=1).numpy().astype(np.float64)


def test_per_document_indices_are_document_major():
    # The docstring's example: documents of 4, 8 and 4 tokens on 2 ranks.
    lengths = [4, 8, 4]
    listed = _PerDocumentHeadTailLoadBalancer([lengths], 2, "cpu")._generate_indices()[0]
    assert listed.tolist() == [0, 3, 1, 2, 4, 5, 10, 11, 6, 7, 8, 9, 12, 15, 13, 14]
    # Rank by rank it is the docstring's picture: rank 0 holds 0, 3, 4, 5, 10, 11, 12, 15.
    assert _rank_major(listed, lengths, 2).tolist() == [0, 3, 4, 5, 10, 11, 12, 15,
                                                        1, 2, 6, 7, 8, 9, 13, 14]


# (shard, size, seq, mean, spread, rows, seed): every sharding, fixed and gamma lengths.
CASES = [
    ("contiguous", 4, 1024, 256, 1.0, 6, 1),
    ("headtail", 4, 1024, 200, 1.0, 6, 2),
    ("headtail", 2, 1024, 512, 0.0, 4, 3),
    ("per-document", 4, 1024, 150, 1.0, 6, 4),
    ("per-document", 2, 1024, 300, 0.0, 4, 5),
    ("per-document", 8, 2048, 700, 1.5, 3, 6),
    ("ptrr", 4, 1024, 180, 1.0, 6, 7),
    ("ptrr", 8, 2048, 512, 2.0, 3, 8),
]


@pytest.mark.parametrize("shard,size,seq,mean,spread,rows,seed", CASES)
def test_each_rank_equals_pytorch_row_by_row(shard, size, seq, mean, spread, rows, seed):
    documents, _ = draw(rows, seq, mean, spread, seed)
    engine = row_work(LLAMA, documents, ContextParallel(size, shard), BLOCK)
    for r in range(rows):
        blocks, kept = torch_ranks(documents[r], size, shard)
        assert engine.blocks[r].tolist() == blocks.tolist(), (r, engine.blocks[r], blocks)
        assert engine.kept[r].tolist() == kept.tolist(), (r, engine.kept[r], kept)


def _windowed(window: int):
    nodes = []
    for n in DESIGN.source["nodes"]:
        if n["id"] == "layers":
            block = n["params"]["block"]
            attention = {**block["params"]["attention"], "window": window}
            n = {**n, "params": {**n["params"], "block": {**block, "params": {**block["params"],
                                                                                "attention": attention}}}}
        nodes.append(n)
    return tensorcad.load({**DESIGN.source, "nodes": nodes}).attentions()[0][0]


@pytest.mark.parametrize("shard", ["contiguous", "headtail", "per-document", "ptrr"])
def test_sliding_window_within_documents_equals_pytorch(shard):
    documents, _ = draw(3, 1024, 400, 1.0, 9)
    engine = row_work(_windowed(200), documents, ContextParallel(4, shard), BLOCK)
    for r in range(len(documents)):
        blocks, kept = torch_ranks(documents[r], 4, shard, window=200)
        assert engine.blocks[r].tolist() == blocks.tolist()
        assert engine.kept[r].tolist() == kept.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("shard", ["contiguous", "headtail", "per-document", "ptrr"])
def test_expectation_within_the_samplers_error_of_256_rows(shard):
    size, seq, mean, spread = 4, 1024, 200, 1.0
    op = tensorcad.OperatingPoint(seq=seq, packing=Packing(mean, spread), cp=ContextParallel(size, shard))
    report = analyze(DESIGN, op).cp
    documents, _ = draw(256, seq, mean, spread, seed=11)  # other rows than the engine's
    top, mean_rank = [], []
    for row in documents:
        blocks, _ = torch_ranks(row, size, shard, kept=False)
        top.append(blocks.max())
        mean_rank.append(blocks.mean())
    top, mean_rank = np.array(top, float), np.array(mean_rank, float)
    ratio = top.mean() / mean_rank.mean()
    error = (top - ratio * mean_rank).std(ddof=1) / (np.sqrt(len(top)) * mean_rank.mean())
    combined = math.hypot(error, report.max_over_mean_error)
    assert abs(report.max_over_mean - ratio) <= 3 * combined, (report.max_over_mean, ratio, combined)
