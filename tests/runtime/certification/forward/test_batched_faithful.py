"""Batched faithful, exactly: the buckets, the padded rows, its calls and what it says (issue 42's mutation).

Every expected figure is written from the definitions: the buckets by trying every cut, the padded rows
token by token, the calls as the base run, one a bucket and one a document run alone.
"""

from __future__ import annotations

import pytest
import torch

from tensorcad.runtime.certification.forward.batched_faithful import buckets, check_faithful_batched, padded_rows
from tensorcad.runtime.certification.forward.faithful import check_faithful

VOCAB = 40
LENGTHS = (3, 7, 2, 6, 5, 9)


def batch():
    documents = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.tensor(LENGTHS))[None]
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(1))
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    return ids, documents, positions


def own(ids, documents=None, positions=None):
    """An isolated, causal model: each output a function of its token and position."""
    out = torch.nn.functional.one_hot(ids, VOCAB).float()
    if positions is not None:
        out = out + positions[..., None].float() / 100
    return out


def test_the_buckets_are_the_cut_with_the_fewest_padded_tokens():
    for lengths in ([5], [4, 4], [1, 9, 2, 8], [3, 3, 3, 10], [7, 1, 1, 1, 1, 6]):
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        cost = lambda part: len(part) * max((lengths[i] for i in part), default=0)  # noqa: E731
        best = min(cost(order[:k]) + cost(order[k:]) for k in range(1, len(order) + 1))
        got = buckets(lengths)
        assert sorted(i for part in got for i in part) == list(range(len(lengths)))
        assert sum(cost(part) for part in got) == best and all(got)
        assert all(lengths[a] <= lengths[b] for part in got for a, b in zip(part, part[1:]))
    assert buckets([]) == [] and buckets([4, 2, 3], most=1) == [[1, 2, 0]]


def test_padded_rows_hold_each_document_then_padding_as_a_second_document():
    ids, documents, positions = batch()
    pieces = [(0, 1, 3, 10), (0, 2, 10, 12)]  # documents 1 (7 tokens) and 2 (2 tokens)
    rows_ids, rows_docs, rows_pos = padded_rows(ids, documents, positions, pieces)
    assert rows_ids.tolist() == [ids[0, 3:10].tolist(), ids[0, 10:12].tolist() + [0] * 5]
    assert rows_docs.tolist() == [[0] * 7, [0, 0] + [1] * 5]
    assert rows_pos.tolist() == [list(range(7)), [0, 1, 0, 1, 2, 3, 4]]
    assert padded_rows(ids, documents, None, pieces)[2] is None
    assert rows_ids.dtype == ids.dtype and rows_docs.dtype == documents.dtype and rows_pos.dtype == positions.dtype


def test_a_faithful_model_costs_the_base_run_and_one_call_a_bucket():
    ids, documents, positions = batch()
    result = check_faithful_batched(own, ids, documents, positions)
    calls = 1 + len(buckets(list(LENGTHS)))
    assert result.passed and result.calls == calls
    assert result.method == f"{calls} calls: the documents alone as rows of padded batches"
    assert result.largest == 0.0 and result.compared == result.documents == len(LENGTHS)


def test_padding_that_reaches_a_document_is_run_alone_and_only_a_real_difference_is_reported():
    ids, documents, positions = batch()

    def reads_the_row(x, d, p):  # each row's outputs shift by its mean token: padding reaches every document
        return own(x, d, p) + x.float().mean(dim=1, keepdim=True)[..., None]

    grouped = check_faithful_batched(reads_the_row, ids, documents, positions)
    each = check_faithful(reads_the_row, ids, documents, positions)
    assert not grouped.passed and set(grouped.differences) == set(each.differences)
    doubted = len(LENGTHS)  # every padded row moved (the packed row's mean differs from each row's)
    assert grouped.calls == 1 + len(buckets(list(LENGTHS))) + doubted
    assert grouped.method.endswith(f"({doubted} beyond the tolerance there run alone)")
    assert grouped.largest == pytest.approx(each.largest)


