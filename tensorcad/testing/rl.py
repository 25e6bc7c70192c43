"""Reinforcement-learning post-training certified, as plain assertions: aggregation, log-probs, alignment, metrics.

```python
from tensorcad.testing import assert_rl_aggregation, assert_rl_logprobs, assert_rl_alignment, assert_rl_metrics
assert_rl_aggregation(loss_fn, batch, "dr_grpo", framework="trl", constant=256, micro_batches=2, ranks=2)
assert_rl_logprobs(logprob_fn, model, packed_batch)          # each sequence as if scored alone
assert_rl_alignment(pipeline, rollout, ["advantages", "rewards", "ref_logprobs"])
assert_rl_metrics(metric_fn, packed_batch, {"entropy": "token-mean", "clip_ratio/low_min": "min"})
```

Each returns its result and raises ``CertificateError`` (an ``AssertionError``, the
result as ``err.report``) saying what moved. The work is the runtime's
(``tensorcad.runtime.certification``'s ``check_*``); this module words the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .certificates import CertificateError


def _held(result: Any, headline: str) -> Any:
    __tracebackhide__ = True
    if not result.passed:
        raise CertificateError(f"{headline}\n{result.message()}", result)
    return result


def assert_rl_aggregation(loss_fn: Callable[..., Any], batch: Mapping[str, Any], mode: str, *,
                          framework: str | None = None, micro_batches: int = 1, ranks: int = 1,
                          constant: int | None = None, seed: int = 0) -> Any:
    """``rl[aggregation]``: the loss over ``ranks`` x ``micro_batches`` is ``mode`` on the one global batch.

    ``mode`` is a mode's name (``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``,
    ``seq-mean-token-sum-norm`` with its ``constant``, ``sequence-level``), or with ``framework``
    that framework's setting (``framework="trl"``: a ``loss_type``; ``"verl"``: a
    ``loss_agg_mode``; ``"openrlhf"``: ``token_level_loss=True``). ``loss_fn(loss_mat, inputs,
    accumulation)`` is the loop's loss of one micro-batch. Returns an ``AggregationResult``.
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_aggregation, rl_setting

    declared = rl_setting(framework, mode).mode if framework is not None else mode
    result = check_aggregation(loss_fn, batch, declared, micro_batches=micro_batches, ranks=ranks,
                               constant=constant, seed=seed)
    said = f" ({framework}'s {mode})" if framework is not None else ""
    return _held(result, f"the loss is not its declared mode{said} on the one global batch")


def assert_rl_logprobs(logprob_fn: Callable[..., Any], model: Any, batch: Mapping[str, Any], *,
                       atol: float | None = None) -> Any:
    """``rl[logprobs]``: ``logprob_fn(model, batch)`` on the packed batch is the model's own on each sequence alone.

    Position t holds log p(token t+1 | tokens up to t) of its own sequence; the function may
    return ``(logprobs, entropies)``. Returns a ``LogprobResult``.
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_logprobs

    return _held(check_logprobs(logprob_fn, model, batch, atol=atol),
                 "the log-prob path is not the model's own forward on each sequence alone")


def assert_rl_alignment(pipeline: Callable[..., Any], batch: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """``rl[alignment]``: each of ``keys`` comes back on its own sequence through ``pipeline`` (pack, reorder,
    unpack). Returns an ``AlignmentResult``."""
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_alignment

    return _held(check_alignment(pipeline, batch, tuple(keys)),
                 "per-sample tensors land on other sequences")


def assert_rl_metrics(metric_fn: Callable[..., Any], batch: Mapping[str, Any], reductions: Mapping[str, str], *,
                      seed: int = 0) -> Any:
    """``rl[metrics]``: each logged metric equals its declared reduction over the sequences unpacked.
    Returns a ``MetricsResult``."""
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_metrics

    return _held(check_metrics(metric_fn, batch, reductions, seed=seed),
                 "a logged metric is not its value on the sequences unpacked")
