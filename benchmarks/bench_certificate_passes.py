"""Passes each certificate makes, counted by wrapping the model: grouped (the default) and one a document.

The model is `bench_certificates`' two-layer document-masked design in its eager form, on 2 rows × 512 tokens
of fixed-length documents: 16 a row (32 in the batch, and the pieces of one the stream cuts at a row's ends) and
64 a row (128). Every document is checked (no
sampling). The wrapper counts forward calls, the tokens they carry, and backward passes through the model's
outputs (a hook on them). ``extra_info`` holds both ways' counts and their ratio; the issue's goals are asserted
on the grouped counts (isolation <= 2·⌈log₂ N⌉ + 1 forwards, 2× that with boundary moves, faithful <= 3 calls,
gradients <= 4 backward passes, and at 64 a row no more faithful calls or backwards than at 16).

    python -m pytest benchmarks/bench_certificate_passes.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) the rows are 128 tokens (4 and 16 documents a row), the same assertions.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from bench_certificates import _design  # noqa: E402

ROWS, SEQ, CI_SEQ = 2, 512, 128
PER_ROW = (16, 64)


class Counted:
    """The model, its forward calls, their tokens and the backward passes through its outputs counted."""

    def __init__(self, model):
        self.model, self.calls, self.tokens, self.backwards = model, 0, 0, 0
        self.module = getattr(model, "module", model)  # what the gradient check finds and puts in train mode

    def __call__(self, ids, documents, positions=None):
        self.calls += 1
        self.tokens += ids.numel()
        out = self.model(ids, documents, positions)
        if out.requires_grad:
            out.register_hook(self._backward)
        return out

    def _backward(self, grad):
        self.backwards += 1
        return grad


def _counts(model, batch, method):
    from tensorcad.runtime.certification import certificate

    counts = {}
    for name in ("isolation", "boundaries", "faithful", "gradients"):
        counted = Counted(model)
        options = {"vocab": 256} if name in ("isolation", "boundaries") else {}
        result = certificate(name, method)(counted, *batch, **options)
        assert result.passed, result.message()
        counts[name] = {"calls": counted.calls, "tokens": counted.tokens, "backwards": counted.backwards}
    return counts


@pytest.mark.parametrize("per_row", PER_ROW)
def test_passes_per_certificate(benchmark, per_row):
    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.building.subject import build_model, draw_batch

    seq = CI_SEQ if benchmark.disabled else SEQ
    per_row = per_row // (SEQ // seq)
    settings = Settings(seq=seq, pack=float(seq // per_row), spread=0.0, rows=ROWS, sample=None)
    model = build_model(_design(), settings, "eager")
    batch = draw_batch(model.design, settings)
    from tensorcad.runtime.certification import segments

    documents = len(segments(batch[1]))  # per_row a row, and a row may begin and end inside one (the stream)
    assert ROWS * per_row <= documents <= ROWS * (per_row + 1)

    grouped = benchmark.pedantic(_counts, args=(model, batch, "grouped"), rounds=1, iterations=1)
    each = _counts(model, batch, "each")
    forward_tokens = ROWS * seq
    goal = 2 * math.ceil(math.log2(ROWS * per_row)) + 1  # the issue's: 11 at 16 a row
    assert grouped["isolation"]["calls"] <= goal < each["isolation"]["calls"]
    assert grouped["isolation"]["calls"] + grouped["boundaries"]["calls"] <= 2 * goal
    assert grouped["faithful"]["calls"] <= 3 and grouped["gradients"]["backwards"] <= 4
    assert grouped["faithful"]["tokens"] - forward_tokens <= 2 * forward_tokens  # the documents alone
    assert each["gradients"]["backwards"] == documents and each["faithful"]["calls"] == documents + 1
    benchmark.extra_info.update({
        "documents": documents, "seq": seq, "rows": ROWS, "goal_isolation_forwards": goal,
        "grouped": grouped, "each": each,
        "alone_forward_equivalents": round((grouped["faithful"]["tokens"] - forward_tokens) / forward_tokens, 2),
        "ratios": {name: round(each[name]["calls" if name != "gradients" else "backwards"]
                               / max(1, grouped[name]["calls" if name != "gradients" else "backwards"]), 1)
                   for name in grouped},
    })
    _PASSES[per_row] = grouped
    if len(_PASSES) == len(PER_ROW):  # at 64 a row, faithful and gradients cost no more than at 16
        few, many = (_PASSES[k] for k in sorted(_PASSES))
        assert many["faithful"]["calls"] <= max(few["faithful"]["calls"], 3)  # at most two buckets either way
        assert many["gradients"]["backwards"] <= few["gradients"]["backwards"]


_PASSES: dict[int, dict] = {}
