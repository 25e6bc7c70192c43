"""rl[aggregation] word for word: every message, path, JSON field and weight, on batches whose figures are
worked out by hand (a loss of 1 on every token, so each value is a sum of weights)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rl_cases import packed_batch, padded_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.aggregation import check_aggregation  # noqa: E402
from tensorcad.runtime.certification.rl.modes import describe, mode_of, setting, weights  # noqa: E402

ROWS = [[3, 9], [5, 2, 6], [12, 1], [4, 4, 7]]  # 53 loss tokens, 10 sequences; 2 padding columns
LENGTHS = [2, 4, 1, 3]  # one a row, width 4: 10 tokens, 4 sequences


def mask_of(inputs):
    return inputs.get("loss_mask", inputs.get("completion_mask")).double()


def ones(batch):
    key = "input_ids" if "input_ids" in batch else "completion_mask"
    return torch.ones(batch[key].shape, dtype=torch.float64)


def test_a_pass_says_the_mode_both_values_and_every_part():
    batch = packed_batch(ROWS, pad=2)
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / a.global_tokens, batch, "token-mean",
                               loss_mat=ones(batch))
    message = ("the loss over 1 rank x 1 micro-batch weighs every loss token as `token-mean` of the one global "
               "batch weighs it (1 = 1)")
    assert result.to_json() == {"passed": True, "mode": "token-mean", "constant": None, "ranks": 1,
                                "micro_batches": 1, "value": 1.0, "reference": 1.0, "largest_weight_gap": 0.0,
                                "matched": None, "parts": [[0, 0, 10]], "message": message}


def test_dr_grpo_over_two_ranks_passes_with_its_constant_told():
    batch = padded_batch(LENGTHS, width=4)
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (a.global_sequences * 8) * a.ranks, batch,
                               "seq-mean-token-sum-norm", constant=8, ranks=2, loss_mat=ones(batch))
    assert result.passed and result.value == result.reference == 10 / 32  # 10 tokens / (4 sequences x 8)
    assert result.message() == ("the loss over 2 ranks x 1 micro-batch weighs every loss token as "
                                "`seq-mean-token-sum-norm` (C = 8) of the one global batch weighs it "
                                "(0.3125 = 0.3125)")
    assert result.parts == ((0, 0, 2), (1, 0, 2))


def test_each_micro_batch_s_padded_width_as_the_constant_is_told_part_by_part():
    batch = padded_batch(LENGTHS, width=4)
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (x.size(0) * x.size(1)) / a.micro_batches,
                               batch, "seq-mean-token-sum-norm", constant=8, micro_batches=2, loss_mat=ones(batch))
    # micro-batch 0: rows 2 and 4 tokens, width 4, 6/8; micro-batch 1: rows 1 and 3 tokens, width 3, 4/6
    matched = ("`seq-mean-token-sum-norm` with C = 4 in micro-batch 0, 3 in micro-batch 1, not the constant 8: each "
               "is its micro-batch's padded width (verl #5625, Dr. GRPO's constant taken from loss_mask.shape[-1])")
    assert result.to_json() == {
        "passed": False, "mode": "seq-mean-token-sum-norm", "constant": 8, "ranks": 1, "micro_batches": 2,
        "value": pytest.approx((6 / 8 + 4 / 6) / 2, rel=1e-15), "reference": 0.3125,
        "largest_weight_gap": pytest.approx(32 / 12 - 1, rel=1e-12),  # micro-batch 1's 1/12 against 1/32
        "matched": matched, "parts": [[0, 0, 2], [0, 1, 2]],
        "message": ("the loss over 1 rank x 2 micro-batches is not `seq-mean-token-sum-norm` (C = 8) of the one "
                    "global batch (0.708333, `seq-mean-token-sum-norm` (C = 8): 0.3125): it is " + matched
                    + "; a token of sequence 0 (row 0, tokens 0..3, 2 loss tokens) weighs 1/16 where "
                    "`seq-mean-token-sum-norm` (C = 8) weighs it 1/32")}


def test_constants_that_are_not_the_widths_are_told_without_the_verl_diagnosis():
    batch = padded_batch(LENGTHS, width=4)
    # C = 5 in every micro-batch, declared 8: a constant, the wrong one, and no padded width
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (2 * 5) / a.micro_batches, batch,
                               "seq-mean-token-sum-norm", constant=8, micro_batches=2, loss_mat=ones(batch))
    assert result.matched == "`seq-mean-token-sum-norm` with C = 5 in micro-batch 0, 5 in micro-batch 1, not the " \
                             "constant 8"
    # the constant declared and kept: the same weights, nothing moved
    kept = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (2 * 8) / a.micro_batches, batch,
                             "seq-mean-token-sum-norm", constant=8, micro_batches=2, loss_mat=ones(batch))
    assert kept.passed and kept.matched is None and kept.to_json()["matched"] is None


def test_a_moving_constant_over_ranks_names_each_rank_and_stops_at_a_part_of_unequal_weights():
    batch = padded_batch(LENGTHS, width=4)
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (x.size(0) * x.size(1)) * a.ranks / 2,
                               batch, "seq-mean-token-sum-norm", constant=8, ranks=2, loss_mat=ones(batch))
    assert result.matched.startswith("`seq-mean-token-sum-norm` with C = 4 in micro-batch 0 of rank 0, 3 in "
                                     "micro-batch 0 of rank 1, not the constant 8: each is its")
    # a part whose tokens weigh unequally is no constant at all: no named mode
    uneven = check_aggregation(lambda x, i, a: (x * mask_of(i) * torch.arange(1, x.size(1) + 1)).sum() / 40,
                               batch, "seq-mean-token-sum-norm", constant=8, micro_batches=2, loss_mat=ones(batch))
    assert uneven.matched is None and ", nor any named mode: " in uneven.message()
    # equal weights whose constant is no whole number: no named mode either
    fractional = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / (4 * 7.3) / a.micro_batches, batch,
                                   "seq-mean-token-sum-norm", constant=8, micro_batches=2, loss_mat=ones(batch))
    assert fractional.matched is None


def test_a_loss_of_no_named_mode_says_so_and_the_first_token_weighed_otherwise():
    batch = packed_batch(ROWS, pad=2)
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() * 0.37, batch, "token-mean",
                               loss_mat=ones(batch))
    assert result.message() == ("the loss over 1 rank x 1 micro-batch is not `token-mean` of the one global batch "
                                "(19.61, `token-mean`: 1), nor any named mode: a token of sequence 0 (row 0, tokens "
                                "0..2, 3 loss tokens) weighs 37/100 where `token-mean` weighs it 1/53")
    assert result.largest == pytest.approx(0.37 * 53 - 1, rel=1e-12)
    irrational = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() * 2 ** 0.5 / 1000, batch, "token-mean",
                                   loss_mat=ones(batch))
    assert "weighs 0.00141421 where `token-mean` weighs it 1/53" in irrational.message()


def test_weight_on_a_token_outside_the_mask_is_told_by_row_and_token():
    batch = packed_batch(ROWS, pad=2)  # row 0 holds 12 tokens: its padding is tokens 12..16
    result = check_aggregation(lambda x, i, a: x.sum() / a.global_tokens, batch, "token-mean", loss_mat=ones(batch))
    assert result.message() == ("the loss over 1 rank x 1 micro-batch is not `token-mean` of the one global batch "
                                "(1.13208, `token-mean`: 1), nor any named mode: token 12 of row 0, outside the loss "
                                "mask, weighs 1/53")
    # the one part is trimmed to its longest row (15): row 2's 13 tokens leave it tokens 13 and 14 of padding
    late = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / a.global_tokens + x[2, 13] * 0.5, batch,
                             "token-mean", loss_mat=ones(batch))
    assert late.where == "token 13 of row 2, outside the loss mask, weighs 1/2"


def test_two_explanations_that_fit_are_both_said():
    batch = packed_batch(ROWS)  # one row a micro-batch: a micro-batch's token mean is its row's
    result = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / mask_of(i).sum() / a.micro_batches,
                               batch, "token-mean", micro_batches=2, ranks=2, loss_mat=ones(batch))
    assert result.matched == (
        "`seq-mean-token-mean` with each pack row taken as one sequence (4 rows, not 10 sequences: a loop that "
        "ignores the boundaries) (on this batch, equally `token-mean` taken in each micro-batch alone, then "
        "averaged over the 4 parts (2 rank(s) x 2 micro-batch(es)): a part's own count is not the global batch's)")


def test_the_loop_is_told_its_part_and_the_global_batch():
    batch = packed_batch(ROWS)
    seen = []

    def loss(x, inputs, acc):
        seen.append((acc, tuple(x.shape)))
        return (x * mask_of(inputs)).sum() / acc.global_tokens * acc.ranks

    check_aggregation(loss, batch, "token-mean", micro_batches=2, ranks=2)
    assert [(a.rank, a.micro_batch, a.ranks, a.micro_batches, a.global_tokens, a.global_sequences, a.sequences,
             a.width, shape) for a, shape in seen] == [
        (0, 0, 2, 2, 53, 10, 2, 12, (1, 12)), (0, 1, 2, 2, 53, 10, 3, 13, (1, 13)),
        (1, 0, 2, 2, 53, 10, 2, 13, (1, 13)), (1, 1, 2, 2, 53, 10, 3, 15, (1, 15))]


def test_the_drawn_losses_are_seeded_between_one_half_and_three_halves():
    batch = packed_batch(ROWS)
    drawn = []
    check_aggregation(lambda x, i, a: drawn.append(x.detach().clone()) or (x * mask_of(i)).sum() / 53, batch,
                      "token-mean")
    want = torch.rand((4, 15), generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    assert drawn[0].dtype == torch.float64 and torch.equal(drawn[0], want)
    other = check_aggregation(lambda x, i, a: (x * mask_of(i)).sum() / 53, batch, "token-mean", seed=3)
    assert other.reference == pytest.approx(float(((torch.rand((4, 15), generator=torch.Generator().manual_seed(3),
                                                                dtype=torch.float64) + 0.5)
                                                   * batch["loss_mask"]).sum() / 53), rel=1e-12)


def test_a_loss_that_reaches_no_drawn_value_weighs_nothing():
    batch = packed_batch(ROWS)
    result = check_aggregation(lambda x, i, a: torch.zeros((), dtype=torch.float64), batch, "token-mean")
    assert result.largest == 1.0 and result.value == 0.0 and result.matched is None


def test_bad_input_word_for_word():
    batch = packed_batch([[3, 9], [5, 2, 6]])
    cases = [
        (lambda: mode_of("token-max"), "mode", "unknown mode 'token-max' (modes: token-mean, seq-mean-token-mean, "
         "seq-mean-token-sum, seq-mean-token-sum-norm, token-sum, sequence-level)"),
        (lambda: setting("nemo", "x"), "framework", "unknown framework 'nemo' (frameworks: openrlhf, trl, verl)"),
        (lambda: setting("verl", "token-max"), "setting", "verl has no setting 'token-max' (settings: "
         "loss_agg_mode='token-mean', loss_agg_mode='seq-mean-token-mean', loss_agg_mode='seq-mean-token-sum', "
         "loss_agg_mode='token-sum', loss_agg_mode='seq-mean-token-sum-norm')"),
        (lambda: weights("token-mean", [0, 0]), "mask", "no sequence holds a loss token"),
        (lambda: check_aggregation(3, batch, "token-mean"), "loss_fn",
         "expected a callable (loss_mat, inputs, accumulation) -> loss, got int"),
        (lambda: check_aggregation(lambda x, i, a: x.sum(), batch, "token-mean", loss_mat=torch.ones(2, 3)),
         "loss_mat", "shape (2, 3) differs from the batch's (2, 13)"),
        (lambda: check_aggregation(lambda x, i, a: 1.0, batch, "token-mean"), "loss_fn",
         "expected a scalar tensor from micro-batch 0, got float"),
        (lambda: check_aggregation(lambda x, i, a: x.sum(-1), packed_batch(ROWS), "token-mean", ranks=2), "loss_fn",
         "expected a scalar tensor from micro-batch 0 of rank 0, got Tensor"),
    ]
    for constant in (None, 0, True, 2.0):
        cases.append((lambda c=constant: weights("seq-mean-token-sum-norm", [1], c), "constant",
                      "seq-mean-token-sum-norm needs its constant (Dr. GRPO's C: TRL's max_completion_length, verl's "
                      f"loss_scale_factor), got {constant!r}"))
    for call, path, message in cases:
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message)
    assert weights("seq-mean-token-sum-norm", [3, 0], 1) == (1 / 1, 0)  # C = 1 is a constant


def test_settings_read_by_their_value_or_whole_and_modes_described():
    assert setting("trl", "loss_type='grpo'").mode == "seq-mean-token-mean"
    assert setting("openrlhf", True).mode == "token-mean" and setting("openrlhf", False).mode == "seq-mean-token-mean"
    assert setting("verl", "seq-mean-token-sum-norm").setting == "loss_agg_mode='seq-mean-token-sum-norm'"
    assert describe("seq-mean-token-sum-norm", 5) == "`seq-mean-token-sum-norm` (C = 5)"
    assert describe("seq-mean-token-sum-norm") == "`seq-mean-token-sum-norm`"
    assert describe("token-mean", 5) == "`token-mean`" and describe("sequence-level") == "`seq-mean-token-mean`"
