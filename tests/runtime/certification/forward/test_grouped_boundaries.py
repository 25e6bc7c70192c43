"""Grouped boundary moves, exactly: the edited rows token by token, what is compared, and what a failure says.

Expected rows are written by hand from the definition (documents at one parity of a row one token shorter or
longer together, the row cut back to one length); verdicts are held to `check_boundaries`, one move a
forward (issue 42's mutation).
"""

from __future__ import annotations

import re

import torch

from tensorcad.runtime.certification.forward.boundaries import LONGER, SHORTER, check_boundaries
from tensorcad.runtime.certification.forward.grouped_boundaries import _edited_rows, check_boundaries_grouped
from tensorcad.runtime.certification.forward.isolation import segments

VOCAB = 40


def row_batch():
    # row 0: documents of 2, 3, 2 tokens; row 1: 4, 3
    documents = torch.tensor([[0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1, 1]])
    ids = torch.arange(14).reshape(2, 7) + 1
    positions = torch.tensor([[0, 1, 0, 1, 2, 0, 1], [0, 1, 2, 3, 0, 1, 2]])
    return ids, documents, positions


def test_shorter_cuts_each_edited_document_and_every_row_to_the_shortest():
    ids, documents, positions = row_batch()
    pieces = segments(documents)  # (row, document, first, end): 0:(0,0,0,2) 1:(0,1,2,5) 2:(0,2,5,7) 3:(1,0,0,4) 4:(1,1,4,7)
    (e_ids, e_docs, e_pos), shift_of = _edited_rows((ids, documents, positions), pieces, {0, 3}, SHORTER, {})
    assert e_ids.tolist() == [[1, 3, 4, 5, 6, 7], [8, 9, 10, 12, 13, 14]]
    assert e_docs.tolist() == [[0, 1, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1]]
    assert e_pos.tolist() == [[0, 0, 1, 2, 0, 1], [0, 1, 2, 0, 1, 2]]
    assert shift_of == {0: None, 1: -1, 2: -1, 3: None, 4: -1}


def test_longer_inserts_the_drawn_token_and_cuts_what_passes_the_row():
    ids, documents, positions = row_batch()
    pieces = segments(documents)
    (e_ids, e_docs, e_pos), shift_of = _edited_rows((ids, documents, positions), pieces, {1}, LONGER, {1: 39})
    assert e_ids.tolist() == [[1, 2, 3, 4, 5, 39, 6], [8, 9, 10, 11, 12, 13, 14]]
    assert e_docs.tolist() == [[0, 0, 1, 1, 1, 1, 2], [0, 0, 0, 0, 1, 1, 1]]
    assert e_pos.tolist() == [[0, 1, 0, 1, 2, 3, 0], [0, 1, 2, 3, 0, 1, 2]]
    assert shift_of == {0: 0, 1: None, 2: None, 3: 0, 4: 0}  # document 2 of row 0 now passes the row's end: cut
    (_, _, none), _ = _edited_rows((ids, documents, None), pieces, {1}, LONGER, {1: 39})
    assert none is None


def through_the_row(ids, documents, positions):
    """Outputs that read each token's place in the row: every document's start matters."""
    place = torch.arange(ids.shape[1])[None].expand_as(ids)
    return torch.nn.functional.one_hot(ids, VOCAB).float() + place[..., None].float()


def own(ids, documents, positions):
    return torch.nn.functional.one_hot(ids, VOCAB).float() + positions[..., None].float()


def test_a_model_that_reads_where_documents_start_fails_both_ways_naming_the_shift():
    ids, documents, positions = row_batch()
    grouped = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB)
    each = check_boundaries(through_the_row, ids, documents, positions, vocab=VOCAB)
    assert not grouped.passed and not each.passed
    assert {(m.change, m.neighbour) for m in grouped.moved} == {(m.change, m.neighbour) for m in each.moved}
    message = grouped.message()
    assert re.search(r"making document \d+ of row \d+( and \d+ before it)? one token (shorter|longer) "
                     r"\(document \d+ then starts at \d+, not \d+\) moved document \d+'s outputs by 1 at its "
                     r"position 0 \(tolerance [0-9.e-]+\)", message), message
    assert grouped.largest == 1.0  # a start moved by one token moves the outputs by exactly one


def test_a_model_that_reads_positions_within_documents_passes_in_fewer_forwards():
    ids, documents, positions = row_batch()
    grouped = check_boundaries_grouped(own, ids, documents, positions, vocab=VOCAB)
    each = check_boundaries(own, ids, documents, positions, vocab=VOCAB)
    assert grouped.passed and each.passed and grouped.moves == each.moves
    assert grouped.largest == 0.0 and grouped.method == "both parities of each row at once"
    assert grouped.forwards <= each.forwards


def test_a_grouped_move_says_how_many_documents_moved_its_neighbour_and_where_it_starts():
    from tensorcad.runtime.certification.forward.grouped_boundaries import GroupedMove

    one = GroupedMove(0, 2, SHORTER, 3, 10, 0.5, 4, shift=-1, edited=1)
    assert one.message(1e-5) == ("making document 2 of row 0 one token shorter (document 3 then starts at 9, not "
                                 "10) moved document 3's outputs by 0.5 at its position 4 (tolerance 1e-05)")
    three = GroupedMove(1, 4, LONGER, 5, 20, 0.25, 0, shift=3, edited=3)
    assert three.message(0.001) == ("making document 4 of row 1 and 2 before it one token longer (document 5 then "
                                    "starts at 23, not 20) moved document 5's outputs by 0.25 at its position 0 "
                                    "(tolerance 0.001)")
    two = GroupedMove(0, 1, SHORTER, 2, 7, 1.0, 1, shift=-2, edited=2)
    assert " and 1 before it " in two.message(1e-5) and "starts at 5, not 7" in two.message(1e-5)


