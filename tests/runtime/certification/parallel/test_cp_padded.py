"""Padded layouts under context parallelism: each reader of the boundaries held to the padded layout.

The plan is Transformer Engine's and Megatron's THD split at CP 4: every document padded
to a multiple of 2 x 4 = 8 (``padded_cu_seqlens_of``, laid out by ``padded_layout_of``),
each rank holding chunks r and 7 - r of every document. A planted reader computes its
values from the unpadded ``cu_seqlens`` over the padded buffer, as Megatron-LM #5243 did
for RoPE positions and NeMo-RL #2529 for a Mamba ``seq_idx``; what each must name is
worked out here from the batch, slot by slot.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorcad.packing import draw, padded_cu_seqlens_of, padded_layout_of  # noqa: E402
from tensorcad.runtime.certification import check_cp_plan  # noqa: E402

SEQ, N, MULTIPLE, IGNORE, PAD = 256, 4, 8, -100, 0


def _batch(seed: int = 5):
    documents, positions = draw(1, SEQ, 30, 1.0, seed)
    ids = torch.randint(1, 1000, (1, SEQ), generator=torch.Generator().manual_seed(seed))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


BATCH = _batch()
CU, CU_PADDED = (np.asarray(x, dtype=np.int64) for x in padded_cu_seqlens_of(BATCH[1].numpy(), MULTIPLE))
LAYOUT = padded_layout_of(CU, CU_PADDED, MULTIPLE)  # each slot's token, -1 padding


def _unpadded(j: int) -> tuple[int, int]:
    """(position, document) of padded slot j read against the *unpadded* boundaries: the planted reader."""
    d = int(np.searchsorted(CU, j, side="right") - 1)
    d = min(d, len(CU) - 2)
    return j - int(CU[d]), d


def _right(j: int) -> tuple[int, int, int, int]:
    """(position, document, label, loss mask) at padded slot j, from the batch."""
    q = int(LAYOUT[j])
    if q < 0:
        return 0, 0, IGNORE, 0
    ids, documents, positions = BATCH
    d = int(np.searchsorted(CU, q, side="right") - 1)
    last = q + 1 == int(CU[d + 1])
    return int(positions[0, q]), d, IGNORE if last else int(ids[0, q + 1]), 0 if last else 1


def thd(reader: str | None = None):
    """The THD split as a callable plan; ``reader`` names the one that reads the unpadded boundaries."""

    def plan(given, rank, n):
        ids = given[0]
        two = 2 * n
        indices = []
        for start, end in zip(CU_PADDED[:-1], CU_PADDED[1:]):
            c = (end - start) // two
            indices += list(range(start + rank * c, start + (rank + 1) * c))
            indices += list(range(start + (two - 1 - rank) * c, start + (two - rank) * c))
        right = [_right(j) for j in indices]
        wrong = [_unpadded(j) for j in indices]
        out = {"row": LAYOUT.tolist(), "indices": indices,
               "input_ids": [int(ids[0, LAYOUT[j]]) if LAYOUT[j] >= 0 else PAD for j in indices],
               "position_ids": [w[0] if reader == "position_ids" else r[0] for r, w in zip(right, wrong)],
               "seq_idx": [w[1] if reader == "seq_idx" else r[1] for r, w in zip(right, wrong)],
               "labels": [r[2] for r in right], "loss_mask": [r[3] for r in right],
               "cu_seqlens": CU, "cu_seqlens_padded": CU_PADDED}
        if reader == "loss_mask":  # supervised wherever the unpadded boundaries see a next token
            out["loss_mask"] = [int(j + 1 < CU[-1] and _unpadded(j + 1)[1] == _unpadded(j)[1]) for j in indices]
        if reader == "cu_seqlens_padded":
            out["cu_seqlens_padded"] = CU
        return out

    return plan


def test_the_clean_padded_plan_passes_and_counts_its_padding():
    lengths = np.diff(CU)
    assert (lengths % MULTIPLE != 0).sum() >= 3  # documents that need padding
    result = check_cp_plan(thd(), BATCH, N, pad_multiple=MULTIPLE)
    assert result.passed, result.message()
    assert result.padding == int((-lengths % MULTIPLE).sum()) == int((LAYOUT < 0).sum())
    assert result.padded_documents == int((lengths % MULTIPLE != 0).sum())
    assert result.multiple == MULTIPLE
    assert (f"{result.padding:,} padding slots of {int(CU_PADDED[-1]):,} a row ({result.padded_documents} "
            f"documents padded to a multiple of {MULTIPLE})") in result.message()


def _first_wrong(rank: int, reader: str) -> tuple[int, int, int, int]:
    """(slot, document, got, want): the rank's first slot whose reader differs, worked out here."""
    shard = thd(reader)(BATCH, rank, N)
    got, right = shard[reader], thd()(BATCH, rank, N)[reader]
    for i, (g, w) in enumerate(zip(got, right)):
        if g != w and LAYOUT[shard["indices"][i]] >= 0:
            return i, _right(shard["indices"][i])[1], g, w
    raise AssertionError("the planted reader changes nothing")


