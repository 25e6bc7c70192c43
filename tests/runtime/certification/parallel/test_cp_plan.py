"""The context-parallel shard plan certificate, on planted faults and on PyTorch's own balancers.

Each planted fault is a plan written here the way Megatron's and Transformer Engine's THD
split writes one (every document padded to a multiple of 2·cp, ``cu_seqlens`` of the padded
row, each rank's chunks r and 2·cp−1−r of every document, labels shifted within each
document before the split), with one thing broken as the reported bugs broke it. What
each must name is worked out here from the batch, not asked of the certificate: which
documents lose which positions, where the boundaries are, which rank's outputs move.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (  # noqa: E402
    _HeadTailLoadBalancer,
    _PerDocumentHeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

from tensorcad.packing import draw  # noqa: E402
from tensorcad.runtime.building.cp_layouts import cp_layout  # noqa: E402
from tensorcad.runtime.certification.parallel.certificate import check_cp_plan  # noqa: E402

PAD = 0
SEQ = 512


def batch(seed: int = 3, mean: float = 60):
    documents, positions = draw(1, SEQ, mean, 1.0, seed)
    ids = torch.randint(1, 1000, (1, SEQ), generator=torch.Generator().manual_seed(seed))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


BATCH = batch()
LENGTHS = [len(list(g)) for _, g in itertools.groupby(BATCH[1][0].tolist())]
STARTS = np.r_[0, np.cumsum(LENGTHS)[:-1]]


def thd_plan(*, round_down=False, unpadded_cu=False, shift_after=False, merge_on_rank=None):
    """A THD split (Megatron, Transformer Engine) of a one-row batch, with the fault asked for."""

    def plan(given, rank, n):
        ids, documents, positions = given
        two = 2 * n
        lengths = [len(list(g)) for _, g in itertools.groupby(documents[0].tolist())]
        padded = [(k // two if round_down else -(-k // two)) * two for k in lengths]
        row, start = [], 0
        for k, p in zip(lengths, padded):  # each document's tokens that fit, then its padding
            row += list(range(start, start + min(k, p))) + [-1] * max(0, p - k)
            start += k
        cu = np.cumsum([0] + (lengths if unpadded_cu else padded))
        if merge_on_rank == rank:
            cu = np.delete(cu, 2)  # no boundary between documents 1 and 2
        offsets = np.cumsum([0] + padded)
        indices = []
        for s, p in zip(offsets, padded):
            c = p // two
            indices += list(range(s + rank * c, s + (rank + 1) * c))
            indices += list(range(s + (two - 1 - rank) * c, s + (two - rank) * c))
        row_ids = [int(ids[0, q]) if q >= 0 else PAD for q in row]
        # The targets of the padded row, shifted within each document before the split.
        targets = [-100] * len(row)
        for j, q in enumerate(row):
            if q >= 0 and q + 1 < SEQ and documents[0, q + 1] == documents[0, q] and j + 1 < len(row) \
                    and row[j + 1] == q + 1:
                targets[j] = int(ids[0, q + 1])
        local_ids = [row_ids[j] for j in indices]
        labels = (local_ids[1:] + [-100]) if shift_after else [targets[j] for j in indices]
        return {"row": row, "indices": indices, "input_ids": local_ids, "labels": labels,
                "position_ids": [int(positions[0, row[j]]) if row[j] >= 0 else 0 for j in indices],
                "cu_seqlens": cu}

    return plan


def test_a_right_thd_split_passes():
    for n in (2, 4):
        result = check_cp_plan(thd_plan(), BATCH, n, window=40)
        assert result.passed, result.message()
        assert result.padding == sum(-k % (2 * n) for k in LENGTHS)


@pytest.mark.parametrize("n", [2, 4])
def test_a_document_rounded_down_names_the_tokens_it_loses(n):
    result = check_cp_plan(thd_plan(round_down=True), BATCH, n)
    assert not result.passed
    message = result.message()
    for d, (k, s) in enumerate(zip(LENGTHS, STARTS)):
        kept = k // (2 * n) * (2 * n)
        if kept == k:
            assert f"document {d} of row 0 (" not in message
            continue
        lost = list(range(s + kept, s + k))
        where = f"1 token on no rank: position {lost[0]}" if len(lost) == 1 else \
            f"{len(lost)} tokens on no rank: positions {lost[0]}..{lost[-1]}"
        line = f"document {d} of row 0 ({k} tokens from position {s}) has {where}"
        assert line in message
        if kept:
            assert f"(its {k} tokens rounded down to {kept}, a multiple of 2 x {n} = {2 * n})" in message


def test_unpadded_cu_seqlens_after_padding_are_named():
    n = 2
    result = check_cp_plan(thd_plan(unpadded_cu=True), BATCH, n)
    padded = sum(-(-k // (2 * n)) * 2 * n for k in LENGTHS)
    assert padded > SEQ  # the batch has documents to pad
    for r in range(n):
        assert f"rank {r}'s cu_seqlens end at {SEQ}, but the plan's rows hold {padded:,} slots" in result.message()


def test_labels_shifted_after_the_split_are_named_on_every_rank():
    result = check_cp_plan(thd_plan(shift_after=True), BATCH, 4)
    for r in range(4):
        line = next(f for f in result.failures if f.startswith(f"rank {r}'s labels at its slot"))
        assert "the labels were shifted after the split" in line


def test_a_token_on_two_ranks_is_named_with_both():
    layout = cp_layout(BATCH[1].numpy(), "headtail", 2).clone()
    twice = int(layout[0, 5])  # rank 0's slot 5, also put in rank 1's slot 300
    lost = int(layout[0, 300])
    layout[0, 300] = twice
    message = check_cp_plan(layout, BATCH, 2).message()
    assert f"row 0, position {twice}, document" in message and "is on ranks 0 and 1" in message
    assert f"has 1 token on no rank: position {lost}" in message
    # The key counted twice moves the attention of the document's later queries.
    d = int(np.searchsorted(STARTS, twice, side="right") - 1)
    assert f"(document {d} token" in message


def test_a_rank_attending_across_a_boundary_is_named_with_rank_document_and_position():
    result = check_cp_plan(thd_plan(merge_on_rank=1), BATCH, 2)
    message = result.message()
    boundary_slot = sum(-(-k // 4) * 4 for k in LENGTHS[:2])
    assert (f"rank 1's cu_seqlens have no boundary at {boundary_slot}, where row 0, position {STARTS[2]}, "
            f"document 2 token 0 begins: its attention crosses from document 1 into document 2") in message
    # Rank 1's queries of document 2 attend document 1's keys; rank 0's mask is right.
    assert {(d.rank, d.document) for d in result.differences} == {(1, 2)}
    assert "rank 1's attention at row 0, position" in message and "(document 2 token" in message


def test_pytorchs_balancers_pass():
    ids, documents, positions = BATCH
    for n in (2, 4):
        padded = [-(-k // (2 * n)) * 2 * n for k in LENGTHS]
        def causal(b, h, q, kv):
            return (q >= kv) & (documents[b, q] == documents[b, kv])
        unsharded = create_block_mask(causal, 1, None, SEQ, SEQ, device="cpu")
        for balancer in (_HeadTailLoadBalancer(SEQ, n, "cpu"), _PTRRLoadBalancer(unsharded, n),
                         _PerDocumentHeadTailLoadBalancer([padded], n, "cpu")):
            result = check_cp_plan(balancer, BATCH, n, window=64)
            assert result.passed, result.message()
            assert result.form == f"PyTorch's {type(balancer).__name__}"


def test_a_hugging_face_batch_reads_its_documents_from_position_ids():
    ids, documents, positions = BATCH
    labels = ids.clone()
    labels[positions == 0] = -100  # DataCollatorWithFlattening's labels: nothing predicts a document's first token
    hf = {"input_ids": ids, "position_ids": positions, "labels": labels}
    layout = cp_layout(documents.numpy(), "headtail", 2)
    assert check_cp_plan(layout, hf, 2).passed
    # Labels split as the collator gives them (the model shifts them later, within each rank): wrong.
    unshifted = check_cp_plan(lambda given, r, n: {"indices": layout[0, r * 256:(r + 1) * 256],
                                                    "labels": labels[0, layout[0, r * 256:(r + 1) * 256]]}, hf, 2)
    assert not unshifted.passed
    assert "rank 0's labels at its slot 0 (row 0, position 0, document 0 token 0)" in unshifted.message()


def test_a_plan_of_no_known_form_is_refused():
    with pytest.raises(TypeError, match="a plan is an index map, a PyTorch load balancer or a callable"):
        check_cp_plan(object(), BATCH, 2)
