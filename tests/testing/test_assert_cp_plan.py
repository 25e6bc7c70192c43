"""assert_cp_plan: a context-parallel split held to its batch, failures raised as CertificateError.

One row of three documents (7, 5 and 4 tokens) over 2 ranks, split by hand here as
Megatron's THD split does it: each document padded to a multiple of 2·cp = 4, rank r
taking chunks r and 3 − r of each, labels the next token of the same document, set
before the split. Every slot, offset and label below is written out from that layout,
not asked of the certificate.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tensorcad.testing import CertificateError, assert_cp_plan  # noqa: E402

LENGTHS = (7, 5, 4)
DOCUMENTS = torch.tensor([[d for d, n in enumerate(LENGTHS) for _ in range(n)]])
POSITIONS = torch.tensor([[p for n in LENGTHS for p in range(n)]])
IDS = torch.arange(101, 117).unsqueeze(0)  # token of position p: 101 + p
# The padded row: each slot's position, -1 padding (documents padded to 8, 8 and 4 slots).
ROW = [0, 1, 2, 3, 4, 5, 6, -1, 7, 8, 9, 10, 11, -1, -1, -1, 12, 13, 14, 15]
# Chunks r and 3 - r of each document: 2, 2 and 1 slots a chunk.
INDICES = ([0, 1, 6, 7, 8, 9, 14, 15, 16, 19], [2, 3, 4, 5, 10, 11, 12, 13, 17, 18])
LAST = {6, 11, 15}  # each document's last position predicts nothing


def label(slot: int) -> int:
    p = ROW[slot]
    return -100 if p < 0 or p in LAST else 101 + p + 1


def plan(row=ROW, labels=label):
    def split(batch, rank, world_size):
        mine = INDICES[rank]
        return {"row": row, "indices": mine, "labels": [labels(j) for j in mine],
                "input_ids": [101 + row[j] if row[j] >= 0 else 0 for j in mine],
                "position_ids": [int(POSITIONS[0, row[j]]) if row[j] >= 0 else 0 for j in mine],
                "cu_seqlens": [0, 8, 16, 20]}

    return split


BATCH = (IDS, DOCUMENTS, POSITIONS)


def test_the_right_split_passes_with_its_padding():
    result = assert_cp_plan(plan(), BATCH, 2)
    assert result.passed and result.padding == 4 and result.slots == 20


def test_padding_supervised_is_raised_naming_rank_and_slot():
    # Rank 0's slot 3 is the padded row's slot 7: padding after document 0.
    def supervising(slot):
        return 5 if slot == 7 else label(slot)

    with pytest.raises(CertificateError, match=r"the context-parallel plan loses or leaks\n"
                                               r"a callable over 2 ranks:\n"
                                               r"rank 0's labels supervise padding: its slot 3 of row 0 holds no "
                                               r"token but label 5 \(padding must be -100\)"):
        assert_cp_plan(plan(labels=supervising), BATCH, 2)


def test_a_seven_token_document_cut_to_six_is_raised_naming_the_lost_token():
    # Transformer Engine's fault: document 0's last token (position 6) made padding.
    cut = [-1 if p == 6 else p for p in ROW]
    with pytest.raises(CertificateError) as raised:
        assert_cp_plan(plan(row=cut), BATCH, 2)
    assert "document 0 of row 0 (7 tokens from position 0) has 1 token on no rank: position 6" in str(raised.value)
    assert not raised.value.report.passed
