"""A batch dict read for the step certificates: where documents begin, the labels' shift, micro-batches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from step_models import batch_of  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step.batch import IGNORE_INDEX, read_batch, split_batch  # noqa: E402

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
    narrow = read_batch({**batch, "documents": want.to(torch.int32)})
    assert narrow.documents.dtype == torch.long and torch.equal(narrow.documents, want)
    # the batch's own positions, as given: here counted through the row, not restarting
    straight = read_batch({**batch, "position_ids": torch.arange(10).repeat(2, 1)})
    assert straight.positions.tolist() == [list(range(10))] * 2


def test_one_row_may_come_flat():
    batch = batch_of([[3, 4]])
    flat = {k: v[0] for k, v in batch.items()}
    read = read_batch(flat)
    assert read.ids.shape == (1, 7) and torch.equal(read.documents, batch["documents"])
    by_seq_idx = {"input_ids": flat["input_ids"], "labels": flat["labels"], "seq_idx": flat["documents"]}
    assert torch.equal(read_batch(by_seq_idx).documents, batch["documents"])


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


INSIDE = "labels equal input_ids at every supervised position (the loss shifts them)"
SHIFTED = "labels[t] equals input_ids[t + 1] at every supervised position (already shifted)"
OWN = "the model's own loss shifts the labels (transformers' ForCausalLMLoss)"


def test_the_shift_is_the_losss_own_declared_or_detected():
    inside, shifted = batch_of(LENGTHS), batch_of(LENGTHS, labels="shifted")
    as_key = {k: v for k, v in shifted.items() if k != "labels"} | {"shift_labels": shifted["labels"]}
    cases = [  # (batch, declared, the loss shifts) -> (shift, how, conflict)
        (inside, None, True, "inside", OWN, None),
        (shifted, None, True, "inside", OWN,
         f"the {SHIFTED}, but the model's own loss shifts them again, so every target is two tokens ahead: pass "
         "labels equal to input_ids, or shift_labels"),
        (inside, "shifted", True, "inside", OWN,
         "declared already shifted, but the model's own loss shifts them again: pass them as shift_labels"),
        (inside, "inside", True, "inside", OWN, None),
        (as_key, None, True, "shifted", "the batch's shift_labels (already shifted)", None),
        (as_key, "inside", False, "shifted", "the batch's shift_labels (already shifted)",
         "declared shift='inside', but the batch holds shift_labels, which the loss reads as already shifted"),
        (shifted, None, False, "shifted", f"detected: {SHIFTED}", None),
        (inside, None, False, "inside", f"detected: {INSIDE}", None),
        (shifted, "shifted", False, "shifted", "declared shift='shifted'", None),
        (shifted, "inside", False, "inside", "declared shift='inside'", f"declared shift='inside', but the {SHIFTED}"),
        (inside, "shifted", False, "shifted", "declared shift='shifted'", f"declared shift='shifted', but the {INSIDE}"),
    ]
    for batch, declared, loss_shifts, shift, how, conflict in cases:
        read = read_batch(batch, shift=declared, loss_shifts=loss_shifts)
        assert (read.shift, read.how, read.conflict) == (shift, how, conflict), (declared, loss_shifts)
    assert torch.equal(read_batch(as_key).labels, shifted["labels"])


def test_labels_that_fit_neither_convention_ask_for_a_declaration():
    batch = batch_of(LENGTHS)
    batch["labels"] = torch.where(batch["labels"] == IGNORE_INDEX, batch["labels"], (batch["input_ids"] + 1) % 32)
    with pytest.raises(TensorcadError) as caught:
        read_batch(batch)
    assert str(caught.value) == ("shift: the labels fit neither of labels == input_ids and labels[t] == "
                                 "input_ids[t + 1]: declare shift='inside' (the loss shifts them) or shift='shifted'")
    assert read_batch(batch, shift="inside").shift == "inside"
    constant = {"input_ids": torch.full((1, 4), 7), "documents": torch.zeros(1, 4, dtype=torch.long),
                "labels": torch.tensor([[7, 7, 7, IGNORE_INDEX]])}
    with pytest.raises(TensorcadError, match="the labels fit both of"):
        read_batch(constant)
    # a supervised label at the row's last position cannot be already shifted: nothing follows it
    last = {**constant, "labels": torch.tensor([[IGNORE_INDEX, 7, 7, 7]])}
    assert read_batch(last).shift == "inside"
    with pytest.raises(TensorcadError) as caught:
        read_batch(batch, shift="left")
    assert str(caught.value) == "shift: unknown shift 'left' (shifts: inside, shifted)"


@pytest.mark.parametrize("change, says", [
    (lambda b: b.pop("input_ids"), "batch.input_ids: the batch holds no input_ids"),
    (lambda b: b.pop("labels"), "batch.labels: the batch holds no labels (nor shift_labels): nothing is trained"),
    (lambda b: b.update(labels=torch.full_like(b["labels"], -100)), "batch.labels: every label is -100: nothing is "
                                                                    "trained"),
    (lambda b: b.update(labels=b["labels"][:, :5]), "batch.labels: shape (2, 5) differs from input_ids (2, 10)"),
    (lambda b: b.update(labels=b["labels"].float()), "batch.labels: expected (B, T) integers, got torch.float32 "
                                                     "(2, 10)"),
    (lambda b: b.update(labels=b["labels"].bool()), "batch.labels: expected (B, T) integers, got torch.bool (2, 10)"),
    (lambda b: b.update(labels=b["labels"][None]), "batch.labels: expected (B, T) integers, got torch.int64 "
                                                   "(1, 2, 10)"),
    (lambda b: [b.pop("documents"), b.pop("position_ids")], "batch: holds no documents, seq_idx, cu_seq_lens_q or "
                                                            "position_ids: nothing says where its documents begin"),
    (lambda b: b.update(documents=b["documents"][:, :4]), "batch.documents: shape (2, 4) differs from input_ids "
                                                          "(2, 10)"),
    (lambda b: b.update(documents=b["documents"].flip(1)), "batch.documents: document ids must never fall along a "
                                                           "row"),
    (lambda b: b["documents"][0].copy_(torch.tensor([0, 0, 2, 2, 1, 1, 1, 3, 3, 3])),
     "batch.documents: document ids must never fall along a row"),  # a fall that stays above the row's first
    (lambda b: b.update(documents=b["documents"].float()), "batch.documents: expected (B, T) integers, got "
                                                           "torch.float32 (2, 10)"),
    (lambda b: b.update(input_ids=b["input_ids"].float()), "batch.input_ids: expected (B, T) integers, got "
                                                           "torch.float32 (2, 10)"),
    (lambda b: b.update(position_ids=b["position_ids"].float()), "batch.position_ids: expected (B, T) integers, got "
                                                                 "torch.float32 (2, 10)"),
    (lambda b: [b.pop("documents"), b.update(position_ids=b["position_ids"].float())],
     "batch.position_ids: expected (B, T) integers, got torch.float32 (2, 10)"),
    (lambda b: [b.pop("documents"), b.update(seq_idx=torch.zeros(2, 9, dtype=torch.int32))],
     "batch.documents: shape (2, 9) differs from input_ids (2, 10)"),
])
def test_a_bad_batch_is_refused_naming_the_key(change, says):
    batch = batch_of(LENGTHS)
    change(batch)
    with pytest.raises(TensorcadError) as caught:
        read_batch(batch)
    assert str(caught.value) == says


def test_a_batch_that_is_no_dict_and_keys_named_for_what_they_read():
    with pytest.raises(TensorcadError) as caught:
        read_batch([batch_of(LENGTHS)])
    assert str(caught.value) == "batch: expected a dict of tensors (input_ids, labels, ...), got list"
    batch = batch_of(LENGTHS)
    read = read_batch(batch)
    assert read_batch(read) is read  # read once
    for key, value in (("seq_idx", torch.ones(2, 10)), ("position_ids", torch.ones(2, 10))):
        bad = {"input_ids": batch["input_ids"], "labels": batch["labels"], key: value}
        with pytest.raises(TensorcadError) as caught:
            read_batch(bad)
        assert caught.value.path.startswith(key) or caught.value.path.startswith(f"batch.{key}")


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
    batch["attention_mask"] = torch.arange(20)[None]  # a (B, T) key the model takes: cut with the rest
    batch["shift_labels"] = batch.pop("labels")
    read = read_batch(batch, shift="inside")
    halves = split_batch(read, 2)
    assert [p.ids.shape for p in halves] == [(1, 10), (1, 10)]  # the start nearest the middle: 10
    second = halves[1]
    assert second.documents[0].tolist() == [0] * 6 + [1] * 4  # numbered from 0 again
    assert second.inputs["documents"][0].tolist() == second.documents[0].tolist()
    assert second.inputs["seq_idx"][0].tolist() == second.documents[0].tolist()
    assert second.inputs["seq_idx"].dtype == torch.int32
    assert second.inputs["cu_seq_lens_q"].tolist() == [0, 6, 10] and second.inputs["max_length_k"] == 6
    assert halves[0].inputs["max_length_q"] == 5 and halves[0].inputs["cu_seq_lens_k"].tolist() == [0, 3, 8, 10]
    assert second.inputs["use_cache"] is False  # what the batch holds besides, passed on
    assert torch.equal(second.inputs["position_ids"], batch["position_ids"][:, 10:])
    assert second.inputs["attention_mask"].tolist() == [list(range(10, 20))]
    assert torch.equal(second.inputs["shift_labels"], batch["shift_labels"][:, 10:])
    assert torch.equal(second.labels, batch["shift_labels"][:, 10:]) and second.shift == "shifted"
    assert torch.equal(second.positions, batch["position_ids"][:, 10:]) and torch.equal(second.ids, read.ids[:, 10:])
    thirds = split_batch(read, 3)
    assert [p.ids.shape[1] for p in thirds] == [8, 8, 4]  # cuts at 8 (nearest 6.7) and 16 (nearest 13.3)
    late = split_batch(read_batch(batch_of([[15, 14, 1]])), 3)  # a cut past its mark leaves the next one after it
    assert [p.ids.shape[1] for p in late] == [15, 14, 1]
    room = split_batch(read_batch(batch_of([[1, 1, 18]])), 3)  # the nearest start would leave the last part none
    assert [p.ids.shape[1] for p in room] == [1, 1, 18]
    fifths = split_batch(read, 5)
    assert [p.ids.shape[1] for p in fifths] == [3, 5, 2, 6, 4]  # a document each: every start is used


def test_a_batch_that_cannot_be_split_is_refused():
    read = read_batch(batch_of([[3, 5]]))
    for parts, says in ((3, "micro_batches: one row of 2 documents cannot be cut into 3 micro-batches of whole "
                            "documents"),
                        (1, "micro_batches: expected at least 2 micro-batches, got 1"),
                        (True, "micro_batches: expected at least 2 micro-batches, got True"),
                        (2.0, "micro_batches: expected at least 2 micro-batches, got 2.0")):
        with pytest.raises(TensorcadError) as caught:
            split_batch(read, parts)
        assert str(caught.value) == says
    with pytest.raises(TensorcadError) as caught:
        split_batch(read_batch(batch_of(LENGTHS)), 3)
    assert str(caught.value) == "micro_batches: 2 rows cannot be dealt into 3 micro-batches"
    assert [p.ids.shape for p in split_batch(read_batch(batch_of(LENGTHS)), 2)] == [(1, 10), (1, 10)]