@pytest.mark.parametrize("fault, says", [
    ("raises", "one call a document: the padded batch raised ValueError"),
    ("shape", "one call a document: the padded batch gave outputs shaped"),
])
def test_a_model_that_cannot_take_a_padded_batch_runs_one_a_call_and_says_why(fault, says):
    ids, documents, positions = batch()

    def one_row_only(x, d, p):
        if x.shape[0] > 1:
            if fault == "raises":
                raise ValueError("one row at a time")
            return own(x, d, p)[:, :1]
        return own(x, d, p)

    result = check_faithful_batched(one_row_only, ids, documents, positions)
    assert result.passed and result.method.startswith(says)
    assert result.calls == check_faithful(one_row_only, ids, documents, positions).calls


def test_a_sample_checks_only_its_documents():
    ids, documents, positions = batch()
    result = check_faithful_batched(own, ids, documents, positions, sample=3, seed=2)
    assert result.compared == 3 and result.documents == len(LENGTHS)
    from tensorcad.runtime.certification.forward.isolation import pick

    assert result.calls == 1 + len(buckets([LENGTHS[i] for i in pick(len(LENGTHS), 3, 2)]))


def test_bad_positions_and_outputs_are_named():
    ids, documents, positions = batch()
    from tensorcad.errors import TensorcadError

    with pytest.raises(TensorcadError, match=r"^positions: shape \(1, 3\) differs from ids \(1, 32\)"):
        check_faithful_batched(own, ids, documents, positions[:, :3])
    with pytest.raises(TensorcadError, match=r"^model_fn: outputs shaped \(1,\) do not start with \(B, T\) = "
                                             r"\(1, 32\)"):
        check_faithful_batched(lambda x, d, p: torch.zeros(1), ids, documents, positions)


@pytest.mark.parametrize("given", [False, True])
def test_a_lone_run_of_the_wrong_shape_names_the_function_that_ran_it(given):
    ids, documents, positions = batch()
    from tensorcad.errors import TensorcadError

    def padded_ok_alone_not(x, d, p):  # right on a padded batch, wrong for one document: doubted, then refused
        out = own(x, d, p) + (x.shape[0] > 1) * x.float().mean(dim=1, keepdim=True)[..., None]
        return out[:, :1] if x.shape[0] == 1 and x.shape[1] != ids.shape[1] else out

    options = {"alone_fn": padded_ok_alone_not} if given else {}
    model = own if given else padded_ok_alone_not
    who = "alone_fn" if given else "model_fn"
    with pytest.raises(TensorcadError, match=rf"^{who}: outputs shaped \(1, 1, {VOCAB}\) for a document of"):
        check_faithful_batched(model, ids, documents, positions, **options)


def test_the_tolerance_is_the_outputs_dtypes_and_the_sample_is_faithfuls():
    ids, documents, positions = batch()
    from tensorcad.runtime.certification.forward.faithful import default_tolerance

    wide = check_faithful_batched(lambda x, d, p: own(x, d, p).double(), ids, documents, positions)
    assert wide.tolerance == default_tolerance(torch.float64) != default_tolerance(torch.float32)
    def reads_the_row(x, d, p):
        return own(x, d, p) + x.float().mean(dim=1, keepdim=True)[..., None]

    sampled = check_faithful_batched(reads_the_row, ids, documents, positions, sample=2)
    each = check_faithful(reads_the_row, ids, documents, positions, sample=2)  # the same default seed: the same two
    assert sampled.compared == each.compared == 2
    assert {(d.row, d.document) for d in sampled.differences} == {(d.row, d.document) for d in each.differences}


def test_the_buckets_exactly_the_first_cheapest_cut():
    def first_cheapest(lengths):
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        if len(order) < 2:
            return [order] if order else []
        cost = lambda part: len(part) * lengths[part[-1]] if part else 0  # noqa: E731
        costs = [cost(order[:k]) + cost(order[k:]) for k in range(1, len(order) + 1)]
        k = 1 + costs.index(min(costs))
        return [p for p in (order[:k], order[k:]) if p]

    for lengths in ([4, 4], [1, 9], [5, 5, 5], [2, 3], [9, 1, 8, 2], [3, 3, 3, 10], [6, 1, 1, 1, 1, 6], [7]):
        assert buckets(lengths) == first_cheapest(lengths), lengths


