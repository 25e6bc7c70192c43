"""The RL certificates as registry checks: an ``RLSubject`` (the user's loop functions and one batch) and what
each check runs.

An RL loop is certified by its own functions, not by a design: the per-token log-prob function and the model
(``rl[logprobs]``), the loss of one micro-batch under the declared mode (``rl[aggregation]``), the pack ->
reorder -> unpack pipeline (``rl[alignment]``) and the logged metrics (``rl[metrics]``). A check whose
function the subject does not give is skipped, saying which; each runs the same function the pytest items and
``tensorcad.testing.assert_rl_*`` run, so every surface gives one verdict. Nothing here imports torch until a
check runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..outcome import Check, Skipped, failed, passed

RL_CHECKS = ("rl[logprobs]", "rl[aggregation]", "rl[alignment]", "rl[metrics]")


@dataclass(frozen=True)
class RLSubject:
    """What the RL checks read: one batch of the loop and the functions that loop runs on it."""

    batch: Mapping[str, Any]
    model: Any = None
    logprob_fn: Callable | None = None  # (model, batch) -> (B, T) log-probs, or (log-probs, entropies)
    loss_fn: Callable | None = None  # (loss_mat, inputs, accumulation) -> the micro-batch's loss
    mode: str | None = None  # the aggregation the loss declares (verl's loss_agg_mode names)
    constant: int | None = None  # Dr. GRPO's C
    micro_batches: int = 1
    ranks: int = 1
    pipeline: Callable | None = None  # batch -> batch, or a list of them (pack, reorder, unpack)
    keys: tuple[str, ...] = ()  # the per-sample tensors the pipeline must carry
    metric_fn: Callable | None = None  # (values, batch) -> {name: value}
    reductions: Mapping[str, str] = field(default_factory=dict)


def _verdict(name: str, result: Any) -> Check:
    return (passed if result.passed else failed)(name, result.message(), result.to_json())


def _needs(**given: Any) -> None:
    missing = [name for name, value in given.items() if value is None or value == () or value == {}]
    if missing:
        raise Skipped(f"the subject gives no {' or '.join(missing)}")


def logprobs_check(subject: RLSubject) -> Check:
    from .logprobs import check_logprobs

    _needs(logprob_fn=subject.logprob_fn, model=subject.model)
    return _verdict("rl[logprobs]", check_logprobs(subject.logprob_fn, subject.model, subject.batch))


def aggregation_check(subject: RLSubject) -> Check:
    from .aggregation import check_aggregation

    _needs(loss_fn=subject.loss_fn, mode=subject.mode)
    return _verdict("rl[aggregation]", check_aggregation(
        subject.loss_fn, subject.batch, subject.mode, micro_batches=subject.micro_batches, ranks=subject.ranks,
        constant=subject.constant))


def alignment_check(subject: RLSubject) -> Check:
    from .alignment import check_alignment

    _needs(pipeline=subject.pipeline, keys=tuple(subject.keys))
    return _verdict("rl[alignment]", check_alignment(subject.pipeline, subject.batch, subject.keys))


def metrics_check(subject: RLSubject) -> Check:
    from .metrics import check_metrics

    _needs(metric_fn=subject.metric_fn, reductions=dict(subject.reductions))
    return _verdict("rl[metrics]", check_metrics(subject.metric_fn, subject.batch, subject.reductions))


__all__ = ["RL_CHECKS", "RLSubject", "aggregation_check", "alignment_check", "logprobs_check", "metrics_check"]
