"""tensorcad.testing.assert_rl_*: the RL certificates as plain assertions, each on a planted fault and its clean twin."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorcad.testing  # noqa: E402
from tensorcad.testing import (  # noqa: E402
    CertificateError,
    assert_rl_aggregation,
    assert_rl_alignment,
    assert_rl_logprobs,
    assert_rl_metrics,
)
from tensorcad.errors import TensorcadError  # noqa: E402

LENGTHS = [5, 17, 3, 9, 11, 2, 20, 8]


def padded():
    mask = torch.zeros(len(LENGTHS), 20, dtype=torch.long)
    for r, n in enumerate(LENGTHS):
        mask[r, :n] = 1
    return {"input_ids": torch.arange(1, mask.numel() + 1).reshape(mask.shape) % 60 * mask,
            "completion_mask": mask, "advantages": torch.randn(len(LENGTHS))}


def dr_grpo(x, inputs, acc):  # TRL 1.16's dr_grpo branch: sum / (B x max_completion_length), / accumulation
    m = inputs["completion_mask"].double()
    return (x * m).sum() / (x.size(0) * 20) / acc.micro_batches


def bnpo(x, inputs, acc):
    m = inputs["completion_mask"].double()
    return (x * m).sum() / m.sum() / acc.micro_batches


def test_the_names_are_on_the_harness():
    assert {"assert_rl_aggregation", "assert_rl_logprobs", "assert_rl_alignment", "assert_rl_metrics"} <= set(
        tensorcad.testing.__all__)


def test_aggregation_under_a_frameworks_setting():
    result = assert_rl_aggregation(dr_grpo, padded(), "dr_grpo", framework="trl", constant=20, micro_batches=2,
                                   ranks=2)
    assert result.passed and result.mode == "seq-mean-token-sum-norm"
    with pytest.raises(CertificateError, match=r"\(trl's bnpo\)") as err:  # bnpo is token-mean of the micro-batch
        assert_rl_aggregation(bnpo, padded(), "bnpo", framework="trl", micro_batches=2)
    assert "it is `token-mean` taken in each micro-batch alone" in str(err.value)
    assert not err.value.report.passed
    with pytest.raises(TensorcadError, match="setting"):
        assert_rl_aggregation(bnpo, padded(), "grpo2", framework="trl")


def test_alignment_logprobs_and_metrics_fail_with_their_headlines():
    def keeps_order(batch):  # one row a sample, sorted by length, the advantages left behind
        order = sorted(range(len(LENGTHS)), key=lambda i: -LENGTHS[i])
        return {"input_ids": batch["input_ids"][order], "advantages": batch["advantages"]}

    with pytest.raises(CertificateError, match="per-sample tensors land on other sequences"):
        assert_rl_alignment(keeps_order, padded(), ["advantages"])
    assert assert_rl_alignment(lambda b: b, padded(), ["advantages"]).passed

    def row_mean(values, batch):
        return {"entropy": values["entropy"].mean()}

    with pytest.raises(CertificateError, match="a logged metric is not its value on the sequences unpacked"):
        assert_rl_metrics(row_mean, padded(), {"entropy": "token-mean"})

    def bigram(ids, documents, positions=None):  # a model that reads the token before, across any boundary
        return torch.nn.functional.one_hot(ids + torch.roll(ids, 1, 1), 128).float()

    def scored(model, batch):
        logits = model(batch["input_ids"], None)
        lp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
        return torch.cat([lp, torch.zeros_like(lp[:, :1])], 1)

    packed = {"input_ids": torch.tensor([[3, 5, 7, 2, 9, 4]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 2]])}
    with pytest.raises(CertificateError, match="the log-prob path is not the model's own forward"):
        assert_rl_logprobs(scored, bigram, packed)
