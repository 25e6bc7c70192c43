"""Padded layouts: cu_seqlens beside cu_seqlens_padded, both ways, against the layout built slot by slot here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorcad.errors import TensorcadError
from tensorcad.packing import documents_of_lengths, padded_cu_seqlens_of, padded_layout_of


def _by_hand(lengths: list[list[int]], multiple: int) -> tuple[list[int], list[int], list[int]]:
    """cu_seqlens, cu_seqlens_padded and the slot -> token layout, one token and one pad slot at a time."""
    cu, cu_padded, layout, token = [0], [0], [], 0
    for row in lengths:
        for n in row:
            for _ in range(n):
                layout.append(token)
                token += 1
            while len(layout) % multiple or len(layout) - cu_padded[-1] < n:
                layout.append(-1)
            cu.append(token)
            cu_padded.append(len(layout))
    return cu, cu_padded, layout


@given(st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=6), min_size=1, max_size=3),
       st.integers(1, 16))
def test_both_ways_match_the_layout_built_by_hand(rows, multiple):
    seq = max(sum(r) for r in rows)
    rows = [r[:-1] + [r[-1] + seq - sum(r)] for r in rows]  # every row the same length
    documents = documents_of_lengths(rows)
    cu, cu_padded = padded_cu_seqlens_of(documents, multiple)
    want_cu, want_padded, want_layout = _by_hand(rows, multiple)
    assert cu.tolist() == want_cu and cu_padded.tolist() == want_padded
    assert cu.dtype == np.int32 and cu_padded.dtype == np.int32
    assert padded_layout_of(cu, cu_padded, multiple).tolist() == want_layout
    assert padded_layout_of(cu, cu_padded).tolist() == want_layout


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 2]])
    cu, cu_padded = padded_cu_seqlens_of(documents, 4)
    assert isinstance(cu, torch.Tensor) and cu.tolist() == [0, 3, 8, 9]
    assert cu_padded.tolist() == [0, 4, 12, 16]
    layout = padded_layout_of(cu, cu_padded, 4)
    assert isinstance(layout, torch.Tensor)
    assert layout.tolist() == [0, 1, 2, -1, 3, 4, 5, 6, 7, -1, -1, -1, 8, -1, -1, -1]


def test_bad_layouts_are_refused_naming_the_document():
    cu = np.array([0, 3, 8])
    with pytest.raises(TensorcadError, match=r"cu_seqlens_padded\[2\].*document 1 of 5 tokens padded to 4"):
        padded_layout_of(cu, np.array([0, 4, 8]))
    with pytest.raises(TensorcadError, match=r"cu_seqlens_padded\[2\].*padded to 12, not to 8 \(a multiple of 4\)"):
        padded_layout_of(cu, np.array([0, 4, 16]), 4)
    with pytest.raises(TensorcadError, match="2 documents, cu_seqlens 1"):
        padded_layout_of(np.array([0, 3]), np.array([0, 4, 8]))
    with pytest.raises(TensorcadError, match=r"cu_seqlens\[2\]"):
        padded_layout_of(np.array([0, 3, 2]), np.array([0, 4, 8]))
    with pytest.raises(TensorcadError, match="^cu_seqlens_padded"):
        padded_layout_of(cu, np.array([1, 4, 8]))
    with pytest.raises(TensorcadError, match="^multiple"):
        padded_cu_seqlens_of(np.zeros((1, 4), dtype=np.int64), 0)
