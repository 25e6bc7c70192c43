"""The forms a plan and a batch come in, read or refused word for word (``plan.py``).

A callable's parts, an index map of one row for many, PyTorch's per-document
balancer laying out the row its lengths give, and every form of batch; the batches
are ``cp_rows``' (laid out by hand), and what each must read or name is worked out
here from them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from cp_rows import ONE, TWO, hand_batch, split  # noqa: E402 - this folder, on sys.path
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (  # noqa: E402
    _PerDocumentHeadTailLoadBalancer,
)

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.parallel.certificate import check_cp_plan  # noqa: E402
from tensorcad.runtime.certification.parallel.plan import batch_of  # noqa: E402

IGNORE = -100


@pytest.mark.parametrize("plan, failure", [
    (split(([[0, 1, 2, 3], [0, 1, 2, 3]], [4, 5, 6, 7])), "rank 0's indices: expected (S,) or (1, S), got (2, 4)"),
    (split(([[[0, 1, 2, 3]]], [4, 5, 6, 7])), "rank 0's indices: expected (S,) or (1, S), got (1, 1, 4)"),
    (split(([0, 1, 2, 3], [4, 5, 6, 7]), labels=(None, [[1, 2]] * 3)), "rank 1's labels: expected (S,) or (1, S), got (3, 2)"),
    (split(([0, 1, 2, 3], [4, 5, 6, 7]), row=([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 4, 5, 7, 6])),
     "plan: rank 1 describes another row than rank 0"),
    (split(([0, 1, 2, 3], [4, 5, 6, 7]), row=([[0, 1, 2, 3, 4, 5, 6, 7]] * 2, None)),
     "rank 0's row: expected (S,) or (1, S), got (2, 8)"),
])
def test_a_callables_parts_are_read_naming_the_rank_and_the_part(plan, failure):
    assert check_cp_plan(plan, ONE, 2).failures == (failure,)


def test_a_callable_must_return_its_indices():
    with pytest.raises(TypeError) as refused:
        check_cp_plan(lambda batch, rank, n: {"row": [0]}, ONE, 2)
    assert str(refused.value) == ("plan(batch, 0, 2) returns a mapping with 'indices' (its slots' offsets into the "
                                  "plan's row), not dict")
    with pytest.raises(TypeError, match=r"not list$"):
        check_cp_plan(lambda batch, rank, n: [0, 1, 2, 3], ONE, 2)
    with pytest.raises(TypeError) as unknown:
        check_cp_plan(object(), ONE, 2)
    assert str(unknown.value) == "a plan is an index map, a PyTorch load balancer or a callable, not object"


def test_one_row_of_an_index_map_serves_every_row():
    result = check_cp_plan(torch.arange(8).unsqueeze(0), TWO, 2)
    assert result.passed and result.form == "an index map"
    assert check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7])), TWO, 2).form == "a callable"


# -- the batch as given -----------------------------------------------------------------------


def test_a_mapping_with_documents_and_labels():
    ids, documents, _ = ONE
    labels = ids + 1000
    absolute = torch.arange(8).unsqueeze(0)  # positions that do not restart: the documents come from "documents"
    read = batch_of({"input_ids": ids, "documents": documents, "position_ids": absolute, "labels": labels})
    assert torch.equal(read.documents, documents) and torch.equal(read.positions, absolute)
    assert read.targets().tolist() == [[1102, 1103, IGNORE, 1105, 1106, 1107, 1108, IGNORE]]


def test_tuples_of_two_and_three_and_one_dimensional_rows():
    ids, documents, positions = ONE
    two = batch_of((ids[0], documents[0]))
    assert two.ids.shape == (1, 8) and two.positions.tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    three = batch_of((ids, documents, positions + 10))
    assert three.positions.tolist() == [[10, 11, 12, 10, 11, 12, 13, 14]] and three.labels is None


@pytest.mark.parametrize("batch, message", [
    ((1, 2, 3, 4), "batch: a batch is (ids, documents[, positions]) or a mapping with input_ids and documents or "
                   "position_ids (and labels), not tuple of 4"),
    (5, "batch: a batch is (ids, documents[, positions]) or a mapping with input_ids and documents or position_ids "
        "(and labels), not int"),
    ({"documents": ONE[1]}, "batch: needs input_ids and the documents (or position_ids) of each position"),
    ({"input_ids": ONE[0]}, "batch: needs input_ids and the documents (or position_ids) of each position"),
    ((ONE[0], ONE[1][:, :7]), "batch.documents: shaped (1, 7), the ids (1, 8)"),
    ((ONE[0], ONE[1], ONE[2][:, :7]), "batch.positions: shaped (1, 7), the ids (1, 8)"),
    ({"input_ids": ONE[0], "documents": ONE[1], "labels": ONE[0][:, :7]}, "batch.labels: shaped (1, 7), the ids (1, 8)"),
])
def test_a_batch_of_no_known_form_is_refused_naming_it(batch, message):
    with pytest.raises(TensorcadError) as refused:
        batch_of(batch)
    assert str(refused.value) == message


# -- PyTorch's per-document balancer: the row its lengths lay out ---------------------------


def test_per_row_lengths_each_lay_out_their_row():
    # Row 0: 3 + 1 padding, 5 + 3; row 1: 4, 2 + 2, 2 + 2: eight padding slots over two rows.
    balancer = _PerDocumentHeadTailLoadBalancer([[4, 8], [4, 4, 4]], 2, "cpu")
    result = check_cp_plan(balancer, TWO, 2)
    assert result.passed, result.message()
    assert (result.slots, result.padding) == (12, 4)


def test_one_row_of_lengths_lays_out_every_row():
    twins = hand_batch((3, 5), (3, 5))
    result = check_cp_plan(_PerDocumentHeadTailLoadBalancer([[4, 8]], 2, "cpu"), twins, 2)
    assert result.passed, result.message()
    assert (result.slots, result.padding) == (12, 4)


def test_a_one_token_last_document_and_a_listed_document_with_no_tokens():
    short = hand_batch((3, 4, 1))
    assert check_cp_plan(_PerDocumentHeadTailLoadBalancer([[4, 4, 4]], 2, "cpu"), short, 2).passed
    # A fourth listed document the row does not have: four slots of padding.
    extra = check_cp_plan(_PerDocumentHeadTailLoadBalancer([[4, 4, 4, 4]], 2, "cpu"), short, 2)
    assert extra.passed and (extra.slots, extra.padding) == (16, 8)


class Ragged:
    """A balancer whose rows lay out 12 and 8 slots (PyTorch's own cannot be built so)."""

    seq_length_per_doc = ((4, 8), (4, 4))

    def _generate_indices(self):
        return torch.arange(12).unsqueeze(0)


def test_a_balancer_laying_out_rows_of_different_lengths_fails():
    assert check_cp_plan(Ragged(), TWO, 2).failures == ("plan: the balancer lays out rows of different lengths",)


class Cubic:
    """A balancer whose indices are (1, 1, 8): one dimension too many."""

    def _generate_indices(self):
        return torch.arange(8).reshape(1, 1, 8)


def test_an_index_map_or_balancer_of_the_wrong_shape_fails_naming_the_plan():
    assert check_cp_plan(torch.arange(8).reshape(1, 1, 8), ONE, 2).failures == (
        "plan: expected (S,) or (1, S), got (1, 1, 8)",)
    assert check_cp_plan(Cubic(), ONE, 2).failures == ("plan: expected (S,) or (1, S), got (1, 1, 8)",)