def test_a_one_token_document_is_never_made_shorter_and_the_moves_are_boundaries():
    documents = torch.tensor([[0, 1, 1, 1, 2, 2, 3]])  # document 0 has one token: no shorter move of it
    ids = torch.arange(7)[None] + 1
    positions = torch.tensor([[0, 0, 1, 2, 0, 1, 0]])
    grouped = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB)
    each = check_boundaries(through_the_row, ids, documents, positions, vocab=VOCAB)
    # shorter: documents 1 and 2 (not the one-token 0); longer: 0 and 1 (2's neighbour ends the row)
    assert grouped.moves == each.moves == 2 + 2
    assert {(m.change, m.document) for m in grouped.moved if m.change == SHORTER} <= {(SHORTER, 1), (SHORTER, 2)}


def test_bad_positions_are_named_and_a_sample_moves_what_the_one_a_forward_check_moves():
    from tensorcad.errors import TensorcadError

    ids, documents, positions = row_batch()
    try:
        check_boundaries_grouped(own, ids, documents, positions[:, :3], vocab=VOCAB)
    except TensorcadError as error:
        assert error.path == "positions"
    else:
        raise AssertionError("positions of another shape were taken")
    grouped = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB, sample=2)
    each = check_boundaries(through_the_row, ids, documents, positions, vocab=VOCAB, sample=2)
    assert grouped.moves == each.moves == 2  # the same default seed: the same two moves
    assert {(m.change, m.neighbour) for m in grouped.moved} == {(m.change, m.neighbour) for m in each.moved}


def test_every_grouped_move_and_forward_of_a_small_batch_written_out():
    from tensorcad.runtime.certification.forward.grouped_boundaries import GroupedMove

    ids, documents, positions = row_batch()
    result = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB)
    # shorter: at even places pieces 0 and 3 (rows cut to 6), then piece 1 (row 1 cut to 6: its last piece not
    # compared); longer: piece 0 (row 0's last piece pushed past the end). One base run and three edited ones.
    assert result.forwards == 4 and result.moves == 4
    assert list(result.moved) == [
        GroupedMove(0, 0, SHORTER, 1, 2, 1.0, 0, shift=-1, edited=1),
        GroupedMove(0, 0, SHORTER, 2, 5, 1.0, 0, shift=-1, edited=1),
        GroupedMove(1, 0, SHORTER, 1, 4, 1.0, 0, shift=-1, edited=1),
        GroupedMove(0, 0, LONGER, 1, 2, 1.0, 0, shift=1, edited=1)]


def test_two_edited_documents_before_a_neighbour_shift_it_by_two_and_are_counted():
    from tensorcad.runtime.certification.forward.grouped_boundaries import GroupedMove

    documents = torch.tensor([[0, 0, 1, 1, 2, 2, 3, 3, 4, 4]])  # five documents of two tokens
    ids = torch.arange(10)[None] + 1
    positions = torch.tensor([[0, 1] * 5])
    result = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB)
    shorter = [m for m in result.moved if m.change == SHORTER]
    # even places 0 and 2 edited together: document 3 starts two tokens earlier, with two documents before it
    assert GroupedMove(0, 2, SHORTER, 3, 6, 2.0, 0, shift=-2, edited=2) in shorter
    assert result.largest == 2.0
    # the base run, then each parity once each way: shorter {0, 2} and {1, 3}, longer {0, 2} and {1}, every move
    # covered (no neighbour run alone)
    assert result.forwards == 5 and result.moves == 4 + 3


def test_the_token_a_longer_document_gains_is_the_one_a_forward_checks_and_a_tolerance_is_taken():
    ids, documents, positions = row_batch()

    def reads_the_token_before(x, d, p):  # each output reads the token before it in the row
        before = torch.roll(x, 1, dims=1).float()
        return torch.nn.functional.one_hot(x, VOCAB).float() + before[..., None] / 100

    grouped = check_boundaries_grouped(reads_the_token_before, ids, documents, positions, vocab=VOCAB)
    each = check_boundaries(reads_the_token_before, ids, documents, positions, vocab=VOCAB)
    longer = {m.neighbour: m.largest for m in grouped.moved if m.change == LONGER}
    assert longer and longer == {m.neighbour: m.largest for m in each.moved if m.change == LONGER}
    relaxed = check_boundaries_grouped(through_the_row, ids, documents, positions, vocab=VOCAB, atol=1.0)
    assert relaxed.passed and relaxed.tolerance == 1.0 and relaxed.largest == 1.0  # within: <=, not <


def test_a_model_that_raises_on_an_edited_row_is_named_with_the_edit():
    from tensorcad.errors import TensorcadError

    ids, documents, positions = row_batch()

    def only_the_batch(x, d, p):
        if x.shape != ids.shape or not torch.equal(x, ids):
            raise RuntimeError("edited")
        return through_the_row(x, d, p)

    try:
        check_boundaries_grouped(only_the_batch, ids, documents, positions, vocab=VOCAB)
    except TensorcadError as error:
        assert "model_fn (2 documents one token shorter together)" in str(error)
    else:
        raise AssertionError("a model that raises passed")
    try:
        check_boundaries_grouped(lambda x, d, p: torch.zeros(1), ids, documents, positions, vocab=VOCAB)
    except TensorcadError as error:
        assert str(error) == "model_fn: outputs shaped (1,) do not start with (B, T) = (2, 7)"
    else:
        raise AssertionError("outputs of no (B, T) passed")
