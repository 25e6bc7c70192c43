"""Each context-parallel rank's block mask from ranges, held to create_block_mask on the permuted mask.

For hypothesis-drawn packings (rows of the styles test_block_mask_from_ranges draws:
one-token documents, one document filling a row, ids that skip), every family of mask
the ranges decide (windows, per-head windows, bidirectional), every sharding the
analysis knows and N = 2, 4, 8: the layout comes from PyTorch's own load balancers
(``_HeadTailLoadBalancer``; ``_PerDocumentHeadTailLoadBalancer``'s list read rank by
rank over documents padded to multiples of 2N; ``_PTRRLoadBalancer`` over
create_block_mask's unsharded BlockMask; none for contiguous), and each rank's
BlockMask built by the generated module's ``cp_block_mask`` must equal
``create_block_mask`` over the mask read through that layout (``cp_mask_mod``, the
rewrite ``_create_cp_block_mask`` makes): kv_num_blocks and full_kv_num_blocks, the
same index sets, the transposed q side. ``cp_layout`` must give the same layout.
The analysis's per-rank blocks are a third decider of the same figures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_block_mask_from_ranges import (  # noqa: E402 - tests/codegen, on sys.path
    DESIGNS,
    HEADS,
    assert_same_block_mask,
    design,
    generated,
    rows_of,
)
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (  # noqa: E402
    _HeadTailLoadBalancer,
    _PerDocumentHeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

from hypothesis_profiles import scaled  # noqa: E402
from tensorcad.analysis.context_parallel.ranks import SHARDINGS, ContextParallel, row_work  # noqa: E402
from tensorcad.runtime.building.cp_layouts import cp_layout  # noqa: E402

BLOCK = 128


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


def per_document_layout(documents: torch.Tensor, size: int) -> torch.Tensor:
    """PyTorch's per-document layout of each row: its documents padded to multiples of 2N, the rows
    to one length (a multiple of N x 128), the balancer's indices read rank by rank, -1 for padding."""
    two, unit = 2 * size, math.lcm(size * BLOCK, 2 * size)
    rows = []
    for row in documents.tolist():
        source, lengths, start = [], [], 0
        for _, group in __import__("itertools").groupby(row):
            n = len(list(group))
            padded = -(-n // two) * two
            source += list(range(start, start + n)) + [-1] * (padded - n)
            lengths.append(padded)
            start += n
        rows.append((source, lengths))
    total = -(-max(len(s) for s, _ in rows) // unit) * unit
    out = []
    for source, lengths in rows:
        if total > len(source):
            lengths = lengths + [total - len(source)]
            source = source + [-1] * (total - len(source))
        listed = _PerDocumentHeadTailLoadBalancer([lengths], size, "cpu")._generate_indices()[0]
        out.append(torch.tensor(source)[_rank_major(listed.long(), lengths, size)])
    return torch.stack(out)


def torch_layout(shard: str, mask_mod, documents: torch.Tensor, size: int) -> torch.Tensor:
    """The layout PyTorch's balancer for ``shard`` gives these rows: (B or 1, L)."""
    seq = documents.shape[1]
    if shard == "contiguous":
        return torch.arange(seq).unsqueeze(0)
    if shard == "headtail":
        return _HeadTailLoadBalancer(seq, size, "cpu")._generate_indices().long()
    if shard == "per-document":
        return per_document_layout(documents, size)
    unsharded = create_block_mask(mask_mod, len(documents), None, seq, seq, device="cpu")
    return _PTRRLoadBalancer(unsharded, size)._generate_indices().long()


def ptrr_counts(mask_mod, rows: int, seq: int) -> torch.Tensor:
    """Key blocks each query block computes, from the generated runtime (rank 0 of 1, in row order)."""
    _, ns = generated("document-causal")
    whole = ns["cp_block_mask"](mask_mod, torch.arange(seq), 0, 1, rows, None)
    return (whole.kv_num_blocks + whole.full_kv_num_blocks)[:, 0]


def assert_every_rank_equals(name: str, shard: str, size: int, documents: torch.Tensor) -> list:
    """Each rank's BlockMask from ranges equals create_block_mask's; returns the ranks' masks."""
    make, ns = generated(name)
    mask_mod = make(documents)
    rows = len(documents)
    layout = torch_layout(shard, mask_mod, documents, size)
    counts = ptrr_counts(mask_mod, rows, documents.shape[1]) if shard == "ptrr" else None
    ours = cp_layout(documents.numpy(), shard, size, counts)
    assert torch.equal(ours.expand_as(layout), layout)  # one row where every row is laid out alike
    L = layout.shape[1]
    by_row = bool(getattr(mask_mod, "reads", ())) or getattr(mask_mod, "uses_batch", True) or len(layout) > 1
    B = rows if by_row else None
    H = HEADS if getattr(mask_mod, "uses_head", True) else None
    built = []
    for rank in range(size):
        ns["RUNTIME_PATHS"].clear()
        mask = ns["cp_block_mask"](mask_mod, layout, rank, size, rows, HEADS)
        assert ns["RUNTIME_PATHS"] == {"cp_block_mask": "from_ranges"}
        on_rank = ns["cp_mask_mod"](mask_mod, layout.expand(B or 1, -1), rank, size)
        reference = create_block_mask(on_rank, B, H, L // size, L, device="cpu")
        assert_same_block_mask(reference, mask)
        built.append(mask)
    return built


SCORES = 2**20  # rows x heads x L x L: what create_block_mask evaluates over every rank of one example


def fitted(documents: torch.Tensor, size: int, heads: int) -> torch.Tensor:
    """The rows cut (rows first, then length) until every rank's reference fits SCORES; under
    per-document sharding one-token documents pad to 2N slots each, so the layout can grow 2N-fold."""
    while True:
        L = per_document_layout(documents, size).shape[1]
        if len(documents) * heads * L * L <= SCORES or documents.shape[1] <= 2 * size:
            return documents
        documents = documents[:-1] if len(documents) > 1 else documents[:, : documents.shape[1] // 2]


# 20 examples (100 under -m slow), about 5 s on a quiet machine: create_block_mask, the reference,
# evaluates every score of every rank.
@settings(max_examples=scaled(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(DESIGNS)), shard=st.sampled_from(SHARDINGS), size=st.sampled_from([2, 4, 8]),
       blocks=st.integers(1, 2), chunk=st.integers(1, 160), rows=st.integers(1, 3),
       style=st.sampled_from(["random", "tokens", "whole", "skips", "mixed"]), seed=st.integers(0, 2**32 - 1))
@example(name="document-causal", shard="per-document", size=8, blocks=1, chunk=20, rows=2, style="mixed", seed=0)
@example(name="document-window", shard="headtail", size=4, blocks=1, chunk=72, rows=2, style="random", seed=1)
@example(name="per-head-windows", shard="contiguous", size=2, blocks=2, chunk=1, rows=1, style="random", seed=2)
@example(name="document-local-window", shard="ptrr", size=4, blocks=2, chunk=1, rows=2, style="mixed", seed=3)
@example(name="sliding-window", shard="per-document", size=2, blocks=1, chunk=100, rows=1, style="whole", seed=4)
@example(name="document-bidirectional", shard="ptrr", size=8, blocks=1, chunk=1, rows=1, style="tokens", seed=5)
def test_each_rank_equals_create_block_mask(name, shard, size, blocks, chunk, rows, style, seed):
    # PTRR balances one block mask for every head (PyTorch's balancer needs heads alike).
    assume(not (shard == "ptrr" and name == "per-head-windows"))
    heads = HEADS if name == "per-head-windows" else 1
    if shard in ("contiguous", "ptrr"):  # whole blocks a rank, as PyTorch's CP block mask needs
        seq = size * BLOCK * blocks
    else:  # head-tail and per-document cut any row of 2N chunks, blocks or not
        seq = 2 * size * chunk
    rows = max(1, min(rows, SCORES // (heads * seq * seq)))
    documents = rows_of(seq, rows, style, seed)
    if shard == "per-document":
        documents = fitted(documents, size, heads)
    assert_every_rank_equals(name, shard, size, documents)


@pytest.mark.parametrize("shard", SHARDINGS)
@pytest.mark.parametrize("name", ["document-causal", "document-window"])
def test_the_analysis_counts_the_same_blocks(shard, name):
    # Three deciders of each rank's work: create_block_mask (above), the generated
    # runtime's ranges, and the engine's per-rank blocks (analysis.context_parallel).
    size = 4
    documents = rows_of(1024, 3, "random", 5)
    masks = assert_every_rank_equals(name, shard, size, documents)
    engine = row_work(design(name).attentions()[0][0], documents.numpy(), ContextParallel(size, shard), BLOCK)
    per_rank = np.stack([(m.kv_num_blocks + m.full_kv_num_blocks).sum(dim=(1, 2)).numpy() for m in masks], axis=1)
    assert (engine.blocks == per_rank).all(), (engine.blocks, per_rank)


@pytest.mark.parametrize("shard", SHARDINGS)
@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_the_block_masks_own_mask_keeps_the_same_scores(name, shard):
    # Partial blocks evaluate the BlockMask's mask_mod, built from the ranges' tables: at every
    # (row, head, query, key) it keeps what the model's own mask read through the layout keeps.
    if shard == "ptrr" and name == "per-head-windows":
        pytest.skip("PTRR balances one mask for every head")
    make, ns = generated(name)
    documents = rows_of(512, 1, "mixed", 9)
    mask_mod = make(documents)
    layout = torch_layout(shard, mask_mod, documents, 4)
    S, L = layout.shape[1] // 4, layout.shape[1]
    b, h = torch.zeros(1, 1, 1, 1, dtype=torch.int64), torch.arange(HEADS).view(1, HEADS, 1, 1)
    q, kv = torch.arange(S).view(1, 1, S, 1), torch.arange(L).view(1, 1, 1, L)
    for rank in range(4):
        mask = ns["cp_block_mask"](mask_mod, layout, rank, 4, 1, HEADS)
        on_rank = ns["cp_mask_mod"](mask_mod, layout, rank, 4)
        shape = (1, HEADS, S, L)
        assert torch.equal(mask.mask_mod(b, h, q, kv).expand(shape), on_rank(b, h, q, kv).expand(shape))


def test_a_mask_without_ranges_goes_to_create_block_mask():
    _, ns = generated("document-causal")

    def even_keys(b, h, q_idx, kv_idx):  # no ranges: decided point by point
        return kv_idx % 2 == 0

    layout = torch.arange(512).view(4, 128).flip(0).reshape(1, -1)
    mask = ns["cp_block_mask"](even_keys, layout, 1, 2, 1, 1)
    assert ns["RUNTIME_PATHS"]["cp_block_mask"] == "create_block_mask"
    assert mask.shape == (1, 1, 256, 512)
    assert mask.kv_num_blocks.sum() == 2 * 4  # two query blocks, each against every key block


def test_a_layout_the_ranks_do_not_divide_is_refused():
    make, ns = generated("document-causal")
    with pytest.raises(ValueError, match="3 ranks do not divide a layout of 512 slots"):
        ns["cp_block_mask"](make(torch.zeros(1, 512, dtype=torch.int64)), torch.arange(512), 0, 3, 1, 1)
