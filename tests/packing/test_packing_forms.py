"""The representations of a packing against the tools that write them.

The oracles are the tools themselves: Hugging Face's ``DataCollatorWithFlattening``
called on real feature lists (``position_ids``, ``seq_idx``, ``cu_seq_lens_*``,
``max_length_*``), and torchtitan's reading of EOS ids written out here as a loop
over tokens (a document ends at each EOS; the next begins after it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorcad.errors import TensorcadError
from tensorcad.packing import (
    cu_seqlens_of,
    documents_of_cu_seqlens,
    documents_of_eos,
    documents_of_lengths,
    documents_of_positions,
    documents_of_seq_idx,
    draw,
    eos_ids_of,
    flash_kwargs_of,
    positions_of,
    row_lengths,
    seq_idx_of,
)

transformers = pytest.importorskip("transformers")

LENGTH_LISTS = [[5], [1, 1, 1], [3, 7, 2, 9], [31, 1, 16], [1, 40, 2, 2, 8, 1]]


def _collate(lengths, **options):
    """The collator on real features: each document an example with its own token ids."""
    rng = np.random.default_rng(sum(lengths))
    features = [{"input_ids": rng.integers(3, 100, size=n).tolist()} for n in lengths]
    collator = transformers.DataCollatorWithFlattening(return_seq_idx=True, return_flash_attn_kwargs=True,
                                                       return_position_ids=True, **options)
    return features, collator(features)


@pytest.mark.parametrize("lengths", LENGTH_LISTS)
def test_every_form_equals_the_collators(lengths):
    _, batch = _collate(lengths)
    documents = documents_of_lengths([lengths])
    assert torch.equal(positions_of(torch.from_numpy(documents)), batch["position_ids"])
    seq_idx = seq_idx_of(torch.from_numpy(documents))
    assert seq_idx.dtype == batch["seq_idx"].dtype == torch.int32 and torch.equal(seq_idx, batch["seq_idx"])
    kwargs = flash_kwargs_of(torch.from_numpy(documents))
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert kwargs[key].dtype == batch[key].dtype and torch.equal(kwargs[key], batch[key])
    assert kwargs["max_length_q"] == batch["max_length_q"] == kwargs["max_length_k"] == max(lengths)
    assert row_lengths(documents) == [lengths]


@pytest.mark.parametrize("lengths", LENGTH_LISTS)
def test_the_collators_batch_reads_back_to_its_documents(lengths):
    _, batch = _collate(lengths)
    expected = torch.from_numpy(documents_of_lengths([lengths]))
    T = batch["input_ids"].shape[1]
    assert torch.equal(documents_of_positions(batch["position_ids"]), expected)
    assert torch.equal(documents_of_seq_idx(batch["seq_idx"]), expected)
    assert torch.equal(documents_of_cu_seqlens(batch["cu_seq_lens_q"], seq=T), expected)


def test_a_position_ids_start_of_two_reads_back_with_start_two():
    # RoBERTa-like models number positions from padding_idx + 1; the collator's position_ids_start says so.
    _, batch = _collate([4, 2, 6], position_ids_start=2)
    assert documents_of_positions(batch["position_ids"], start=2).tolist() == [[0] * 4 + [1] * 2 + [2] * 6]
    with pytest.raises(TensorcadError, match=r"positions\[0, 0\]: a row begins at position 2, not 0"):
        documents_of_positions(batch["position_ids"])


def test_drawn_rows_round_trip_through_every_form():
    documents, positions = draw(rows=3, seq=256, mean=40, spread=1.0, seed=3)
    assert np.array_equal(documents_of_positions(positions), documents)
    assert np.array_equal(documents_of_seq_idx(seq_idx_of(documents)), documents)
    assert np.array_equal(documents_of_cu_seqlens(cu_seqlens_of(documents), seq=256, rows=3), documents)
    # Each row handed to the collator as its own feature list gives that row's cu_seq_lens, shifted.
    cu = cu_seqlens_of(documents)
    for r, lengths in enumerate(row_lengths(documents)):
        _, batch = _collate(lengths)
        inside = cu[(cu >= r * 256) & (cu <= (r + 1) * 256)] - r * 256
        assert np.array_equal(inside, batch["cu_seq_lens_q"].numpy())


# --- EOS ids, torchtitan's way ------------------------------------------------------------------


def _torchtitan_documents(row: list[int], eos_id: int) -> list[int]:
    # torchtitan's document mask numbers each position by the EOS tokens strictly before it.
    out, seen = [], 0
    for token in row:
        out.append(seen)
        seen += token == eos_id
    return out


def test_eos_ids_read_as_torchtitan_reads_them():
    eos = 2
    # Samples tokenised with an EOS at the end, laid end to end and cut into a row (torchtitan's dataset).
    samples = [[5, 6, 7, eos], [8, eos], [9, 9, 9, 9, eos], [4, 4]]
    row = [t for s in samples for t in s]
    documents = documents_of_eos(np.array([row]), eos)
    assert documents.tolist() == [_torchtitan_documents(row, eos)]
    assert row_lengths(documents) == [[4, 2, 5, 2]]


def test_eos_ids_written_from_documents_read_back():
    documents, _ = draw(rows=2, seq=128, mean=16, spread=1.0, seed=1)
    ids = torch.randint(3, 100, (2, 128), generator=torch.Generator().manual_seed(0))
    with_eos = eos_ids_of(ids, torch.from_numpy(documents), eos_id=2)
    assert isinstance(with_eos, torch.Tensor) and with_eos.dtype == ids.dtype
    for r in range(2):
        assert documents_of_eos(with_eos, 2)[r].tolist() == _torchtitan_documents(with_eos[r].tolist(), 2)
    assert np.array_equal(documents_of_eos(with_eos, 2).numpy(), documents)
    # Only the closing token of each document changed.
    changed = (with_eos != ids).numpy()
    closes = np.zeros_like(changed)
    closes[:, :-1] = documents[:, 1:] != documents[:, :-1]
    assert np.array_equal(changed, closes)


# --- round trips --------------------------------------------------------------------------------

row_of_lengths = st.lists(st.integers(1, 12), min_size=1, max_size=10)


@st.composite
def batches(draw_):
    first = draw_(row_of_lengths)
    rows = [first]
    for _ in range(draw_(st.integers(0, 3))):
        # Every row holds the same number of tokens: cut another list of lengths to it.
        lengths, left = [], sum(first)
        while left:
            n = min(left, draw_(st.integers(1, 12)))
            lengths.append(n)
            left -= n
        rows.append(lengths)
    return rows


@given(batches(), st.booleans())
def test_every_form_round_trips(rows, as_torch):
    documents = documents_of_lengths(rows)
    seq = documents.shape[1]
    given_ = torch.from_numpy(documents) if as_torch else documents
    kind = torch.Tensor if as_torch else np.ndarray
    for there, back in (
        (positions_of, documents_of_positions),
        (seq_idx_of, documents_of_seq_idx),
        (cu_seqlens_of, lambda cu: documents_of_cu_seqlens(cu, seq=seq, rows=len(rows))),
        (lambda d: eos_ids_of(d * 0 + 7, d, eos_id=1), lambda ids: documents_of_eos(ids, 1)),
    ):
        form = there(given_)
        assert isinstance(form, kind)
        again = back(form)
        assert isinstance(again, kind)
        assert np.array_equal(np.asarray(again), documents)
    assert row_lengths(documents) == [list(r) for r in rows]


@given(st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_any_ids_renumber_to_the_same_runs(ids):
    # A document is a run of equal ids, whatever the ids are: every form agrees on the runs.
    documents = np.array([ids])
    numbered = documents_of_seq_idx(seq_idx_of(documents))
    assert np.array_equal(documents_of_positions(positions_of(documents)), numbered)
    assert np.array_equal(documents_of_cu_seqlens(cu_seqlens_of(documents), seq=len(ids)), numbered)
    change = np.r_[False, documents[0, 1:] != documents[0, :-1]]
    assert np.array_equal(numbered[0], np.cumsum(change))


# --- impossible input ---------------------------------------------------------------------------


@pytest.mark.parametrize("call,match", [
    (lambda: documents_of_positions(np.array([[0, 1, 3, 4]])), r"positions\[0, 2\]: 3 follows 1"),
    (lambda: documents_of_positions(np.array([0, 1, 1])), r"positions\[2\]: 1 follows 1"),
    (lambda: documents_of_positions(np.array([[0, 1], [1, 2]])), r"positions\[1, 0\]: a row begins at position 1"),
    (lambda: documents_of_positions(np.array([0.0, 1.0])), r"positions: expected integers, got float64"),
    (lambda: documents_of_positions([0, 1]), r"positions: expected a numpy array or a torch tensor, got list"),
    (lambda: documents_of_cu_seqlens(np.array([0, 3, 7]), seq=8), r"cu_seqlens\[2\]: ends at 7, but 1 x 8 tokens end at 8"),
    (lambda: documents_of_cu_seqlens(np.array([1, 8]), seq=8), r"cu_seqlens\[0\]: cumulative lengths begin at 0"),
    (lambda: documents_of_cu_seqlens(np.array([0, 4, 4, 8]), seq=8), r"cu_seqlens\[2\]: 4 after 4"),
    (lambda: documents_of_cu_seqlens(np.array([0, 6, 8]), seq=4, rows=2), r"a document crosses from row 0 into row 1"),
    (lambda: documents_of_cu_seqlens(np.array([[0, 8]]), seq=8), r"cu_seqlens: expected a 1D integer array"),
    (lambda: documents_of_cu_seqlens(np.array([0, 8]), seq=0), r"seq: expected a positive integer"),
    (lambda: documents_of_seq_idx(np.array([[1, 1, 2]])), r"seq_idx\[0, 0\]: a row's documents are numbered from 0"),
    (lambda: documents_of_seq_idx(np.array([[0, 2, 2]])), r"seq_idx\[0, 1\]: 2 follows 0"),
    (lambda: documents_of_seq_idx(np.array([[0, 1, 0]])), r"seq_idx\[0, 2\]: 0 follows 1"),
    (lambda: eos_ids_of(np.array([[5, 2, 5, 5]]), np.array([[0, 0, 0, 1]]), 2), r"ids\[0, 1\]: token 2 is the EOS id"),
    (lambda: eos_ids_of(np.array([[5, 5]]), np.array([[0, 0, 1]]), 2), r"documents: shape \(1, 3\) differs from ids \(1, 2\)"),
    (lambda: documents_of_eos(np.array([[5, 5]]), -1), r"eos_id: expected a non-negative token id"),
    (lambda: documents_of_lengths([[3, 2], [4]]), r"lengths\[1\]: the row holds 4 tokens, row 0 holds 5"),
    (lambda: documents_of_lengths([[3, 0]]), r"lengths\[0\]\[1\]: a document holds at least one token"),
    (lambda: positions_of(np.zeros((1, 2, 3), dtype=np.int64)), r"documents: expected shape \(B, T\) or \(T,\)"),
])
def test_impossible_input_is_refused_naming_where(call, match):
    with pytest.raises(TensorcadError, match=match):
        call()


def test_numpy_in_never_imports_torch():
    # The engine imports no torch: converting numpy arrays must not pull it in.
    import subprocess
    import sys

    code = ("import sys, numpy as np; from tensorcad.packing import positions_of, cu_seqlens_of; "
            "positions_of(np.array([[0, 0, 1]])); cu_seqlens_of(np.array([0, 1])); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_collators_numpy_batch_reads_back_as_numpy():
    features = [{"input_ids": list(range(1, n + 1))} for n in (4, 9, 1, 6)]
    batch = transformers.DataCollatorWithFlattening(return_seq_idx=True, return_flash_attn_kwargs=True,
                                                    return_tensors="np")(features)
    expected = documents_of_lengths([[4, 9, 1, 6]])
    for form in (documents_of_positions(batch["position_ids"]), documents_of_seq_idx(batch["seq_idx"]),
                 documents_of_cu_seqlens(batch["cu_seq_lens_q"], seq=20)):
        assert isinstance(form, np.ndarray) and np.array_equal(form, expected)
    assert np.array_equal(seq_idx_of(expected), batch["seq_idx"]) and seq_idx_of(expected).dtype == np.int32
    assert np.array_equal(cu_seqlens_of(expected), batch["cu_seq_lens_q"])
    assert cu_seqlens_of(expected).dtype == batch["cu_seq_lens_q"].dtype == np.int32
