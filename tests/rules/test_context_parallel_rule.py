"""cp-imbalance names, before launch, what PyTorch's context parallelism will do, with the figure it costs.

Three cases (docs/context-parallel.md): the default balancer becoming none on a row 2·cp
does not divide, documents 2·cp does not divide under per-document head-tail, PTRR given a
design of two masks. Each figure in a message is worked out here another way: the
contiguous chunks' work by counting blocks and scores one query block at a time, the
documents PyTorch's per-document balancer refuses from the very rows the analysis draws,
and PTRR's one layout from PyTorch's own balancer and create_block_mask.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorcad
from tensorcad.analysis.context_parallel.ranks import ContextParallel, ptrr_ranks, query_block_counts, rank_work
from tensorcad.analysis.rows import Rows
from tensorcad.packing import Packing, draw
from tensorcad.rules import check


def messages(design, op) -> list[str]:
    return [d.message for d in check(design, op) if d.rule == "cp-imbalance"]


def test_the_default_balancer_becoming_none_is_named_with_the_contiguous_chunks_imbalance():
    seq, n = 8190, 2  # 8,190 = 4 x 2,047 + 2: no four head-tail chunks
    op = tensorcad.OperatingPoint(seq=seq, cp=ContextParallel(n, "headtail"))
    # torch.chunk's pieces: 4,095 tokens a rank, each cut in 128-query blocks from its own first token;
    # a causal query block computes the key blocks 0 .. the one holding its last query.
    chunk = -(-seq // n)
    blocks, kept = [], []
    for r in range(n):
        a, b = r * chunk, min((r + 1) * chunk, seq)
        blocks.append(sum((min(s + 128, b) - 1) // 128 + 1 for s in range(a, b, 128)))
        kept.append(sum(q + 1 for q in range(a, b)))
    ratio, kept_ratio = max(blocks) / np.mean(blocks), max(kept) / np.mean(kept)
    (message,) = messages("llama-3-8b", op)
    assert message.startswith("PyTorch's default load balancer becomes none: 8,190 tokens do not divide into "
                              "2 x 2 = 4 head-tail chunks (_create_default_load_balancer), so context_parallel() "
                              "shards the row contiguously (4,095 tokens a rank) without a word")
    assert f"the slowest rank computes {ratio:.2f}x the mean rank's attention blocks ({kept_ratio:.2f}x in kept " \
           "scores); pad rows to a multiple of 4" in message
    assert message.endswith("no other sharding splits 8,190 tokens over 2 ranks")
    assert abs(ratio - 1.49) < 0.01  # the last rank's chunk sees the whole row before it


def test_documents_per_document_head_tail_cannot_take_are_named_with_their_padding():
    seq, n, mean = 16384, 8, 1000
    op = tensorcad.OperatingPoint(seq=seq, packing=Packing(mean, 1.0), cp=ContextParallel(n, "per-document"))
    documents, _ = draw(1024, seq, mean, 1.0, 0)  # the analysis's rows: 1,024 of them, seed 0
    lengths = np.concatenate([np.unique(row, return_counts=True)[1] for row in documents])
    share = float(np.mean(lengths % (2 * n) != 0))
    padding = float(np.sum(-lengths % (2 * n))) / len(documents)
    found = messages("llama-3-8b-documents", op)
    (message,) = [m for m in found if m.startswith("PyTorch's _PerDocumentHeadTailLoadBalancer")]
    assert (f"asserts that 2 x 8 = 16 divides every document, and {share:.1%} of these documents it does not "
            "(a bare AssertionError at launch)") in message
    assert f"padded to multiples of 16, as counted here, they add {padding:,.0f} tokens a row" in message
    assert "; the least predicted compute for 1000-token documents: ptrr" in message


def hybrid(window: int = 1024, local_layers: int = 5) -> tensorcad.Design:
    """Sliding-window document layers, then a global document layer: two masks, as Gemma's hybrids."""
    def stack(source: str, repeat: int, attention: dict) -> dict:
        block = {"kind": "transformer_block", "params": {"dim": 64, "norm": "rmsnorm", "attention": attention,
                                                         "mlp": {"hidden": 128, "activation": "swiglu"}}}
        return {"kind": "stack", "in": {"x": source, "doc": "documents"}, "params": {"repeat": repeat, "block": block}}

    base = {"heads": 4, "head_dim": 16, "causal": True, "mask": "doc(b, q) == doc(b, kv)"}
    return tensorcad.load({
        "name": "hybrid", "context": 32768,
        "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
        "nodes": [{"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 64, "dim": 64}},
                  {"id": "local", **stack("embed", local_layers, {**base, "window": window})},
                  {"id": "global", **stack("local", 1, base)},
                  {"id": "head", "kind": "linear", "in": {"x": "global"}, "params": {"out": 64}}],
        "output": "head"})


def test_ptrr_given_two_masks_is_named_with_the_step_on_one_layout():
    design = hybrid()
    op = tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0), cp=ContextParallel(8, "ptrr"))
    (message,) = messages(design, op)
    figures = tensorcad.analyze(design, op).cp.pytorch[0].figures
    local, global_ = (a.path for a, _ in design.attentions())
    assert message.startswith("PyTorch's _PTRRLoadBalancer balances one block mask, and this design's attentions "
                              f"keep 2: dealt by the mask of {local} (the most attention), {global_}'s slowest rank "
                              f"computes {figures['maxOverMeanByAttention'][global_]:.2f}x its mean")
    assert f"the step {figures['maxOverMean']:.2f}x the mean rank's blocks, where each mask balanced alone would " \
           f"give {figures['maxOverMeanEachAlone']:.2f}" in message
    # One layout for both costs the step: the global layers lose the balance PTRR would give them alone.
    assert figures["maxOverMean"] > figures["maxOverMeanEachAlone"] + 0.01


def test_one_ptrr_layout_is_what_pytorchs_balancer_gives_every_layer():
    # The layout dealt by the local mask's blocks, and the global mask counted on it, row by row,
    # against PyTorch: _PTRRLoadBalancer over create_block_mask of the local mask, then the global
    # mask's create_block_mask on the permuted row.
    torch = pytest.importorskip("torch")
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _PTRRLoadBalancer
    from torch.nn.attention.flex_attention import create_block_mask

    seq, n, window = 2048, 4, 256
    design = hybrid(window=window)
    local, global_ = (a for a, _ in design.attentions())
    documents, _ = draw(3, seq, 700, 1.0, 4)
    rows = Rows.from_arrays(documents)
    ranks = ptrr_ranks(query_block_counts(local, rows, 128), n)
    engine = rank_work(global_, rows, ContextParallel(n, "ptrr"), 128, ranks=ranks).blocks
    for r, row in enumerate(documents):
        doc = torch.from_numpy(row)

        def windowed(b, h, q, kv):
            return (q >= kv) & (doc[q] == doc[kv]) & (q - kv < window)

        indices = _PTRRLoadBalancer(create_block_mask(windowed, 1, None, seq, seq, device="cpu"),
                                    n)._generate_indices()[0].long()

        def global_on_layout(b, h, q, kv):
            return (indices[q] >= indices[kv]) & (doc[indices[q]] == doc[indices[kv]])

        mask = create_block_mask(global_on_layout, 1, None, seq, seq, device="cpu")
        per_block = (mask.kv_num_blocks + mask.full_kv_num_blocks)[0, 0].numpy()
        assert engine[r].tolist() == per_block.reshape(n, -1).sum(axis=1).tolist()
