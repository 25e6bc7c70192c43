"""``data[boundaries]`` to the letter: each finding's form, row, kind, position and message, each refusal's path
and words, the result's JSON and the registry check's verdict, written out by hand for batches small enough to
count. The faults are the ones test_data_boundaries.py reproduces; these pin what is said of them."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing import documents_of_cu_seqlens
from tensorcad.runtime.certification import DataSubject, check_data_boundaries, run_check
from tensorcad.runtime.certification.data.boundaries import FORMS, SHOWN, provenance_lengths

EOS = 2


def finding(result, i=0):
    f = result.findings[i]
    return f.form, f.row, f.kind, f.position, f.message


def test_a_truncated_document_merged_by_eos_is_named_in_its_row_with_its_last_token():
    # row 1: the packer's [5, 6, EOS] [7, 8] [9, 10, EOS]; the middle one lost its EOS to truncation
    ids = np.array([[1, EOS, 3, 4, EOS, 6, 7, EOS], [5, 6, EOS, 7, 8, 9, 10, EOS]])
    result = check_data_boundaries({"input_ids": ids}, [[2, 3, 3], [3, 2, 3]], eos_id=EOS)
    assert result.forms == ("eos",) and result.rows == 2 and result.documents == 6
    assert [finding(result)] == [(
        "eos", 1, "merged", 5,
        "eos: row 1's document 1 (length 2) runs on into document 2 at position 5 (it ends with token 8, not the "
        "EOS 2: truncated past its EOS?)")]
    assert result.message == "1 boundary faults: " + result.findings[0].message


def test_a_merge_in_another_form_says_no_word_of_eos():
    # position_ids that run on over a boundary: the row's ids and an eos_id are there, the form is not EOS
    ids = np.array([[5, 6, 7, 8, 9, 4]])
    batch = {"input_ids": ids, "position_ids": np.array([[0, 1, 2, 3, 4, 5]])}
    result = check_data_boundaries(batch, [[3, 3]], eos_id=EOS, forms=["position_ids"])
    assert result.forms == ("position_ids",)
    assert [finding(result)] == [("position_ids", 0, "merged", 3,
                                  "position_ids: row 0's document 0 (length 3) runs on into document 1 at position 3")]


def test_an_eos_inside_a_chat_splits_it_named_with_its_pieces_offsets_and_the_eos_offsets():
    # the packer's [9, EOS] then one chat of 7 whose turns end in the EOS id too (torchtitan #3130)
    ids = np.array([[9, EOS, 4, EOS, 5, EOS, 6, 7, EOS]])
    result = check_data_boundaries({"input_ids": ids}, [[2, 7]], eos_id=EOS)
    assert [finding(result)] == [(
        "eos", 0, "split", 4,
        "eos: row 0's document 1 (length 7) is read as 3 documents [2, 2, 3], cut at offsets 2, 4: token 2, the "
        "EOS id, occurs inside it (offsets 1, 3)")]


def test_a_split_one_token_into_the_first_document_is_found():
    ids = np.array([[EOS, 5, 6, EOS]])
    result = check_data_boundaries({"input_ids": ids}, [[4]], eos_id=EOS)
    assert finding(result)[:4] == ("eos", 0, "split", 1)
    assert "is read as 2 documents [1, 3], cut at offsets 1: " in result.findings[0].message


def test_a_split_in_another_form_says_no_word_of_eos():
    batch = {"input_ids": np.ones((1, 6), dtype=np.int64), "seq_idx": np.array([[0, 0, 1, 1, 2, 2]])}
    result = check_data_boundaries(batch, [[2, 4]])
    assert [finding(result)] == [("seq_idx", 0, "split", 4,
                                  "seq_idx: row 0's document 1 (length 4) is read as 2 documents [2, 2], cut at "
                                  "offsets 2")]


def test_padding_zeros_read_as_documents_are_counted_from_where_the_padding_starts():
    batch = {"input_ids": np.ones((2, 8), dtype=np.int64),
             "position_ids": np.array([[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 0, 1, 0, 0, 0]])}
    result = check_data_boundaries(batch, [[8], [3, 2]])
    assert [finding(result)] == [("position_ids", 1, "padding", 6,
                                  "position_ids: row 1's 3 tokens of padding (from position 5) are read as 3 "
                                  "documents")]
    # padding read as one run, or as the last document's tail, is no fault
    for tail in ([0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 2, 0, 1, 2, 3, 4]):
        batch["position_ids"] = np.array([[0, 1, 2, 3, 4, 5, 6, 7], tail])
        assert check_data_boundaries(batch, [[8], [3, 2]]).passed


def test_an_unreadable_form_is_a_finding_and_the_forms_after_it_are_still_checked():
    cu = np.array([[0, 4, 3]])  # decreasing: no packing of whole documents
    with pytest.raises(TensorcadError) as raised:
        documents_of_cu_seqlens(cu.reshape(-1), 6, 1)
    batch = {"input_ids": np.ones((1, 6), dtype=np.int64), "cu_seq_lens_q": cu,
             "seq_idx": np.array([[0, 0, 0, 1, 1, 1]])}
    result = check_data_boundaries(batch, [[2, 4]])
    assert result.forms == ("cu_seq_lens_q", "seq_idx")
    assert finding(result, 0) == ("cu_seq_lens_q", -1, "unreadable", -1, f"cu_seq_lens_q: {raised.value}")
    assert finding(result, 1)[:4] == ("seq_idx", 0, "merged", 2)
    assert finding(result, 2)[:4] == ("seq_idx", 0, "split", 3)


def test_cu_seq_lens_given_as_a_row_and_ids_with_a_leading_batch_dimension():
    cu = np.array([[0, 3, 5, 8, 10]])  # FlashAttention's kwargs keep a leading dimension at times
    ids = np.ones((1, 2, 5), dtype=np.int64)  # (1, rows, seq): rows are every dimension but the last
    result = check_data_boundaries({"input_ids": ids, "cu_seq_lens_q": cu}, [[3, 2], [3, 2]])
    assert result.passed and result.rows == 2 and result.documents == 4
    assert result.message == "cu_seq_lens_q: the 4 documents of 2 rows, as the packer packed them"


def test_one_row_of_ids_and_lengths_from_tensors_with_a_graph():
    torch = pytest.importorskip("torch")
    lengths = [torch.tensor([3.0, 2.0], requires_grad=True)]  # a packer's computed lengths, still in a graph
    batch = {"input_ids": torch.ones(5, dtype=torch.long), "position_ids": torch.tensor([0, 1, 2, 0, 1])}
    result = check_data_boundaries(batch, lengths)
    assert result.passed and result.rows == 1 and result.documents == 2
    # one-token documents are documents
    assert check_data_boundaries({"input_ids": np.ones((1, 3)), "seq_idx": np.array([[0, 1, 2]])}, [[1, 1, 1]]).passed


def test_more_findings_than_shown_are_counted():
    rows = SHOWN + 3
    batch = {"input_ids": np.ones((rows, 4), dtype=np.int64), "position_ids": np.tile([0, 1, 2, 3], (rows, 1))}
    result = check_data_boundaries(batch, [[2, 2]] * rows)
    assert len(result.findings) == rows
    listed = "; ".join(f"position_ids: row {r}'s document 0 (length 2) runs on into document 1 at position 2"
                       for r in range(SHOWN))
    assert result.message == f"{rows} boundary faults: {listed}; and 3 more"


def test_the_json_is_the_result():
    batch = {"input_ids": np.array([[5, EOS, 7, 8]]), "position_ids": np.array([[0, 1, 0, 1]])}
    result = check_data_boundaries(batch, [[2, 2]], eos_id=EOS)
    assert result.to_json() == {"passed": True, "message": "position_ids, eos: the 2 documents of 1 rows, as the "
                                                           "packer packed them",
                                "forms": ["position_ids", "eos"], "rows": 1, "documents": 2, "findings": []}
    bad = check_data_boundaries(batch, [[1, 3]], forms=["position_ids"])
    assert bad.to_json() == {
        "passed": False, "message": bad.message, "forms": ["position_ids"], "rows": 1, "documents": 2,
        "findings": [{"form": "position_ids", "row": 0, "kind": "merged", "position": 1,
                      "message": "position_ids: row 0's document 0 (length 1) runs on into document 1 at position 1"},
                     {"form": "position_ids", "row": 0, "kind": "split", "position": 2,
                      "message": "position_ids: row 0's document 1 (length 3) is read as 2 documents [1, 2], cut at "
                                 "offsets 1"}]}
    empty = check_data_boundaries({"input_ids": np.ones((1, 2))}, [[2]])
    assert not empty.passed and empty.forms == ()
    assert empty.message == ("the batch holds no form of boundaries (position_ids, cu_seq_lens_q, seq_idx, documents, "
                             "EOS)")


@pytest.mark.parametrize("call, path, words", [
    (lambda: check_data_boundaries([1, 2], [[2]]), "batch", "expected a mapping of the model's inputs, got list"),
    (lambda: check_data_boundaries({"ids": np.ones((1, 2))}, [[2]]), "batch.input_ids",
     "the batch has no 'input_ids' (its shape is the rows')"),
    (lambda: check_data_boundaries({"input_ids": np.int64(3)}, [[2]]), "batch.input_ids",
     "expected token ids of shape (..., tokens), got one number"),
    (lambda: check_data_boundaries({"input_ids": np.ones((2, 4))}, [[4]]), "lengths",
     "expected a list of 2 rows of document lengths, got [[4]]"),
    (lambda: check_data_boundaries({"input_ids": np.ones((2, 4))}, [[4], [0, 3]]), "lengths[1]",
     "documents of at least one token, at most 4 in all, got [0, 3]"),
    (lambda: check_data_boundaries({"input_ids": np.ones((1, 4))}, [[3, 2]]), "lengths[0]",
     "documents of at least one token, at most 4 in all, got [3, 2]"),
    (lambda: check_data_boundaries({"input_ids": np.ones((1, 4))}, [[4]], forms=["position_ids", "tokens"]),
     "forms", "unknown forms ['tokens']; the forms are position_ids, cu_seq_lens_q, seq_idx, documents, eos"),
    (lambda: check_data_boundaries({"input_ids": np.ones((1, 4))}, [[4]], forms=["seq_idx", "documents"]),
     "forms", "the batch holds no seq_idx, documents"),
])
def test_bad_input_names_its_path_and_says_what_was_expected(call, path, words):
    with pytest.raises(TensorcadError) as e:
        call()
    assert e.value.path == path and str(e.value) == f"{path}: {words}"


def test_forms_asked_are_the_forms_checked_in_the_order_asked():
    batch = {"input_ids": np.ones((1, 4), dtype=np.int64), "position_ids": np.array([[0, 1, 0, 1]]),
             "documents": np.array([[0, 0, 1, 1]])}
    assert check_data_boundaries(batch, [[2, 2]]).forms == ("position_ids", "documents")
    assert check_data_boundaries(batch, [[2, 2]], forms=["documents"]).forms == ("documents",)
    # a column named like the EOS form is no form: EOS boundaries are read only with an eos_id
    assert check_data_boundaries({**batch, "eos": np.zeros((1, 4))}, [[2, 2]]).forms == ("position_ids", "documents")
    assert FORMS == ("position_ids", "cu_seq_lens_q", "seq_idx", "documents", "eos")


def test_provenance_lengths_read_rows_and_refuse_a_document_after_padding():
    assert provenance_lengths(np.array([0, 0, 1, 1, 1, -1])) == [[2, 3]]  # one row, as a 1-D column
    assert provenance_lengths(np.array([[0, 1, 1, -1], [-1, -1, -1, -1]])) == [[1, 2], []]
    with pytest.raises(TensorcadError) as e:
        provenance_lengths(np.array([[0, 0, -1, 0]]))
    assert e.value.path == "docs[0]"
    assert str(e.value) == "docs[0]: padding at 2 is followed by a document: padding ends a row"


# --- the registry's check over a loader's first batches -------------------------------------------------


def _batch(positions, lengths_key="seq_lengths", lengths=None):
    rows = np.asarray(positions)
    return {"input_ids": np.ones_like(rows), "position_ids": rows, lengths_key: lengths}


def test_the_registry_reads_trls_seq_lengths_and_names_the_first_failing_batch():
    good = _batch([[0, 1, 0, 1, 2]], lengths=[[2, 3]])
    bad = _batch([[0, 1, 2, 3, 4]], lengths=[[2, 3]])
    passed = run_check(DataSubject([], [good, good]), "data[boundaries]")
    assert passed.passed and passed.name == "data[boundaries]"
    assert passed.message == "the first 2 batches' position_ids hold the packer's 4 documents"
    assert passed.figures == {"batches": [check_data_boundaries(good, [[2, 3]]).to_json()] * 2}
    failed = run_check(DataSubject([], [good, bad, bad]), "data[boundaries]")
    assert not failed.passed and failed.name == "data[boundaries]"
    first = check_data_boundaries(bad, [[2, 3]])
    assert failed.message == f"batch 1 of the first 3: {first.message}"
    assert failed.figures == {"batches": [check_data_boundaries(good, [[2, 3]]).to_json(), first.to_json(),
                                          first.to_json()]}


def test_the_registry_reads_only_the_first_batches_and_a_subjects_own_lengths_and_eos():
    bad = _batch([[0, 1, 2, 3]], lengths_key="meta", lengths=None)
    bad["input_ids"] = np.array([[4, EOS, 5, 6]])
    seen = []

    def lengths_of(batch):
        seen.append(batch)
        return [[2, 2]]

    subject = DataSubject([], [bad] * 6, lengths_of=lengths_of, eos_id=EOS, first_batches=2)
    result = run_check(subject, "data[boundaries]")
    assert len(seen) == 2 and all(b is bad for b in seen)
    assert result.message == ("batch 0 of the first 2: 1 boundary faults: position_ids: row 0's document 0 "
                              "(length 2) runs on into document 1 at position 2")
    # the subject's EOS id is read: the EOS form is checked too, and holds ([4, EOS] [5, 6])
    assert result.figures["batches"][0]["forms"] == ["position_ids", "eos"]


def test_the_registry_names_every_form_it_held_and_a_raising_loader_by_its_check():
    both = {**_batch([[0, 1, 0, 1, 2]], lengths=[[2, 3]]), "documents": np.array([[0, 0, 1, 1, 1]])}
    result = run_check(DataSubject([], [both]), "data[boundaries]")
    assert result.message == "the first 1 batches' documents, position_ids hold the packer's 2 documents"

    def broken():
        raise RuntimeError("gone")
        yield  # pragma: no cover

    raised = run_check(DataSubject([], broken), "data[boundaries]")
    assert raised.name == "data[boundaries]" and not raised.passed


def test_the_registry_skips_a_loader_that_gives_nothing_saying_so():
    skipped = run_check(DataSubject([], []), "data[boundaries]")
    assert skipped.skipped and skipped.message == "the loader gave no batch"