@pytest.mark.parametrize("reader", ["position_ids", "seq_idx"])
def test_a_reader_of_the_unpadded_boundaries_fails_naming_the_reader_and_the_document(reader):
    result = check_cp_plan(thd(reader), BATCH, N, pad_multiple=MULTIPLE)
    assert not result.passed
    for rank in range(N):
        slot, document, got, want = _first_wrong(rank, reader)
        line = next(f for f in result.failures if f.startswith(f"rank {rank}'s {reader} at its slot {slot} ("))
        assert f"document {document} token" in line and f"): {got}, where the batch has {want}" in line
        assert f"the unpadded boundaries read over the padded layout: {reader} must read cu_seqlens_padded" in line
    # the first document after the first padding is where every rank first goes wrong (Megatron-LM #5243)
    first_padded = int(np.flatnonzero(np.diff(CU) % MULTIPLE)[0])
    assert f"document {first_padded + 1} token" in next(f for f in result.failures if f.startswith("rank 0's"))


def test_megatron_5243_positions_restart_where_they_should_count_on():
    """Rank 0's positions of the first document after padding: [0, 3, 0, 3]-like restarts where the batch counts on."""
    shard, right = thd("position_ids")(BATCH, 0, N), thd()(BATCH, 0, N)
    d = int(np.flatnonzero(np.diff(CU) % MULTIPLE)[0]) + 1
    mine = [i for i, j in enumerate(shard["indices"]) if LAYOUT[j] >= 0 and _right(j)[1] == d]
    assert [right["position_ids"][i] for i in mine] != [shard["position_ids"][i] for i in mine]


def test_a_loss_mask_of_the_unpadded_boundaries_supervises_padding():
    result = check_cp_plan(thd("loss_mask"), BATCH, N, pad_multiple=MULTIPLE)
    assert not result.passed
    assert any(f.startswith("rank 0's loss_mask at its slot") for f in result.failures), result.failures


def test_unpadded_boundaries_given_as_the_padded_ones_are_named():
    result = check_cp_plan(thd("cu_seqlens_padded"), BATCH, N)
    assert any("rank 0's cu_seqlens_padded end at" in f for f in result.failures)


def test_a_document_padded_to_another_multiple_is_named():
    result = check_cp_plan(thd(), BATCH, N, pad_multiple=16)
    bad = [d for d, k in enumerate(np.diff(CU_PADDED)) if k % 16]
    assert bad
    k = int(np.diff(CU_PADDED)[bad[0]])
    assert (f"document {bad[0]} of row 0 ({int(np.diff(CU)[bad[0]])} tokens) is given {k} slots, not a multiple "
            f"of 16") in result.failures


def test_the_docs_quote_this_batchs_messages():
    """docs/context-parallel.md quotes the clean plan's count and the planted positions' first line for this batch."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[4] / "docs" / "context-parallel.md").read_text()
    section = page[page.index("### Padded layouts"):]
    clean = check_cp_plan(thd(), BATCH, N, pad_multiple=MULTIPLE).message()
    counted = re.search(r'"(\d+ padding slots of [\d,]+ a row \(\d+ documents padded to a multiple of 8\))"',
                        " ".join(section.split()))
    assert counted and counted.group(1) in clean
    quoted = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    planted = check_cp_plan(thd("position_ids"), BATCH, N, pad_multiple=MULTIPLE)
    assert " ".join(quoted.split()) == " ".join(planted.failures[0].split())
