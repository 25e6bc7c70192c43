"""rl[metrics]: the metrics a loop logs from a packed batch equal their unpacked values under the declared reduction.

``metric_fn(values, batch) -> {name: scalar}`` is the loop's logging: from
per-token tensors (``values[name]``, (B, T): the entropy of each position, the
KL estimate, a clipped-or-not indicator, the importance ratio) on the packed
batch it makes the logged scalars. Each is declared with its reduction over the
loss tokens of the batch's sequences (`batch`), as it would be computed on the
sequences unpacked:

| reduction | the logged value |
|---|---|
| ``token-mean`` | the mean over every loss token (entropy, KL, clip fraction as TRL logs them) |
| ``seq-mean-token-mean`` | the mean over sequences of each one's mean |
| ``sum`` | the sum over every loss token |
| ``min``, ``max`` | over every loss token |

The certificate draws the per-token tensors at random (float64, seeded), calls
``metric_fn`` once, and holds each metric to the reduction computed by hand. A
mean or a sum is linear, so its gradient says which tokens it read and how much:
a token outside the loss mask (the boundary token an entropy shifted by one
reads, TRL #5617), or the weights of another reduction. A min or a max names the
token its value came from, or the reduction of per-sequence extremes it is (a
sum of each sequence's minimum, NeMo-RL's packed metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from tensorcad.errors import TensorcadError

from .batch import RLBatch, read_rl_batch

REDUCTIONS = ("token-mean", "seq-mean-token-mean", "sum", "min", "max")
RTOL = 1e-9


@dataclass(frozen=True)
class MetricCheck:
    name: str
    reduction: str
    logged: float
    reference: float
    why: str = ""  # what the logged value is instead

    @property
    def passed(self) -> bool:
        return abs(self.logged - self.reference) <= RTOL * max(1.0, abs(self.reference))

    def message(self) -> str:
        if self.passed:
            return f"`{self.name}` {self.logged:.6g} is the `{self.reduction}` of the sequences unpacked"
        return (f"`{self.name}` logs {self.logged:.6g} where the `{self.reduction}` of the sequences unpacked is "
                f"{self.reference:.6g}" + (f": {self.why}" if self.why else ""))


@dataclass(frozen=True)
class MetricsResult:
    checks: tuple[MetricCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def message(self) -> str:
        failed = [c for c in self.checks if not c.passed]
        if not failed:
            return "every logged metric equals its value on the sequences unpacked: " + ", ".join(
                f"`{c.name}` ({c.reduction})" for c in self.checks)
        return "; ".join(c.message() for c in failed)

    def to_json(self) -> dict:
        return {"passed": self.passed, "message": self.message(),
                "metrics": [{**c.__dict__, "passed": c.passed} for c in self.checks]}


def _reduce(reduction: str, per_sequence: list[torch.Tensor]) -> torch.Tensor:
    every = torch.cat(per_sequence)
    if reduction == "token-mean":
        return every.mean()
    if reduction == "seq-mean-token-mean":
        return torch.stack([s.mean() for s in per_sequence]).mean()
    if reduction == "sum":
        return every.sum()
    return every.min() if reduction == "min" else every.max()


def _token(rl: RLBatch, r: int, t: int) -> str:
    """'token 5 of row 0, the last of sequence 1' / '..., outside the loss mask'."""
    for i, p in enumerate(rl.sequences):
        if p.row == r and p.first <= t < p.end:
            inside = bool(rl.mask[r, t])
            where = ("the last" if t == p.end - 1 else "the first" if t == p.first else f"token {t - p.first}")
            return f"token {t} of row {r} ({where} of sequence {i}{'' if inside else ', outside the loss mask'})"
    return f"token {t} of row {r} (padding, outside every sequence)"


def _linear_why(rl: RLBatch, grad: torch.Tensor, reduction: str, values: torch.Tensor) -> str:
    outside = (grad != 0) & ~rl.mask
    if bool(outside.any()):
        spots = outside.nonzero().tolist()
        told = ", ".join(_token(rl, r, t) for r, t in spots[:3])
        T = rl.shape[1]
        beside = all((t + 1 < T and bool(rl.mask[r, t + 1])) or (t > 0 and bool(rl.mask[r, t - 1]))
                     for r, t in spots)
        return (f"it reads {len(spots)} token(s) outside the loss mask: {told}"
                + (", each beside a loss token: the values shifted by one against the mask (TRL #5617)"
                   if beside else ""))
    per = [values[p.row, p.first:p.end][rl.mask[p.row, p.first:p.end]] for p in rl.sequences]
    for other in ("token-mean", "seq-mean-token-mean", "sum"):
        if other == reduction:
            continue
        leaves = [v.detach().clone().requires_grad_() for v in per]
        with torch.enable_grad():
            grads = torch.autograd.grad(_reduce(other, leaves), leaves)
        expected = torch.zeros_like(grad)
        for g, p in zip(grads, rl.sequences):
            expected[p.row, p.first:p.end][rl.mask[p.row, p.first:p.end]] = g
        if float((grad - expected).abs().max()) <= RTOL * float(expected.abs().max()):
            return f"it is the `{other}`"
    return "its tokens weigh as no named reduction weighs them"


def _extreme_why(rl: RLBatch, logged: float, reduction: str, values: torch.Tensor) -> str:
    hit = ((values - logged).abs() <= RTOL * max(1.0, abs(logged))).nonzero().tolist()
    if hit:
        r, t = hit[0]
        return f"it is the value at {_token(rl, r, t)}"
    per = [values[p.row, p.first:p.end][rl.mask[p.row, p.first:p.end]] for p in rl.sequences]
    fn = torch.amin if reduction == "min" else torch.amax
    extremes = torch.stack([fn(s, 0) for s in per])
    for says, v in (("sum", extremes.sum()), ("mean", extremes.mean())):
        if abs(float(v) - logged) <= RTOL * max(1.0, abs(logged)):
            return f"it is the {says} of each sequence's {reduction} (NeMo-RL's packed metrics)"
    return ""


def check_metrics(metric_fn: Callable[[dict, Mapping[str, Any]], Mapping[str, Any]], batch: Mapping[str, Any],
                  reductions: Mapping[str, str], *, seed: int = 0) -> MetricsResult:
    """``metric_fn``'s logged metrics on the packed batch against each declared reduction of the sequences."""
    if not callable(metric_fn):
        raise TensorcadError("metric_fn", f"expected a callable (values, batch) -> {{name: value}}, got "
                                          f"{type(metric_fn).__name__}")
    if not isinstance(reductions, Mapping) or not reductions:
        raise TensorcadError("reductions", "expected {metric name: reduction}, at least one")
    for name, reduction in reductions.items():
        if reduction not in REDUCTIONS:
            raise TensorcadError(f"reductions.{name}", f"unknown reduction {reduction!r} (reductions: "
                                                       f"{', '.join(REDUCTIONS)})")
    rl = read_rl_batch(batch)
    generator = torch.Generator().manual_seed(seed)
    values = {name: torch.rand(rl.shape, generator=generator, dtype=torch.float64).requires_grad_()
              for name in reductions}
    with torch.enable_grad():
        logged = metric_fn(values, rl.inputs)
    if not isinstance(logged, Mapping):
        raise TensorcadError("metric_fn", f"expected a dict of metrics back, got {type(logged).__name__}")
    checks = []
    for name, reduction in reductions.items():
        if name not in logged:
            raise TensorcadError(f"metric_fn.{name}", "the metric is not among those logged")
        value = logged[name]
        got = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        v = values[name].detach()
        per = [v[p.row, p.first:p.end][rl.mask[p.row, p.first:p.end]] for p in rl.sequences]
        reference = float(_reduce(reduction, per))
        check = MetricCheck(name, reduction, got, reference)
        if not check.passed:
            if reduction in ("min", "max"):
                why = _extreme_why(rl, got, reduction, v)
            elif isinstance(value, torch.Tensor) and value.requires_grad:
                (grad,) = torch.autograd.grad(value, values[name], retain_graph=True, allow_unused=True)
                why = _linear_why(rl, torch.zeros_like(v) if grad is None else grad, reduction, v)
            else:
                why = "logged detached, so what it read cannot be told"
            check = MetricCheck(name, reduction, got, reference, why)
        checks.append(check)
    return MetricsResult(tuple(checks))
