"""How the rl certificates read a batch and deal it into parts (rl/batch.py), word for word: the sequences, the
loss tokens, each part's rows, columns and inputs, and every refusal."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rl_cases import packed_batch, padded_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.batch import Piece, deal, read_rl_batch  # noqa: E402


def test_a_packed_batch_reads_its_sequences_and_its_padding_run():
    rl = read_rl_batch(packed_batch([[3, 2], [4]], pad=1))
    assert rl.shape == (2, 6) and rl.mask_key == "loss_mask"
    assert rl.pieces == (Piece(0, 0, 0, 3, 3), Piece(0, 1, 3, 5, 2), Piece(0, 2, 5, 6, 0), Piece(1, 0, 0, 4, 4),
                         Piece(1, 1, 4, 6, 0))
    assert rl.sequences == (rl.pieces[0], rl.pieces[1], rl.pieces[3])
    assert read_rl_batch(rl) is rl


def test_padded_rows_are_one_sequence_each_and_the_first_mask_key_counts():
    batch = padded_batch([2, 3])
    batch["attention_mask"] = torch.ones(2, 3, dtype=torch.long)  # later in MASK_KEYS than completion_mask
    rl = read_rl_batch(batch)
    assert rl.mask_key == "completion_mask" and rl.pieces == (Piece(0, 0, 0, 3, 2), Piece(1, 0, 0, 3, 3))
    bare = read_rl_batch({"input_ids": torch.ones(2, 4, dtype=torch.long)})
    assert bare.mask_key is None and bare.mask.all() and [p.count for p in bare.pieces] == [4, 4]
    flat = read_rl_batch({"input_ids": torch.ones(5, dtype=torch.long)})
    assert flat.shape == (1, 5)


def test_parts_are_whole_rows_in_order_ranks_taking_consecutive_micro_batches():
    rl = read_rl_batch(packed_batch([[3, 2], [4], [1, 1], [5]], pad=1))
    parts = deal(rl, ranks=2, micro_batches=2)
    assert [(p.rank, p.micro_batch, p.rows, p.first, p.end, p.sequences) for p in parts] == [
        (0, 0, slice(0, 1), 0, 5, (0, 1)), (0, 1, slice(1, 2), 0, 4, (2,)), (1, 0, slice(2, 3), 0, 2, (3, 4)),
        (1, 1, slice(3, 4), 0, 5, (5,))]
    assert [p.width for p in parts] == [5, 4, 2, 5] and parts[1].name(2) == "micro-batch 1 of rank 0"
    assert parts[1].name(1) == "micro-batch 1"
    uneven = deal(rl, micro_batches=3)  # 4 rows into 3: rounded bounds 0, 1, 3, 4
    assert [p.rows for p in uneven] == [slice(0, 1), slice(1, 3), slice(3, 4)]


def test_a_part_s_inputs_are_cut_trimmed_and_rebased():
    batch = packed_batch([[3, 2], [4]], pad=1)
    batch["documents"] = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 1, 1]])
    batch["advantages"] = torch.tensor([0.5, -1.0])
    batch["cu_seq_lens_q"] = torch.tensor([0, 3, 5, 6, 10, 12])
    batch["max_length_q"] = 4
    batch["config"] = "kept"
    one, two = deal(read_rl_batch(batch), micro_batches=2)
    assert one.inputs["loss_mask"].tolist() == [[1, 1, 1, 1, 1]] and one.end == 5
    assert one.inputs["advantages"].tolist() == [0.5] and two.inputs["advantages"].tolist() == [-1.0]
    assert one.inputs["cu_seq_lens_q"].tolist() == [0, 3, 5] and one.inputs["max_length_q"] == 3
    assert two.inputs["documents"].tolist() == [[0, 0, 0, 0]] and one.inputs["config"] == "kept"


def test_one_packed_row_is_cut_between_whole_sequences_nearest_the_even_cut():
    rl = read_rl_batch(packed_batch([[2, 3, 1, 4, 2]]))  # starts 0, 2, 5, 6, 10; 12 tokens
    # even cuts at 4 and 8: 5 is nearest 4; 6 and 10 are both 2 from 8, and the earlier is taken
    parts = deal(rl, micro_batches=3)
    assert [(p.first, p.end, p.sequences) for p in parts] == [(0, 5, (0, 1)), (5, 6, (2,)), (6, 12, (3, 4))]
    assert parts[2].inputs["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1]]
    ties = deal(read_rl_batch(packed_batch([[2, 2, 2, 2]])), micro_batches=2)  # cut at 4 exactly
    assert [(p.first, p.end) for p in ties] == [(0, 4), (4, 8)]
    every = deal(read_rl_batch(packed_batch([[1, 1, 1]])), micro_batches=3)
    assert [(p.first, p.end) for p in every] == [(0, 1), (1, 2), (2, 3)]


def test_bad_batches_and_parts_word_for_word():
    cases = [
        (lambda: read_rl_batch([1, 2]), "batch", "expected a dict of tensors, got list"),
        (lambda: read_rl_batch({"labels": torch.ones(2, 3)}), "batch",
         "holds no input_ids, loss mask or position_ids: nothing says its shape"),
        (lambda: read_rl_batch({"input_ids": torch.ones(2, 3, 4)}), "batch.input_ids",
         "expected (B, T), got shape (2, 3, 4)"),
        (lambda: read_rl_batch({"input_ids": torch.ones(2, 3), "loss_mask": torch.ones(2, 4)}), "batch.loss_mask",
         "shape (2, 4) differs from input_ids (2, 3)"),
        (lambda: read_rl_batch({"input_ids": torch.ones(2, 3), "loss_mask": torch.zeros(2, 3)}), "batch.loss_mask",
         "no token is a loss token"),
        (lambda: deal(read_rl_batch(packed_batch([[2, 2]])), ranks=0), "ranks", "expected a positive integer, got 0"),
        (lambda: deal(read_rl_batch(packed_batch([[2, 2]])), micro_batches=True), "micro_batches",
         "expected a positive integer, got True"),
        (lambda: deal(read_rl_batch(packed_batch([[2, 2]])), micro_batches=1.0), "micro_batches",
         "expected a positive integer, got 1.0"),
        (lambda: deal(read_rl_batch(packed_batch([[2, 2]])), micro_batches=3), "micro_batches",
         "one row of 2 sequences cannot be cut into 3 parts of whole sequences"),
        (lambda: deal(read_rl_batch(packed_batch([[2], [2]])), ranks=3), "micro_batches",
         "2 rows cannot be dealt into 3 rank(s) x 1 micro-batch(es)"),
    ]
    for n, (call, path, message) in enumerate(cases):
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message), n
