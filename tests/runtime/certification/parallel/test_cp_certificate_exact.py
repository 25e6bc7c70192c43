"""The context-parallel plan certificate, word for word, on batches small enough to lay out by hand.

The batches are ``cp_rows``': ``ONE``, one row of two documents (3 and 5 tokens), and
``TWO``, with a second row of three (4, 2 and 2). Every plan below is written out slot by slot, and every message, count and offset the
certificate must give is worked out here from that layout: which positions a rank
holds, where each document begins, what each target is.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from cp_rows import ONE, TWO, split  # noqa: E402 - this folder, on sys.path

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.parallel.certificate import (  # noqa: E402
    CpPlanResult,
    _listing,
    _numbers,
    _span,
    check_cp_plan,
)
from tensorcad.runtime.certification.parallel.faithful import RankDifference, check_cp_faithful  # noqa: E402
from tensorcad.runtime.certification.parallel.plan import batch_of, plan_of  # noqa: E402

IGNORE = -100


# -- the helpers that list ----------------------------------------------------------------


def test_lists_show_three_then_count_the_rest():
    assert _listing(["a", "b", "c"]) == "a; b; c"
    assert _listing(["a", "b", "c", "d", "e"]) == "a; b; c (and 2 more)"
    assert _numbers([1, 2, 3]) == "1, 2, 3"
    assert _numbers([1, 2, 3, 4]) == "1, 2, 3, ... (4 in all)"
    assert _span([5]) == "5"
    assert _span([5, 6]) == "5..6"
    assert _span([1, 3]) == "1, 3"


# -- what the plan holds ---------------------------------------------------------------------


def test_a_token_twice_on_one_rank_and_one_lost():
    # Rank 0 holds position 0 in slots 0 and 1; position 1 is on no rank.
    result = check_cp_plan(torch.tensor([0, 0, 2, 3, 4, 5, 6, 7]), ONE, 2)
    assert result.failures[:2] == (
        "a token on two ranks: row 0, position 0, document 0 token 0 is on ranks 0 (twice)",
        "document 0 of row 0 (3 tokens from position 0) has 1 token on no rank: position 1")


def test_tokens_doubled_in_every_row_are_counted_past_the_three_shown():
    # Slots 4..7 repeat positions 0..3: in each of TWO's rows positions 0..3 are on both ranks, 4..7 on none.
    result = check_cp_plan(torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]), TWO, 2)
    assert result.failures[0] == (
        "a token on two ranks: row 0, position 0, document 0 token 0 is on ranks 0 and 1; row 0, position 1, "
        "document 0 token 1 is on ranks 0 and 1; row 0, position 2, document 0 token 2 is on ranks 0 and 1 "
        "(and 5 more)")


def test_two_lost_tokens_are_a_span_and_a_document_lost_whole_is_no_rounding():
    two = check_cp_plan(torch.tensor([0, 1, 2, 3, 4, 5, -1, -1]), ONE, 2)
    assert two.failures[0] == "document 1 of row 0 (5 tokens from position 3) has 2 tokens on no rank: positions 6..7"
    whole = check_cp_plan(torch.tensor([-1, -1, -1, 3, 4, 5, 6, 7]), ONE, 2)
    assert whole.failures[0] == "document 0 of row 0 (3 tokens from position 0) has 3 tokens on no rank: positions 0..2"


def test_ranks_of_different_sizes_stop_before_the_attention():
    result = check_cp_plan(split(([0, 1, 2, 3, 4], [5, 6, 7])), ONE, 2)
    assert result.failures == ("the ranks hold different numbers of slots: [5, 3]",)
    assert (result.differences, result.largest, result.tolerance) == ((), 0.0, 0.0)


def test_one_rank_holding_part_of_its_row():
    # One rank, six of the row's eight slots: positions 6 and 7 are on no rank. Causal, the six it
    # holds attend only keys it holds, so its attention is the unsharded one.
    result = check_cp_plan(split(([0, 1, 2, 3, 4, 5],)), ONE, 1)
    assert result.failures == (
        "the ranks hold 6 slots (1 x 6), the plan's row has 8",
        "document 1 of row 0 (5 tokens from position 3) has 2 tokens on no rank: positions 6..7")
    assert result.differences == ()


def test_an_offset_outside_the_row_names_its_rank_and_row():
    # Row 1, rank 1's slot 2 holds offset 8, one past the row's last; offset 0 comes before it.
    result = check_cp_plan(split(([[0, 1, 2, 3], [0, 1, 2, 3]], [[4, 5, 6, 7], [4, 5, 8, 7]])), TWO, 2)
    assert result.failures == ("rank 1 holds offset 8 of row 1, outside the plan's row of 8",)
    assert result.differences == ()
    negative = check_cp_plan(split(([0, 1, -1, 3], [4, 5, 6, 7])), ONE, 2)
    assert negative.failures == ("rank 0 holds offset -1 of row 0, outside the plan's row of 8",)
    alone = check_cp_plan(split(([0, 1, 2, 3, 4, 5, 6, 9],)), ONE, 1)
    assert alone.failures == ("rank 0 holds offset 9 of row 0, outside the plan's row of 8",)


@pytest.mark.parametrize("outside", [8, -2])
def test_a_row_naming_positions_the_batch_lacks(outside):
    row = [0, 1, 2, 3, 4, 5, 6, outside]
    result = check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7]), row=row), ONE, 2)
    assert result.failures == ("the plan's row names positions outside the batch's 8",)
    assert result.differences == ()


# -- each reader a rank carries ---------------------------------------------------------------


def test_input_ids_of_another_token():
    result = check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7]), input_ids=([101, 102, 103, 999], None)), ONE, 2)
    assert result.failures == ("rank 0's input_ids at its slot 3 (row 0, position 3, document 1 token 0): 999, "
                               "where the batch has 104; 1 of its 4 slots differ",)


def test_position_ids_read_without_input_ids():
    result = check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7]), position_ids=(None, [1, 2, 3, 5])), ONE, 2)
    assert result.failures == ("rank 1's position_ids at its slot 3 (row 0, position 7, document 1 token 4): 5, "
                               "where the batch has 4; 1 of its 4 slots differ",)


def test_positions_read_by_offset_in_a_permuted_row_without_padding_are_not_called_unpadded():
    # The row [0, 1, 6, 7, 2, 3, 4, 5] has no padding; positions read from each slot's offset
    # against the documents' starts (0 and 3) give 0, 1, 2, 0 for rank 0, where its positions
    # 0, 1, 6, 7 are tokens 0, 1, 3, 4 of their documents.
    row = [0, 1, 6, 7, 2, 3, 4, 5]
    result = check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7]), row=row, position_ids=([0, 1, 2, 0], None)), ONE, 2)
    assert result.failures == ("rank 0's position_ids at its slot 2 (row 0, position 6, document 1 token 3): 2, "
                               "where the batch has 3; 2 of its 4 slots differ",)


def test_the_loss_mask_names_the_first_slot_that_differs_and_counts_every_row():
    # Targets: row 0 ends documents at positions 2 and 7, row 1 at 3, 5 and 7.
    right = ([[1, 1, 0, 1], [1, 1, 1, 0]], [[1, 1, 1, 0], [1, 0, 1, 0]])
    wrong = ([[1, 1, 1, 1], [1, 1, 1, 1]], right[1])  # rank 0 supervises two documents' last tokens
    indices = ([[0, 1, 2, 3]] * 2, [[4, 5, 6, 7]] * 2)
    assert check_cp_plan(split(indices, loss_mask=right), TWO, 2).failures == ()
    result = check_cp_plan(split(indices, loss_mask=wrong), TWO, 2)
    assert result.failures == ("rank 0's loss_mask at its slot 2 (row 0, position 2, document 0 token 2) is 1, "
                               "where the unsharded targets give 0; 2 of its 8 slots differ",)


# A padded layout of ONE: document 0 (3 tokens) padded to 4, document 1 (5) to 8; each rank holds
# chunks r and 3 - r of each document (1 slot a chunk, then 2).
PADDED = [0, 1, 2, -1, 3, 4, 5, 6, 7, -1, -1, -1]
PADDED_INDICES = ([0, 3, 4, 5, 10, 11], [1, 2, 6, 7, 8, 9])


def test_a_loss_mask_supervising_padding():
    mask = ([1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 0, 0])  # rank 0's slot 1 is padding (offset 3)
    result = check_cp_plan(split(PADDED_INDICES, row=PADDED, loss_mask=mask), ONE, 2)
    assert result.failures == ("rank 0's loss_mask at its slot 1 of row 0, padding, is 1, where the unsharded "
                               "targets give 0; 1 of its 6 slots differ",)


def test_labels_shifted_after_the_split_word_for_word():
    # Rank 0's own ids 101..104 shifted by one slot: 102, 103, 104, -100.
    result = check_cp_plan(split(([0, 1, 2, 3], [4, 5, 6, 7]), labels=([102, 103, 104, IGNORE], None)), ONE, 2)
    assert result.failures == (
        "rank 0's labels at its slot 2 (row 0, position 2, document 0 token 2): 104, where the unsharded target "
        "is -100 - the token of its next slot: the labels were shifted after the split (shift them within each "
        "document before it); 2 of its 4 labels differ",)


def test_real_lengths_beside_the_padded_boundaries():
    plan = split(PADDED_INDICES, row=PADDED, cu_seqlens_padded=[0, 4, 12], cu_seqlens=([0, 4, 12], [0, 3, 8]))
    assert check_cp_plan(plan, ONE, 2).failures == (
        "rank 0's cu_seqlens (the real lengths beside cu_seqlens_padded): 4, 12 where the batch's documents "
        "end at 3, 8",)


def test_boundaries_may_begin_padding_but_not_fall_inside_it_or_a_document():
    # Padding begins at slots 3 and 9 of PADDED: a boundary there is allowed.
    assert check_cp_plan(split(PADDED_INDICES, row=PADDED, cu_seqlens=[0, 3, 4, 9, 12]), ONE, 2).failures == ()
    result = check_cp_plan(split(PADDED_INDICES, row=PADDED, cu_seqlens=([0, 2, 4, 6, 10, 12], None)), ONE, 2)
    assert result.failures == (
        "rank 0's cu_seqlens put a boundary at 2, inside document 0 (row 0, position 2, document 0 token 2 is not "
        "its first token)",
        "rank 0's cu_seqlens put a boundary at 6, inside document 1 (row 0, position 5, document 1 token 2 is not "
        "its first token)",
        "rank 0's cu_seqlens put a boundary at 10, inside padding of row 0")


def test_a_boundary_inside_padding_then_one_inside_the_next_document():
    # Two slots of padding after document 0 (slots 3 and 4); document 1 begins at slot 5.
    row = [0, 1, 2, -1, -1, 3, 4, 5, 6, 7]
    result = check_cp_plan(split(([0, 1, 2, 3, 4], [5, 6, 7, 8, 9]), row=row, cu_seqlens=([0, 3, 4, 5, 7, 10],
                                                                                         [0, 3, 5, 10])), ONE, 2)
    assert result.failures == (
        "rank 0's cu_seqlens put a boundary at 4, inside padding of row 0",
        "rank 0's cu_seqlens put a boundary at 7, inside document 1 (row 0, position 5, document 1 token 2 is not "
        "its first token)")


# Left padding: one slot before document 0, one after it, three after document 1 (13 slots, one rank).
LEFT = [-1, 0, 1, 2, -1, 3, 4, 5, 6, 7, -1, -1, -1]


def test_a_row_that_begins_with_padding():
    # Document 0 begins at slot 1, document 1 at slot 5; padding begins at 0, 4 and 10.
    plan = split((list(range(13)),), row=LEFT, cu_seqlens=[0, 1, 4, 5, 13])
    assert check_cp_plan(plan, ONE, 1, pad_multiple=4).failures == ()  # 1 + 3 slots, then 5 + 3: leading padding is no one's
    eight = check_cp_plan(plan, ONE, 1, pad_multiple=8)
    assert eight.failures == ("document 0 of row 0 (3 tokens) is given 4 slots, not a multiple of 8",)


def test_boundaries_missing_at_a_row_and_a_document():
    # TWO flattened: row 0's documents begin at 0 and 3, row 1's at 8, 12 and 14; the rows end at 8 and 16.
    indices = ([[0, 1, 2, 3]] * 2, [[4, 5, 6, 7]] * 2)
    result = check_cp_plan(split(indices, cu_seqlens=([0, 3, 12, 16], [0, 3, 8, 12, 14, 16])), TWO, 2)
    assert result.failures == (
        "rank 0's cu_seqlens have no boundary at 8, where row 1 begins: a document runs on from row 0 into row 1",
        "rank 0's cu_seqlens have no boundary at 14, where row 1, position 6, document 2 token 0 begins: its "
        "attention crosses from document 1 into document 2")


@pytest.mark.parametrize("cu, message", [
    ([], "are empty: the plan's rows hold 16 slots, their boundaries at 0, 3, 8, ... (6 in all)"),
    ([2, 3, 8, 12, 14, 16], "begin at 2, not 0: the first row's first slot begins no sequence"),
    ([0, 3, 8, 12, 14], "end at 14, but the plan's rows hold 16 slots: boundaries at 3, 8, 12, ... (4 in all) where "
                        "the row's are at 3, 8, 12, ... (5 in all) (cu_seqlens of the unpadded documents after padding "
                        "miss every boundary the padding moved)"),
])
def test_boundaries_that_do_not_span_the_rows(cu, message):
    indices = ([[0, 1, 2, 3]] * 2, [[4, 5, 6, 7]] * 2)
    result = check_cp_plan(split(indices, cu_seqlens=(cu, None)), TWO, 2)
    assert result.failures == (f"rank 0's cu_seqlens {message}",)


# -- the verdict ------------------------------------------------------------------------------


def test_a_clean_plan_says_so_without_a_multiple():
    result = check_cp_plan(torch.arange(8), ONE, 2)
    assert result.passed and result.largest < 1e-12
    assert result.message() == (f"an index map over 2 ranks: every position on one rank, 0 padding slots of 8 a row, "
                                f"each rank's attention equal to the unsharded (largest difference "
                                f"{result.largest:.3g}, tolerance 1e-09)")


def _difference(document: int, largest: float) -> RankDifference:
    return RankDifference(rank=1, row=0, document=document, position=3 + document, token=0, largest=largest,
                          differing=2)


def test_the_worst_three_differences_then_a_count():
    three = CpPlanResult("a callable", 2, 8, 0, ("a failure",), tuple(_difference(d, x) for d, x in
                                                                        enumerate((0.1, 0.5, 0.3))), 0.5, 1e-9)
    lines = three.message().split("\n")
    assert lines[:2] == ["a callable over 2 ranks:", "a failure"]
    assert [line.split(" differs from the unsharded by ")[1][:3] for line in lines[2:]] == ["0.5", "0.3", "0.1"]
    four = CpPlanResult("a callable", 2, 8, 0, (), tuple(_difference(d, x) for d, x in
                                                         enumerate((0.1, 0.5, 0.3, 0.2))), 0.5, 1e-9)
    assert four.message().split("\n")[1:] == [
        "rank 1's attention at row 0, position 4 (document 1 token 0) differs from the unsharded by 0.5 "
        "(tolerance 1e-09; 2 of the document's positions on the rank differ)",
        "rank 1's attention at row 0, position 5 (document 2 token 0) differs from the unsharded by 0.3 "
        "(tolerance 1e-09; 2 of the document's positions on the rank differ)",
        "rank 1's attention at row 0, position 6 (document 3 token 0) differs from the unsharded by 0.2 "
        "(tolerance 1e-09; 2 of the document's positions on the rank differ)",
        "(and 1 more documents on ranks that differ)"]


def test_the_json_holds_every_figure():
    result = CpPlanResult("a callable", 4, 16, 3, ("lost",), (_difference(0, 0.25),), 0.25, 1e-9, 8, 2)
    assert result.to_json() == {
        "passed": False, "form": "a callable", "worldSize": 4, "slots": 16, "padding": 3, "multiple": 8,
        "paddedDocuments": 2, "failures": ["lost"],
        "differences": [{"rank": 1, "row": 0, "document": 0, "position": 3, "token": 0, "largest": 0.25,
                         "differing": 2}],
        "largest": 0.25, "tolerance": 1e-9, "message": result.message()}


@pytest.mark.parametrize("name, value, message", [
    ("world_size", 0, "world_size: expected an integer in 1..65,536, got 0"),
    ("world_size", 65_537, "world_size: expected an integer in 1..65,536, got 65537"),
    ("pad_multiple", 0, "pad_multiple: expected an integer in 1..1,048,576, got 0"),
    ("pad_multiple", 1_048_577, "pad_multiple: expected an integer in 1..1,048,576, got 1048577"),
])
def test_sizes_out_of_range_are_refused(name, value, message):
    args = {"world_size": 2, name: value}
    with pytest.raises(TensorcadError) as refused:
        check_cp_plan(torch.arange(8), ONE, **args)
    assert str(refused.value) == message


def test_a_plan_that_cannot_be_read_fails_naming_what():
    result = check_cp_plan([0, 1, 2, 3, 4, 5, 6], ONE, 2)
    assert result.to_json() == {
        "passed": False, "form": "list", "worldSize": 2, "slots": 0, "padding": 0, "multiple": None,
        "paddedDocuments": 0, "failures": ["plan: 2 ranks do not divide the plan's 7 slots"], "differences": [],
        "largest": 0.0, "tolerance": 0.0, "message": "list over 2 ranks:\nplan: 2 ranks do not divide the plan's 7 slots"}


def _crossing(given, rank, n):
    """Rank 1's boundaries leave out document 1's start: its queries of document 1 attend document 0."""
    return {"indices": [0, 1, 2, 3] if rank == 0 else [4, 5, 6, 7],
            "cu_seqlens": [0, 3, 8] if rank == 0 else [0, 8]}


@pytest.mark.parametrize("kwargs", [{}, {"causal": False}, {"window": 3}, {"atol": 1e-3}, {"seed": 1}])
def test_the_attention_is_compared_as_asked(kwargs):
    read = batch_of(ONE)
    want = check_cp_faithful(plan_of(_crossing, read, 2, ONE), read, causal=kwargs.get("causal", True),
                             window=kwargs.get("window"), atol=kwargs.get("atol"), seed=kwargs.get("seed", 0))
    result = check_cp_plan(_crossing, ONE, 2, **kwargs)
    assert (list(result.differences), result.largest, result.tolerance) == want
    assert result.world_size == 2 and result.differences


def test_each_setting_moves_the_attention_compared():
    largest = {str(k): check_cp_plan(_crossing, ONE, 2, **k).largest
               for k in ({}, {"causal": False}, {"window": 3}, {"seed": 1})}
    assert len(set(largest.values())) == 4, largest
    assert check_cp_plan(_crossing, ONE, 2, atol=1e-3).tolerance == 1e-3
