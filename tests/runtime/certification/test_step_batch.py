"""A batch dict read for the step certificates: where documents begin, the labels' shift, micro-batches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from step_models import batch_of  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step_batch import IGNORE_INDEX, read_batch, split_batch  # noqa: E402

LENGTHS = [[3, 5, 2], [4, 6]]  # two rows of 10 tokens


def test_documents_come_from_each_key_a_collator_writes():
    batch = batch_of(LENGTHS)
    want = batch["documents"]
    seq_idx = want.to(torch.int32)
    cu = torch.tensor([0, 3, 8, 10, 14, 20], dtype=torch.int32)
    for keys in ({"documents": want}, {"seq_idx": seq_idx}, {"cu_seq_lens_q": cu}, {"position_ids": batch["position_ids"]}):
        read = read_batch({"input_ids": batch["input_ids"], "labels": batch["labels"], **keys})
        assert torch.equal(read.documents, want), keys
        assert torch.equal(read.positions, batch["position_ids"]), keys  # given, or counted from the documents
    # documents win over the others (a generated model's batch holds all of them)
    wrong = {"seq_idx": torch.zeros_like(seq_idx)}
    assert torch.equal(read_batch({**batch, **wrong}).documents, want)


def test_one_row_may_come_flat():
    batch = batch_of([[3, 4]])
    flat = {k: v[0] for k, v in batch.items()}
    read = read_batch(flat)
    assert read.ids.shape == (1, 7) and torch.equal(read.documents, batch["documents"])


def test_targets_are_what_each_output_is_trained_on():
    batch = batch_of([[3, 2]])
    read = read_batch(batch)
    assert read.shift == "inside" and "detected" in read.how
    ids = batch["input_ids"][0]
    # the loss shifts: output t is trained on label t + 1; -100 at the second document's first label
    assert read.targets[0].tolist() == [int(ids[1]), int(ids[2]), IGNORE_INDEX, int(ids[4]), IGNORE_INDEX]
    assert read.supervised == 3
    shifted = read_batch(batch_of([[3, 2]], labels="shifted"))
    assert shifted.shift == "shifted" and torch.equal(shifted.targets, shifted.labels)
    assert shifted.targets[0].tolist() == [int(ids[1]), int(ids[2]), IGNORE_INDEX, int(ids[4]), IGNORE_INDEX]
    assert read.pieces() == [(0, 0, 0, 3), (0, 1, 3, 5)]


def test_the_shift_is_the_losss_own_declared_or_detected():
    inside, shifted = batch_of(LENGTHS), batch_of(LENGTHS, labels="shifted")
    assert read_batch(inside, loss_shifts=True).conflict is None
    assert read_batch(inside, loss_shifts=True).how.startswith("the model's own loss shifts")
    # labels already shifted handed to a loss that shifts again: a target two tokens ahead
    doubled = read_batch(shifted, loss_shifts=True)
    assert doubled.shift == "inside" and "two tokens ahead" in doubled.conflict
    assert "shift_labels" in read_batch(inside, shift="shifted", loss_shifts=True).conflict
    as_key = {k: v for k, v in shifted.items() if k != "labels"} | {"shift_labels": shifted["labels"]}
    read = read_batch(as_key, loss_shifts=True)
    assert read.shift == "shifted" and read.conflict is None and "shift_labels" in read.how
    assert "shift_labels" in read_batch(as_key, shift="inside").conflict
    assert read_batch(shifted).shift == "shifted" and read_batch(shifted).how.startswith("detected")
    declared = read_batch(shifted, shift="shifted")
    assert declared.how == "declared shift='shifted'" and declared.conflict is None
    assert "labels[t] equals input_ids[t + 1]" in read_batch(shifted, shift="inside").conflict
    assert "labels equal input_ids" in read_batch(inside, shift="shifted").conflict


def test_labels_that_fit_neither_convention_ask_for_a_declaration():
    batch = batch_of(LENGTHS)
    batch["labels"] = torch.where(batch["labels"] == IGNORE_INDEX, batch["labels"], (batch["input_ids"] + 1) % 32)
    with pytest.raises(TensorcadError, match="fit neither") as caught:
        read_batch(batch)
    assert caught.value.path == "shift"
    assert read_batch(batch, shift="inside").shift == "inside"
    constant = {"input_ids": torch.full((1, 4), 7), "documents": torch.zeros(1, 4, dtype=torch.long),
                "labels": torch.tensor([[7, 7, 7, IGNORE_INDEX]])}
    with pytest.raises(TensorcadError, match="fit both"):
        read_batch(constant)
    with pytest.raises(TensorcadError, match="unknown shift 'left'"):
        read_batch(batch, shift="left")


@pytest.mark.parametrize("change, path, says", [
    (lambda b: b.pop("input_ids"), "batch.input_ids", "no input_ids"),
    (lambda b: b.pop("labels"), "batch.labels", "no labels"),
    (lambda b: b.update(labels=torch.full_like(b["labels"], -100)), "batch.labels", "nothing is trained"),
    (lambda b: b.update(labels=b["labels"][:, :5]), "batch.labels", "differs from input_ids"),
    (lambda b: b.update(labels=b["labels"].float()), "batch.labels", r"expected \(B, T\) integers"),
    (lambda b: [b.pop("documents"), b.pop("position_ids")], "batch", "nothing says where"),
    (lambda b: b.update(documents=b["documents"][:, :4]), "batch.documents", "differs from input_ids"),
    (lambda b: b.update(documents=b["documents"].flip(1)), "batch.documents", "never fall"),
])
def test_a_bad_batch_is_refused_naming_the_key(change, path, says):
    batch = batch_of(LENGTHS)
    change(batch)
    with pytest.raises(TensorcadError, match=says) as caught:
        read_batch(batch)
    assert caught.value.path == path
    with pytest.raises(TensorcadError, match="expected a dict"):
        read_batch([batch])


def test_rows_are_dealt_to_micro_batches_in_order():
    batch = batch_of([[3, 5, 2], [4, 6], [10], [1, 9]])
    read = read_batch(batch)
    parts = split_batch(read, 3)
    assert [p.ids.shape[0] for p in parts] == [1, 2, 1]  # round(i * 4 / 3): rows 0 | 1, 2 | 3
    assert torch.equal(torch.cat([p.ids for p in parts]), read.ids)
    assert torch.equal(parts[1].inputs["labels"], batch["labels"][1:3])
    assert sum(p.supervised for p in parts) == read.supervised


def test_one_row_is_cut_between_whole_documents():
    batch = batch_of([[3, 5, 2, 6, 4]])  # 20 tokens; documents start at 0, 3, 8, 10, 16
    batch["seq_idx"] = batch["documents"].to(torch.int32)
    batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = torch.tensor([0, 3, 8, 10, 16, 20], dtype=torch.int32)
    batch["max_length_q"] = batch["max_length_k"] = 6
    batch["use_cache"] = False
    read = read_batch(batch)
    halves = split_batch(read, 2)
    assert [p.ids.shape for p in halves] == [(1, 10), (1, 10)]  # the start nearest the middle: 10
    second = halves[1]
    assert second.documents[0].tolist() == [0] * 6 + [1] * 4  # numbered from 0 again
    assert second.inputs["documents"][0].tolist() == second.documents[0].tolist()
    assert second.inputs["seq_idx"][0].tolist() == second.documents[0].tolist()
    assert second.inputs["seq_idx"].dtype == torch.int32
    assert second.inputs["cu_seq_lens_q"].tolist() == [0, 6, 10] and second.inputs["max_length_k"] == 6
    assert second.inputs["use_cache"] is False  # what the batch holds besides, passed on
    assert torch.equal(second.inputs["position_ids"], batch["position_ids"][:, 10:])
    thirds = split_batch(read, 3)
    assert [p.ids.shape[1] for p in thirds] == [8, 8, 4]  # cuts at 8 (nearest 6.7) and 16 (nearest 13.3)
    fifths = split_batch(read, 5)
    assert [p.ids.shape[1] for p in fifths] == [3, 5, 2, 6, 4]  # a document each: every start is used


def test_a_batch_that_cannot_be_split_is_refused():
    read = read_batch(batch_of([[3, 5]]))
    with pytest.raises(TensorcadError, match="one row of 2 documents cannot be cut into 3"):
        split_batch(read, 3)
    with pytest.raises(TensorcadError, match="at least 2 micro-batches"):
        split_batch(read, 1)
    with pytest.raises(TensorcadError, match="at least 2"):
        split_batch(read, True)
    with pytest.raises(TensorcadError, match="2 rows cannot be dealt into 3"):
        split_batch(read_batch(batch_of(LENGTHS)), 3)
