"""rl[aggregation]: the loss over packing, micro-batches and ranks, held to the global batch reduced by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rl_cases import packed_batch, padded_batch, sequences_of  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.aggregation import check_aggregation  # noqa: E402

# 4 pack rows of 2 or 3 sequences: 10 sequences, rows of unequal token counts, so every mode differs
ROWS = [[3, 9], [5, 2, 6], [12, 1], [4, 4, 7]]
LENGTHS = [n for row in ROWS for n in row]


def mask_of(inputs):
    return inputs.get("loss_mask", inputs.get("completion_mask")).double()


def loss_mat_of(batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch["input_ids" if "input_ids" in batch else "completion_mask"].shape, generator=g,
                      dtype=torch.float64)


def by_hand(batch, loss_mat, mode, constant=None):
    """The mode on the one global batch, from the lengths the test wrote down."""
    seqs = []
    for r, row in enumerate(ROWS if "loss_mask" in batch else [[n] for n in batch["lengths"]]):
        at = 0
        for n in row:
            seqs.append(loss_mat[r, at:at + n])
            at += n
    if mode == "token-mean":
        return float(torch.cat(seqs).mean())
    if mode == "seq-mean-token-mean":
        return float(torch.stack([s.mean() for s in seqs]).mean())
    if mode == "seq-mean-token-sum":
        return float(torch.stack([s.sum() for s in seqs]).mean())
    return float(torch.cat(seqs).sum() / (len(seqs) * constant))


# --- the loops, as the frameworks write them (TRL 1.16 GRPOTrainer._compute_loss, verl agg_loss) ---------------


def dapo(x, inputs, acc):  # sum / (num_items_in_batch / num_processes): the global token count
    return (x * mask_of(inputs)).sum() / (acc.global_tokens / acc.ranks)


def bnpo(x, inputs, acc):  # the micro-batch's own token mean, / gradient_accumulation_steps
    m = mask_of(inputs)
    return (x * m).sum() / m.sum() / acc.micro_batches


def packed_seq_mean(x, inputs, acc):  # each sequence of position_ids alone, over the global sequence count
    m = mask_of(inputs)
    means = [(x[r, a:b] * m[r, a:b]).sum() / m[r, a:b].sum() for r, a, b in sequences_of(inputs)]
    return torch.stack(means).sum() / acc.global_sequences * acc.ranks


def row_as_sequence(x, inputs, acc):  # tunix #1662: TRL's grpo branch on packed rows, a row one sequence
    m = mask_of(inputs)
    live = m.sum(-1) > 0
    return ((x * m).sum(-1)[live] / m.sum(-1)[live]).mean() / acc.micro_batches


def seq_sum(x, inputs, acc):  # luspo / verl seq-mean-token-sum, one sequence a row
    m = mask_of(inputs)
    return (x * m).sum(-1).mean() / acc.micro_batches


def dr_grpo(constant):
    def loss(x, inputs, acc):  # TRL's dr_grpo: sum / (B x max_completion_length)
        return (x * mask_of(inputs)).sum() / (x.size(0) * constant) / acc.micro_batches
    return loss


def dr_grpo_padded_width(x, inputs, acc):  # verl #5625: the constant is loss_mask.shape[-1]
    m = mask_of(inputs)
    return (x * m).sum() / (x.size(0) * m.shape[-1]) / acc.micro_batches


# --- clean counterparts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("ranks,micro", [(1, 1), (1, 2), (2, 2)])
def test_a_global_token_count_is_token_mean_over_any_micro_batches_and_ranks(ranks, micro):
    batch = packed_batch(ROWS, pad=2)
    loss_mat = loss_mat_of(batch)
    result = check_aggregation(dapo, batch, "token-mean", micro_batches=micro, ranks=ranks, loss_mat=loss_mat)
    assert result.passed, result.message()
    assert result.reference == pytest.approx(by_hand(batch, loss_mat, "token-mean"), rel=1e-12)
    assert result.value == pytest.approx(result.reference, rel=1e-12)


def token_sum(x, inputs, acc):  # verl's token-sum: the masked sum x dp_size, the ranks averaged
    return (x * mask_of(inputs)).sum() * acc.ranks


def test_verl_s_token_sum_over_micro_batches_and_ranks_is_the_global_sum_and_no_mean():
    batch = packed_batch(ROWS, pad=2)
    loss_mat = loss_mat_of(batch)
    result = check_aggregation(token_sum, batch, "token-sum", micro_batches=2, ranks=2, loss_mat=loss_mat)
    assert result.passed, result.message()
    assert result.reference == pytest.approx(float((loss_mat * batch["loss_mask"]).sum()), rel=1e-12)
    wrong = check_aggregation(dapo, batch, "token-sum", micro_batches=2, ranks=2, loss_mat=loss_mat)
    assert not wrong.passed and wrong.matched == "`token-mean` of the global batch", wrong.message()
    summed = check_aggregation(token_sum, batch, "token-mean", micro_batches=2, ranks=2, loss_mat=loss_mat)
    assert summed.matched == "`token-sum` of the global batch", summed.message()
    assert "weighs 1 where `token-mean` weighs it 1/53" in summed.message()


@pytest.mark.parametrize("ranks,micro", [(1, 1), (2, 2)])
def test_each_sequence_of_a_pack_row_alone_is_seq_mean_token_mean(ranks, micro):
    batch = packed_batch(ROWS)
    loss_mat = loss_mat_of(batch)
    result = check_aggregation(packed_seq_mean, batch, "seq-mean-token-mean", micro_batches=micro, ranks=ranks,
                               loss_mat=loss_mat)
    assert result.passed, result.message()
    assert result.reference == pytest.approx(by_hand(batch, loss_mat, "seq-mean-token-mean"), rel=1e-12)
    assert check_aggregation(packed_seq_mean, batch, "sequence-level").passed  # GSPO's: the same mode


def test_dr_grpo_with_its_constant_and_equal_micro_batches_is_seq_mean_token_sum_norm():
    lengths = [5, 17, 3, 9, 11, 2, 20, 8]
    batch = padded_batch(lengths, width=20)
    batch["lengths"] = lengths
    loss_mat = loss_mat_of(batch)
    result = check_aggregation(dr_grpo(20), batch, "seq-mean-token-sum-norm", constant=20, micro_batches=2,
                               ranks=2, loss_mat=loss_mat)
    assert result.passed, result.message()
    assert result.reference == pytest.approx(by_hand(batch, loss_mat, "norm", 20), rel=1e-12)
    summed = check_aggregation(seq_sum, batch, "seq-mean-token-sum", micro_batches=4, loss_mat=loss_mat)
    assert summed.passed and summed.reference == pytest.approx(by_hand(batch, loss_mat, "seq-mean-token-sum"))


# --- planted faults from the public threads ---------------------------------------------------------------------


def test_a_pack_row_taken_as_one_sequence_is_named():
    batch = packed_batch(ROWS)
    result = check_aggregation(row_as_sequence, batch, "seq-mean-token-mean")
    assert not result.passed
    assert "`seq-mean-token-mean` with each pack row taken as one sequence (4 rows, not 10 sequences" in \
        result.message()
    assert "a token of sequence 0 (row 0, tokens 0..2, 3 loss tokens) weighs 1/48 where `seq-mean-token-mean` " \
           "weighs it 1/30" in result.message()  # row 0 holds 12 tokens: 1/(4 x 12); alone 1/(10 x 3)


def test_each_micro_batch_averaged_on_its_own_under_token_mean_is_named():
    batch = packed_batch(ROWS)
    result = check_aggregation(bnpo, batch, "token-mean", micro_batches=2)
    assert not result.passed
    message = result.message()
    assert "it is `token-mean` taken in each micro-batch alone, then averaged over the 2 parts" in message
    assert "weighs 1/50 where `token-mean` weighs it 1/53" in message  # rows 0-1's 25 tokens: 1/(2 x 25); 53 in all
    # one row a micro-batch: a micro-batch's token mean is its row's, so both explanations fit, and both are said
    both = check_aggregation(bnpo, batch, "token-mean", micro_batches=2, ranks=2).message()
    assert "it is `seq-mean-token-mean` with each pack row taken as one sequence" in both
    assert "(on this batch, equally `token-mean` taken in each micro-batch alone" in both


def test_dr_grpos_constant_from_the_padded_width_is_named():
    lengths = [5, 17, 3, 9, 11, 2, 20, 8]
    batch = padded_batch(lengths, width=20)
    result = check_aggregation(dr_grpo_padded_width, batch, "seq-mean-token-sum-norm", constant=20,
                               micro_batches=2, ranks=2)
    assert not result.passed
    # each micro-batch is padded to its own longest: 17, 9, 11 and 20 columns
    assert ("`seq-mean-token-sum-norm` with C = 17 in micro-batch 0 of rank 0, 9 in micro-batch 1 of rank 0, "
            "11 in micro-batch 0 of rank 1, 20 in micro-batch 1 of rank 1, not the constant 20: each is its "
            "micro-batch's padded width") in result.message()


def test_a_loss_that_matches_another_mode_names_it():
    batch = packed_batch(ROWS)
    result = check_aggregation(dapo, batch, "seq-mean-token-mean")
    assert not result.passed and "it is `token-mean` of the global batch" in result.message()


def test_bad_input_names_its_path():
    batch = packed_batch(ROWS)
    with pytest.raises(TensorcadError, match="mode"):
        check_aggregation(dapo, batch, "token-max")
    with pytest.raises(TensorcadError, match="constant"):
        check_aggregation(dapo, batch, "seq-mean-token-sum-norm")
    with pytest.raises(TensorcadError, match="micro_batches"):
        check_aggregation(dapo, batch, "token-mean", micro_batches=5)
    with pytest.raises(TensorcadError, match="loss_fn"):
        check_aggregation(lambda x, i, a: 1.0, batch, "token-mean")