def test_each_padded_batch_is_a_bucket_at_its_longest_document():
    ids, documents, positions = batch()
    shapes = []

    def records(x, d, p):
        shapes.append(tuple(x.shape))
        return own(x, d, p)

    check_faithful_batched(records, ids, documents, positions)
    wanted = [(len(part), max(LENGTHS[i] for i in part)) for part in buckets(list(LENGTHS))]
    assert shapes[1:] == wanted  # after the packed run


def test_the_one_a_call_fallback_keeps_every_setting():
    ids, documents, positions = batch()

    def one_row_only(x, d, p):
        if x.shape[0] > 1:
            raise ValueError("one row at a time")
        assert p is not None  # the batch's positions, passed on
        return own(x, d, p)

    result = check_faithful_batched(one_row_only, ids, documents, positions, atol=0.5, sample=3, seed=4)
    each = check_faithful(one_row_only, ids, documents, positions, atol=0.5, sample=3, seed=4)
    assert result.tolerance == each.tolerance == 0.5 and result.compared == each.compared == 3
    assert result.calls == each.calls
    alone = check_faithful_batched(one_row_only, ids, documents, positions, alone_fn=one_row_only)
    assert alone.reference == check_faithful(one_row_only, ids, documents, positions, alone_fn=one_row_only).reference


def test_a_padded_batch_whose_outputs_are_no_tensor_is_named():
    from tensorcad.errors import TensorcadError

    ids, documents, positions = batch()
    with pytest.raises(TensorcadError, match=r"model_fn \(documents alone as rows of a padded batch\)"):
        check_faithful_batched(lambda x, d, p: own(x, d, p) if x.shape[0] == 1 else "no tensor",
                               ids, documents, positions)


@pytest.mark.parametrize("fault", ["raises", "shape"])
def test_each_fall_back_keeps_the_settings_and_names_what_the_one_a_call_check_names(fault):
    ids, documents, positions = batch()
    T = ids.shape[1]

    def off_when_packed(x, d, p):  # padded batches refused; the packed row off by one: every document unfaithful
        if x.shape[0] > 1:
            if fault == "raises":
                raise ValueError("one row at a time")
            return own(x, d, p)[:, :1]
        assert p is not None
        return own(x, d, p) + float(x.shape[1] == T)

    options = dict(atol=0.5, sample=3, seed=4)
    result = check_faithful_batched(off_when_packed, ids, documents, positions, **options)
    each = check_faithful(off_when_packed, ids, documents, positions, **options)
    assert set(result.differences) == set(each.differences) and len(each.differences) == 3
    assert result.tolerance == 0.5 and result.reference == each.reference
    alone = check_faithful_batched(off_when_packed, ids, documents, positions, alone_fn=off_when_packed)
    assert alone.reference == check_faithful(off_when_packed, ids, documents, positions,
                                             alone_fn=off_when_packed).reference


def test_a_tolerance_of_zero_holds_an_exact_model_and_the_words_say_how_many_ran_alone():
    ids, documents, positions = batch()
    exact = check_faithful_batched(own, ids, documents, positions, atol=0.0)
    assert exact.passed and exact.reference == check_faithful(own, ids, documents, positions).reference

    def reads_the_row(x, d, p):
        return own(x, d, p) + x.float().mean(dim=1, keepdim=True)[..., None]

    result = check_faithful_batched(reads_the_row, ids, documents, positions)
    calls = 1 + len(buckets(list(LENGTHS))) + len(LENGTHS)
    assert result.method == (f"{calls} calls: the documents alone as rows of padded batches "
                             f"({len(LENGTHS)} beyond the tolerance there run alone)")
