"""data[boundaries]: each public fault planted in a packer the test writes, named by the form that shows it.

The packers here are torchtitan-style: each document tokenised with an EOS at
its end, truncated to a longest document, rows filled greedily and padded
with 0. Each knows its own lengths (what it packed); the certificate reads the
boundaries back from the batch the model would get.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing import positions_of, seq_idx_of, cu_seqlens_of
from tensorcad.runtime.certification.data.boundaries import check_data_boundaries, provenance_lengths

EOS, PAD, SEQ = 3, 0, 24


def _pack(documents: list[list[int]], longest: int, keep_eos: bool) -> tuple[np.ndarray, list[list[int]]]:
    """Rows of SEQ tokens: each document + EOS, truncated to ``longest``, padded; and the packer's lengths.

    ``keep_eos=False`` is OLMo-core #843's truncation: the document is cut
    after its EOS is appended, so a long document loses it.
    """
    rows, lengths, row, row_lengths = [], [], [], []
    for doc in documents:
        tokens = (doc + [EOS])[:longest] if not keep_eos else doc[: longest - 1] + [EOS]
        if len(row) + len(tokens) > SEQ:
            rows.append(row + [PAD] * (SEQ - len(row)))
            lengths.append(row_lengths)
            row, row_lengths = [], []
        row += tokens
        row_lengths.append(len(tokens))
    rows.append(row + [PAD] * (SEQ - len(row)))
    lengths.append(row_lengths)
    return np.asarray(rows), lengths


DOCS = [[5 + i] * n for i, n in enumerate([4, 12, 6, 3, 9, 5])]


def test_a_truncation_that_drops_the_eos_merges_two_documents():
    ids, lengths = _pack(DOCS, longest=8, keep_eos=False)
    result = check_data_boundaries({"input_ids": ids}, lengths, eos_id=EOS)
    assert not result.passed
    merged = [f for f in result.findings if f.kind == "merged"]
    # the test's own count: each document longer than 7 tokens lost its EOS, and is followed in its row
    lost_eos = [i for i, d in enumerate(DOCS) if len(d) + 1 > 8]
    assert len(merged) == len([i for i in lost_eos if _same_row(lengths, i)]) == 2
    assert {f.kind for f in result.findings} == {"merged"}
    assert "ends with token 6, not the EOS 3: truncated past its EOS?" in merged[0].message
    clean_ids, clean_lengths = _pack(DOCS, longest=8, keep_eos=True)
    clean = check_data_boundaries({"input_ids": clean_ids}, clean_lengths, eos_id=EOS)
    assert clean.passed, clean.message
    assert clean.documents == len(DOCS)


def _same_row(lengths: list[list[int]], i: int) -> bool:
    """Whether document i is followed by another in its row (a row's end ends a document whatever it holds)."""
    seen = 0
    for row in lengths:
        if i < seen + len(row):
            return i - seen + 1 < len(row)
        seen += len(row)
    return False


def test_an_eos_id_that_is_also_a_chat_token_splits_one_chat_into_three():
    # torchtitan #3130: the tokenizer's EOS is <|im_end|>, which closes every turn of a chat template
    im_end = 7
    chat = [11, 12, 13, im_end, 21, 22, 23, 24, im_end, 31, 32, im_end]  # three turns, the last closed too
    other = [41, 42, 43, im_end]
    ids = np.asarray([chat + other + [PAD] * (SEQ - 16)])
    result = check_data_boundaries({"input_ids": ids}, [[12, 4]], eos_id=im_end)
    assert not result.passed
    [split] = result.findings
    assert split.kind == "split" and split.position == 4
    assert "document 0 (length 12) is read as 3 documents [4, 5, 3]" in split.message
    assert "token 7, the EOS id, occurs inside it (offsets 3, 8)" in split.message
    # the clean counterpart: an EOS id of its own after each chat
    eos = 2
    clean = np.asarray([chat + [eos] + other + [eos] + [PAD] * (SEQ - 18)])
    assert check_data_boundaries({"input_ids": clean}, [[13, 5]], eos_id=eos).passed


def test_padding_zeros_in_position_ids_are_read_as_documents():
    # LlamaFactory #10452 / VeOmni #746: the padded tail's position_ids are 0, each a document of its own
    lengths = [[5, 7], [10, 6, 4]]
    documents = np.asarray([[0] * 5 + [1] * 7 + [2] * 12, [0] * 10 + [1] * 6 + [2] * 4 + [3] * 4])
    good = positions_of(documents)  # the padding as one more run of positions: no real token attends it
    bad = good.copy()
    bad[0, 12:], bad[1, 20:] = 0, 0
    ids = np.ones_like(documents)
    result = check_data_boundaries({"input_ids": ids, "position_ids": bad}, lengths)
    assert [f.kind for f in result.findings] == ["padding", "padding"]
    assert "row 0's 12 tokens of padding (from position 12) are read as 12 documents" in result.findings[0].message
    assert "row 1's 4 tokens of padding (from position 20) are read as 4 documents" in result.findings[1].message
    assert check_data_boundaries({"input_ids": ids, "position_ids": good}, lengths).passed


def test_every_form_of_one_packing_passes_and_a_moved_boundary_fails_in_each():
    documents = np.asarray([[0] * 5 + [1] * 19, [0] * 8 + [1] * 8 + [2] * 8])
    lengths = [[5, 19], [8, 8, 8]]
    batch = {"input_ids": np.ones_like(documents), "position_ids": positions_of(documents),
             "seq_idx": seq_idx_of(documents), "cu_seq_lens_q": cu_seqlens_of(documents), "documents": documents}
    result = check_data_boundaries(batch, lengths)
    assert result.passed and result.forms == ("position_ids", "cu_seq_lens_q", "seq_idx", "documents")
    moved = [[6, 18], [8, 8, 8]]
    failed = check_data_boundaries(batch, moved)
    assert {(f.form, f.kind) for f in failed.findings} == {(form, kind) for form in result.forms
                                                           for kind in ("merged", "split")}


def test_torch_tensors_and_provenance_lengths():
    torch = pytest.importorskip("torch")
    docs = torch.tensor([[4, 4, 9, 9, 9, -1], [2, 2, 2, 2, 2, 2]])
    assert provenance_lengths(docs) == [[2, 3], [6]]
    batch = {"input_ids": torch.ones(2, 6, dtype=torch.long),
             "position_ids": torch.tensor([[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5]])}
    assert check_data_boundaries(batch, provenance_lengths(docs)).passed
    with pytest.raises(TensorcadError, match=r"docs\[0\]"):
        provenance_lengths([[1, -1, 2]])


def test_bad_input_is_named():
    ids = np.ones((1, 6), dtype=np.int64)
    with pytest.raises(TensorcadError, match="lengths"):
        check_data_boundaries({"input_ids": ids}, [[3], [3]])
    with pytest.raises(TensorcadError, match=r"lengths\[0\]"):
        check_data_boundaries({"input_ids": ids}, [[4, 4]])
    with pytest.raises(TensorcadError, match="forms"):
        check_data_boundaries({"input_ids": ids}, [[6]], forms=["seq_idx"])
    with pytest.raises(TensorcadError, match="batch.input_ids"):
        check_data_boundaries({"ids": ids}, [[6]])
    unreadable = check_data_boundaries({"input_ids": ids, "position_ids": np.asarray([[1, 2, 3, 4, 5, 6]])}, [[6]])
    assert [f.kind for f in unreadable.findings] == ["unreadable"]
    assert not check_data_boundaries({"input_ids": ids}, [[6]]).passed  # no form at all is no certificate


def test_trls_sft_packing_path_gives_the_packers_lengths_in_every_form():
    datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")
    trl_data = pytest.importorskip("trl.data_utils", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
    sft = pytest.importorskip("trl.trainer.sft_trainer")
    lengths = np.random.default_rng(2).integers(1, 30, size=40).tolist()
    data = datasets.Dataset.from_dict({"input_ids": [list(range(10, 10 + n)) for n in lengths]})
    packed = list(trl_data.pack_dataset(data, 32, strategy="bfd"))
    batch = sft.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(packed)
    flat = [[n for example in packed for n in example["seq_lengths"]]]  # the collator flattens the rows into one
    result = check_data_boundaries(batch, flat)
    assert result.passed, result.message
    assert result.forms == ("position_ids", "cu_seq_lens_q", "seq_idx") and result.documents == len(lengths)
    # the same packed rows collated without padding_free carry no boundaries at all: documents attend each other
    padded = sft.DataCollatorForLanguageModeling(pad_token_id=0)(packed)
    unseen = check_data_boundaries(padded, [example["seq_lengths"] for example in packed])
    assert not unseen.passed and unseen.forms == ()
