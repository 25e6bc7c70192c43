"""What each certificate costs, in plain forward passes of the same model, measured in the same run.

A generated two-layer model (dim 64, 4 heads, about 80k parameters: scaling leaves
it as it is) in its eager form, on 2 rows x 512 tokens of 96-token documents
(spread 1), every document perturbed, moved or run alone (no sampling). Each
benchmark times one certificate and, in the same test, the model's plain forward
pass; ``extra_info`` holds the ratio (the figure to read: it travels between
machines, an absolute time does not) and the passes each certificate makes.
Nothing is asserted about time; each certificate must pass. Each runs both ways: grouped (the default:
a few passes for every document) and one pass a document (``each``, as before issue 29).

    python -m pytest benchmarks/bench_certificates.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) the rows are 128 tokens: the certificates run
once each, as a test that they still run.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

ROWS, SEQ, CI_SEQ, MEAN = 2, 512, 128, 96.0
CERTIFICATES = ("isolation", "isolation[boundaries]", "faithful", "isolation[gradients]")


def _design():
    import tensorcad

    attention = {"heads": 4, "head_dim": 16, "causal": True, "rope": {"theta": 10000},
                 "mask": "doc(b, q) == doc(b, kv)"}
    return tensorcad.load({
        "name": "bench-two-layers", "context": 1024,
        "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 256, "dim": 64}},
            {"id": "layers", "kind": "stack", "in": {"x": "embed", "doc": "documents"},
             "params": {"repeat": 2, "block": {"kind": "transformer_block", "params": {
                 "dim": 64, "norm": "rmsnorm", "mlp": {"hidden": 128, "activation": "swiglu"},
                 "attention": attention}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 256}},
        ],
        "output": "head",
    })


def _run(name, method, model, batch, vocab):
    from tensorcad.runtime.certification import certificate

    run = certificate({"isolation": "isolation", "isolation[boundaries]": "boundaries", "faithful": "faithful",
                       "isolation[gradients]": "gradients"}[name], method)
    return run(model, *batch, vocab=vocab) if name in ("isolation", "isolation[boundaries]") else run(model, *batch)


def _passes(name, result) -> int:
    """Model runs the certificate makes: forwards (calls), or (gradients) backward passes after one forward."""
    return {"isolation": lambda r: r.forwards, "isolation[boundaries]": lambda r: r.forwards,
            "faithful": lambda r: r.calls, "isolation[gradients]": lambda r: r.backwards}[name](result)


@pytest.mark.parametrize("method", ("grouped", "each"))
@pytest.mark.parametrize("name", CERTIFICATES)
def test_certificate_against_one_forward(benchmark, name, method):
    import torch

    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.building.subject import build_model, draw_batch

    seq = CI_SEQ if benchmark.disabled else SEQ
    settings = Settings(seq=seq, pack=MEAN, rows=ROWS, sample=None)
    model = build_model(_design(), settings, "eager")
    batch = draw_batch(model.design, settings)
    vocab = 256

    with torch.no_grad():
        model(*batch)  # warm
        forward = min(_timed(lambda: model(*batch)) for _ in range(5))
    result = benchmark.pedantic(_run, args=(name, method, model, batch, vocab), rounds=1 if benchmark.disabled else 3,
                                iterations=1)
    assert result.passed, result.message()
    info = {"method": result.method, "rows": ROWS, "seq": seq, "documents": result.documents if hasattr(result, "documents") else None,
            "passes": _passes(name, result), "forward_s": forward}
    if benchmark.stats is not None:
        mean = benchmark.stats.stats.mean
        info["forwards"] = round(mean / forward, 1)  # the certificate's time in plain forward passes
        info["per_pass"] = round(mean / forward / info["passes"], 2)
    benchmark.extra_info.update(info)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
