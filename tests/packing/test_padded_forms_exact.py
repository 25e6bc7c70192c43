"""The padded layout's refusals and edges to the letter (issue 46's mutation of packing/forms.py), and rows of no
token read by the varlen forms (an IndexError before)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing.forms import cu_seqlens_of, flash_kwargs_of, padded_cu_seqlens_of, padded_layout_of

A = np.asarray


def refused(call) -> str:
    with pytest.raises(TensorcadError) as e:
        call()
    return str(e.value)


def test_each_refusal_names_its_array_and_says_why():
    assert refused(lambda: padded_layout_of("abc", A([0]))) == \
        "cu_seqlens: expected a numpy array or a torch tensor, got str"
    assert refused(lambda: padded_layout_of(A([0]), [0])) == \
        "cu_seqlens_padded: expected a numpy array or a torch tensor, got list"
    assert refused(lambda: padded_layout_of(A([[0, 1]]), A([0, 2]))) == \
        "cu_seqlens: expected 1D cumulative lengths beginning at 0"
    assert refused(lambda: padded_layout_of(A([0, 2]), A([], dtype=np.int64))) == \
        "cu_seqlens_padded: expected 1D cumulative lengths beginning at 0"
    assert refused(lambda: padded_layout_of(A([1, 2]), A([0, 2]))) == \
        "cu_seqlens: expected 1D cumulative lengths beginning at 0"
    assert refused(lambda: padded_layout_of(A([0, 5, 3]), A([0, 8, 8]))) == \
        "cu_seqlens[2]: 3 after 5: cumulative lengths never fall"
    assert refused(lambda: padded_layout_of(A([0, 3, 3, 1]), A([0, 4, 4, 4]))) == \
        "cu_seqlens[3]: 1 after 3: cumulative lengths never fall"  # the fall, not the empty document before it
    assert refused(lambda: padded_layout_of(A([0, 4]), A([0, 4, 8]))) == "cu_seqlens_padded: 2 documents, cu_seqlens 1"
    assert refused(lambda: padded_layout_of(A([0, 4, 9]), A([0, 4, 8]))) == \
        "cu_seqlens_padded[2]: document 1 of 5 tokens padded to 4: padding never drops a token"
    assert refused(lambda: padded_layout_of(A([0, 3]), A([0, 4]), True)) == "multiple: expected a positive integer, got True"
    assert refused(lambda: padded_cu_seqlens_of(A([[0, 0]]), 0)) == "multiple: expected a positive integer, got 0"


def test_no_document_and_empty_documents_are_layouts():
    assert padded_layout_of(A([0]), A([0])).tolist() == []
    assert padded_layout_of(A([0, 3, 3, 5]), A([0, 4, 4, 8]), 4).tolist() == [0, 1, 2, -1, 3, 4, -1, -1]


def test_torch_in_torch_out_for_both():
    torch = pytest.importorskip("torch")
    cu, padded = padded_cu_seqlens_of(torch.tensor([[0, 0, 0, 1]]), 4)
    assert isinstance(cu, torch.Tensor) and isinstance(padded, torch.Tensor)
    assert (cu.tolist(), padded.tolist()) == ([0, 3, 4], [0, 4, 8])


def test_rows_of_no_token():
    empty = np.zeros((2, 0), dtype=np.int64)
    assert cu_seqlens_of(empty).tolist() == [0]
    kwargs = flash_kwargs_of(empty)
    assert kwargs["cu_seq_lens_q"].tolist() == [0] and (kwargs["max_length_q"], kwargs["max_length_k"]) == (0, 0)


def test_the_eos_form_names_what_it_refuses():
    from tensorcad.packing.forms import documents_of_eos, eos_ids_of

    assert refused(lambda: documents_of_eos(A([1.5, 2.0]), 2)) == "ids: expected integers, got float64"
    assert documents_of_eos(A([5, 2, 7, 2, 3]), 2).tolist() == [0, 0, 1, 1, 2]  # one row in, one row out
    assert refused(lambda: eos_ids_of(A([1.5]), A([0]), 2)) == "ids: expected integers, got float64"
    assert refused(lambda: eos_ids_of(A([1]), A([0.5]), 2)) == "documents: expected integers, got float64"
    assert refused(lambda: eos_ids_of(A([5, 6, 7]), A([[0, 0, 1]]), 2)) == \
        "documents: shape (1, 3) differs from ids (3,)"
    inside = "token 2 is the EOS id but sits inside a document; it would end one there"
    assert refused(lambda: eos_ids_of(A([5, 2, 7, 8]), A([0, 0, 0, 1]), 2)).startswith(f"ids[1]: {inside}")
    assert refused(lambda: eos_ids_of(A([[5, 2, 6, 8]]), A([[0, 0, 0, 1]]), 2)).startswith(f"ids[0, 1]: {inside}")
    assert eos_ids_of(A([5, 6, 7, 2]), A([0, 0, 1, 1]), 2).tolist() == [5, 2, 7, 2]  # the row's end: any token


def test_the_other_converters_name_what_they_refuse():
    from tensorcad.packing.forms import (
        documents_of_cu_seqlens,
        documents_of_eos,
        documents_of_lengths,
        documents_of_seq_idx,
        positions_of,
    )

    assert refused(lambda: documents_of_seq_idx(A([0.5]))) == "seq_idx: expected integers, got float64"
    assert refused(lambda: documents_of_seq_idx(A([[0, 0], [1, 1]]))) == \
        "seq_idx[1, 0]: a row's documents are numbered from 0, got 1"
    assert refused(lambda: documents_of_seq_idx(A([0, 2, 2]))) == \
        "seq_idx[1]: 2 follows 0: seq_idx rises by one at each new document"
    assert refused(lambda: documents_of_seq_idx(A([[0, 1, 1], [0, 0, 2]]))) == \
        "seq_idx[1, 2]: 2 follows 0: seq_idx rises by one at each new document"
    one_row = documents_of_seq_idx(A([0, 1, 1]))
    assert one_row.tolist() == [0, 1, 1] and one_row.dtype == np.int64
    rows_ = "expected a non-empty list of rows, each a list of document lengths"
    assert refused(lambda: documents_of_lengths("x")) == f"lengths: {rows_}"
    assert refused(lambda: documents_of_lengths([])) == f"lengths: {rows_}"
    assert refused(lambda: documents_of_lengths([[2], []])) == "lengths[1]: expected a non-empty list of document lengths"
    assert refused(lambda: documents_of_lengths([[2], "ab"])) == \
        "lengths[1]: expected a non-empty list of document lengths"
    assert refused(lambda: documents_of_lengths([[2, True]])) == "lengths[0][1]: a document holds at least one token, got True"
    assert refused(lambda: documents_of_lengths([[2, 0]])) == "lengths[0][1]: a document holds at least one token, got 0"
    grid = documents_of_lengths([[2, 1], [3]])
    assert grid.tolist() == [[0, 0, 1], [0, 0, 0]] and grid.dtype == np.int64
    assert refused(lambda: documents_of_cu_seqlens([0, 3], 3)) == \
        "cu_seqlens: expected a numpy array or a torch tensor, got list"
    assert refused(lambda: documents_of_cu_seqlens(A([0, 3]), True)) == "seq: expected a positive integer, got True"
    assert refused(lambda: documents_of_cu_seqlens(A([0, 3]), 3, rows=0)) == "rows: expected a positive integer, got 0"
    assert refused(lambda: documents_of_cu_seqlens(A([0]), 3)) == "cu_seqlens: expected at least [0, 3], got [0]"
    assert refused(lambda: documents_of_cu_seqlens(A([1, 3]), 3)) == "cu_seqlens[0]: cumulative lengths begin at 0, got 1"
    assert refused(lambda: documents_of_cu_seqlens(A([0, 2, 2, 3]), 3)) == \
        "cu_seqlens[2]: 2 after 2: cumulative lengths rise at every document (none is empty)"
    assert refused(lambda: documents_of_cu_seqlens(A([True, False]), 3)) == \
        "cu_seqlens: expected a 1D integer array, got bool (2,)"
    assert documents_of_cu_seqlens(A([0, 1, 3, 5]), 5).tolist() == [[0, 1, 1, 2, 2]]  # a one-token document
    for bad in (True, -1, 1.0):
        assert refused(lambda: documents_of_eos(A([1, 2]), bad)) == \
            f"eos_id: expected a non-negative token id, got {bad!r}"
    assert documents_of_eos(A([0, 5, 0, 7]), 0).tolist() == [0, 1, 1, 2]  # token 0 may be the EOS, ending its document
    for width in ((1, 0), (0,)):
        empty = positions_of(np.zeros(width, dtype=np.int64))
        assert empty.shape == width and empty.dtype == np.int64
    assert positions_of(A([0, 0, 1])).tolist() == [0, 1, 0]


def test_positions_seq_idx_and_lengths_at_their_edges():
    from tensorcad.packing.forms import documents_of_positions, positions_of, row_lengths, seq_idx_of

    for width in ((1, 0), (0,)):
        empty = documents_of_positions(np.zeros(width, dtype=np.int64))
        assert empty.shape == width and empty.dtype == np.int64
    assert refused(lambda: documents_of_positions(A([1, 2, 0]))) == \
        "positions[0]: a row begins at position 1, not 0: its first document has no beginning"
    assert refused(lambda: documents_of_positions(A([[0, 1], [2, 3]]))) == \
        "positions[1, 0]: a row begins at position 2, not 0: its first document has no beginning"
    one = documents_of_positions(A([0, 1, 0, 1, 2]))
    assert one.tolist() == [0, 0, 1, 1, 1] and one.dtype == np.int64 and one.shape == (5,)
    assert row_lengths(np.zeros((2, 0), dtype=np.int64)) == [[], []]
    for convert in (row_lengths, seq_idx_of, cu_seqlens_of):
        assert refused(lambda: convert(A([0.5]))) == "documents: expected integers, got float64"
    numbered = seq_idx_of(A([3, 3, 5]))
    assert numbered.tolist() == [0, 0, 1] and numbered.dtype == np.int32 and numbered.shape == (3,)
    assert positions_of(A([[0, 0, 1], [4, 4, 4]])).tolist() == [[0, 1, 0], [0, 1, 2]]
    torch = pytest.importorskip("torch")
    back = positions_of(torch.tensor([0, 0, 1]))
    assert isinstance(back, torch.Tensor) and back.dtype == torch.int64 and back.tolist() == [0, 1, 0]
