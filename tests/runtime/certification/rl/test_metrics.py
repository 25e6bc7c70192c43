"""rl[metrics]: logged metrics held to their reductions over the sequences unpacked, reduced by hand in the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rl_cases import packed_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.metrics import check_metrics  # noqa: E402

ROWS = [[6, 4, 7], [5, 8]]  # each sequence a 2-token prompt (no loss) then its completion
DECLARED = {"entropy": "token-mean", "kl": "seq-mean-token-mean", "clip_ratio/low_min": "min",
            "ratio_max": "max"}


def rollout():
    batch = packed_batch(ROWS)
    mask = batch["loss_mask"].clone()
    for r, row in enumerate(ROWS):
        at = 0
        for n in row:
            mask[r, at:at + 2] = 0
            at += n
    batch["loss_mask"] = mask
    return batch


def sequences(batch):
    out = []
    for r, row in enumerate(ROWS):
        at = 0
        for n in row:
            out.append((r, at + 2, at + n))  # the completion's tokens
            at += n
    return out


def clean(values, batch):
    m = batch["loss_mask"].double()
    kl = torch.stack([values["kl"][r, a:b].mean() for r, a, b in sequences(batch)]).mean()
    live = m.bool()
    return {"entropy": (values["entropy"] * m).sum() / m.sum(), "kl": kl,
            "clip_ratio/low_min": values["clip_ratio/low_min"][live].min(), "ratio_max": values["ratio_max"][live].max()}


def test_a_loop_logging_each_metric_over_the_loss_tokens_passes():
    batch = rollout()
    result = check_metrics(clean, batch, DECLARED)
    assert result.passed, result.message()
    # the reference by hand: the completions' tokens, read off the lengths the test wrote down
    g = torch.Generator().manual_seed(0)
    drawn = {k: torch.rand(batch["input_ids"].shape, generator=g, dtype=torch.float64) for k in DECLARED}
    tokens = torch.cat([drawn["entropy"][r, a:b] for r, a, b in sequences(batch)])
    assert result.checks[0].reference == pytest.approx(float(tokens.mean()), rel=1e-12)
    assert result.checks[1].reference == pytest.approx(
        float(torch.stack([drawn["kl"][r, a:b].mean() for r, a, b in sequences(batch)]).mean()), rel=1e-12)


def test_entropy_averaged_over_boundary_tokens_is_named():
    def shifted(values, batch):  # TRL #5617: the entropy shifted by one against the mask
        out = clean(values, batch)
        m = batch["loss_mask"].double()
        h = values["entropy"]
        out["entropy"] = (h[:, :-1] * m[:, 1:]).sum() / m.sum()
        return out

    result = check_metrics(shifted, rollout(), DECLARED)
    assert not result.passed
    assert result.message().startswith("`entropy` logs")
    # one a sequence, its prompt's last token: 5 sequences, the first at token 1 of row 0, the next at 7
    assert ("it reads 5 token(s) outside the loss mask: token 1 of row 0 (token 1 of sequence 0, outside the loss "
            "mask), token 7 of row 0 (token 1 of sequence 1, outside the loss mask)") in result.message()
    assert "each beside a loss token: the values shifted by one against the mask (TRL #5617)" in result.message()
    assert [c.passed for c in result.checks] == [False, True, True, True]


def test_entropy_over_every_token_of_the_row_is_named():
    def every_token(values, batch):  # the attention mask, not the loss mask: prompts and boundaries counted
        out = clean(values, batch)
        out["entropy"] = values["entropy"].mean()
        return out

    message = check_metrics(every_token, rollout(), DECLARED).message()
    # 5 prompts of 2 tokens and row 1's 4 padding tokens
    assert "it reads 14 token(s) outside the loss mask: token 0 of row 0 (the first of sequence 0, outside" in message


def test_a_token_mean_logged_as_the_sequence_mean_and_summed_minima_are_named():
    def swapped(values, batch):
        out = clean(values, batch)
        m = batch["loss_mask"].double()
        out["kl"] = (values["kl"] * m).sum() / m.sum()  # declared per sequence, logged per token
        mins = [values["clip_ratio/low_min"][r, a:b].min() for r, a, b in sequences(batch)]
        out["clip_ratio/low_min"] = torch.stack(mins).sum()  # NeMo-RL: each pack's minimum, summed
        return out

    message = check_metrics(swapped, rollout(), DECLARED).message()
    assert "`kl` logs" in message and "it is the `token-mean`" in message
    assert "it is the sum of each sequence's min (NeMo-RL's packed metrics)" in message


def test_a_max_taken_over_the_whole_row_names_the_token():
    def whole_row(values, batch):
        out = clean(values, batch)
        out["ratio_max"] = values["ratio_max"].max()
        return out

    batch = rollout()
    result = check_metrics(whole_row, batch, DECLARED)
    g = torch.Generator().manual_seed(0)
    drawn = [torch.rand(batch["input_ids"].shape, generator=g, dtype=torch.float64) for _ in DECLARED][3]
    r, t = divmod(int(drawn.argmax()), drawn.shape[1])
    live = batch["loss_mask"].bool()
    assert result.passed == bool(live[r, t])  # the row's max is a prompt token unless it lies in a completion
    if not result.passed:
        assert f"it is the value at token {t} of row {r}" in result.message()


def test_bad_input_names_its_path():
    with pytest.raises(TensorcadError, match="reductions.kl"):
        check_metrics(clean, rollout(), {"kl": "median"})
    with pytest.raises(TensorcadError, match="metric_fn.entropy"):
        check_metrics(lambda v, b: {}, rollout(), {"entropy": "token-mean"})
