"""The RL certificates through the one registry (issue 43): an RLSubject's clean loop passes every check and a
planted one fails, each with the verdict the plain function gives; a check whose function the subject lacks is
skipped, saying which."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import test_aggregation as aggregation  # noqa: E402  tests/runtime/certification/rl, on sys.path
import test_alignment as alignment  # noqa: E402
import test_metrics as metrics  # noqa: E402
from rl_cases import packed_batch  # noqa: E402

from tensorcad.runtime.certification import RL_CHECKS, RLSubject, run_check  # noqa: E402
from tensorcad.runtime.certification.rl.aggregation import check_aggregation  # noqa: E402
from tensorcad.runtime.certification.rl.alignment import check_alignment  # noqa: E402
from tensorcad.runtime.certification.rl.metrics import check_metrics  # noqa: E402


def test_the_aggregation_check_is_the_functions_verdict():
    batch = packed_batch(aggregation.ROWS, pad=2)
    clean = run_check(RLSubject(batch, loss_fn=aggregation.dapo, mode="token-mean", micro_batches=2, ranks=2),
                      "rl[aggregation]")
    assert clean.passed and clean.name == "rl[aggregation]"
    assert clean.message == check_aggregation(aggregation.dapo, batch, "token-mean", micro_batches=2, ranks=2).message()
    planted = run_check(RLSubject(batch, loss_fn=aggregation.row_as_sequence, mode="seq-mean-token-mean"),
                        "rl[aggregation]")
    assert not planted.passed and "each pack row taken as one sequence" in planted.message
    assert planted.figures["mode"] == "seq-mean-token-mean" and planted.figures["passed"] is False


def test_the_alignment_and_metrics_checks_are_the_functions_verdicts():
    batch = alignment.rollout()
    clean = run_check(RLSubject(batch, pipeline=alignment.packed, keys=alignment.KEYS), "rl[alignment]")
    assert clean.passed and clean.message == check_alignment(alignment.packed, batch, alignment.KEYS).message()
    forgot = lambda b: alignment.packed(b, forget=("advantages",))  # noqa: E731
    planted = run_check(RLSubject(batch, pipeline=forgot, keys=alignment.KEYS), "rl[alignment]")
    assert not planted.passed and "`advantages` of sequence 0 landed on sequence 1" in planted.message
    rollout = metrics.rollout()
    logged = run_check(RLSubject(rollout, metric_fn=metrics.clean, reductions=metrics.DECLARED), "rl[metrics]")
    assert logged.passed and logged.message == check_metrics(metrics.clean, rollout, metrics.DECLARED).message()


def test_the_logprobs_check_runs_the_model():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    import test_logprobs as logprobs
    from rl_cases import tiny_llama, token_batch

    model, batch = tiny_llama(), token_batch(logprobs.ROWS)
    clean = run_check(RLSubject(batch, model=model, logprob_fn=logprobs.within_sequences), "rl[logprobs]")
    assert clean.passed, clean.message
    rolled = run_check(RLSubject(batch, model=model, logprob_fn=logprobs.rolled_flat), "rl[logprobs]")
    assert not rolled.passed and "torch.roll on the flat packed tensor, verl #6475" in rolled.message


@pytest.mark.parametrize("name, words", [("rl[logprobs]", "logprob_fn or model"),
                                         ("rl[aggregation]", "loss_fn or mode"),
                                         ("rl[alignment]", "pipeline or keys"),
                                         ("rl[metrics]", "metric_fn or reductions")])
def test_a_check_without_its_function_is_skipped_naming_it(name, words):
    skipped = run_check(RLSubject({"input_ids": torch.ones(1, 3, dtype=torch.long)}), name)
    assert skipped.skipped and skipped.message == f"the subject gives no {words}"
    assert name in RL_CHECKS


def test_each_check_names_itself_and_hands_on_the_subject_s_constant():
    from tensorcad.runtime.certification.rl.checks import aggregation_check, alignment_check, metrics_check

    lengths = [5, 17, 3, 9]
    batch = aggregation.padded_batch(lengths, width=20)
    norm = RLSubject(batch, loss_fn=aggregation.dr_grpo(20), mode="seq-mean-token-sum-norm", constant=20,
                     micro_batches=2)
    check = aggregation_check(norm)
    assert check.name == "rl[aggregation]" and check.passed and check.figures["constant"] == 20
    rollout = alignment.rollout()
    assert alignment_check(RLSubject(rollout, pipeline=alignment.packed, keys=alignment.KEYS)).name == \
        "rl[alignment]"
    logged = metrics.rollout()
    assert metrics_check(RLSubject(logged, metric_fn=metrics.clean, reductions=metrics.DECLARED)).name == \
        "rl[metrics]"


def test_the_logprobs_check_names_itself():
    pytest.importorskip("transformers")
    import test_logprobs as logprobs
    from rl_cases import tiny_llama, token_batch

    from tensorcad.runtime.certification.rl.checks import logprobs_check

    subject = RLSubject(token_batch(logprobs.ROWS), model=tiny_llama(), logprob_fn=logprobs.within_sequences)
    check = logprobs_check(subject)
    assert check.name == "rl[logprobs]" and check.passed
