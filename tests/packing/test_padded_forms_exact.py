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
