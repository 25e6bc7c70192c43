"""The certificates catch a stateful mixer without its reset: tested by planting the fault.

Each mixer kind runs in a small generated model on packed rows. As generated (its state
reset at each document's first token) it passes isolation, boundaries, faithful and
gradient isolation; with the reset taken out of its generated code (the documents no
longer handed to the runtime: the plant), or never wired in the design, isolation,
faithful and gradients fail, as does the training step's gradients certificate
(``step[gradients]``), and the rule `mixer-crosses-documents` names the design's mixer.
Each verdict here is the certificates' own, on models that differ in that one line.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.codegen import generate  # noqa: E402
from tensorcad.runtime import load_module  # noqa: E402
from tensorcad.runtime.certification import (  # noqa: E402
    check_boundaries, check_faithful, check_gradient_isolation, check_isolation)

MIXERS = {
    "short_conv": {"kernel": 3},
    "ssm": {"heads": 2, "head_dim": 8, "state": 4, "chunk": 8},
    "linear_attention": {"heads": 2, "head_dim": 8, "chunk": 8},
}
VOCAB = 40


def design_of(kind: str, doc: bool = True) -> dict:
    return {
        "name": f"two-{kind}", "context": 64,
        "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": VOCAB, "dim": 16}},
            {"id": "layers", "kind": "stack", "in": {"x": "embed", **({"doc": "documents"} if doc else {})},
             "params": {"repeat": 1, "block": {"kind": "mixer_block", "params": {
                 "mixer": {"kind": kind, "params": MIXERS[kind]}, "mlp": {"hidden": 32}}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": VOCAB}},
        ],
        "output": "head",
    }


def without_reset(source: str) -> str:
    """The plant: the mixer hands the runtime no documents (its reset taken out), all else as generated."""
    planted, n = re.subn(r"(causal_conv|chunked_scan)\((.*), doc([,)])", r"\1(\2, None\3", source)
    assert n >= 1, "the plant no longer applies: the mixer's runtime calls moved"
    return planted


def model_of(source: str):
    torch.manual_seed(0)
    model = load_module(source, "mixer").Model().eval()
    return lambda ids, documents, positions=None: model(ids, documents)


def batch():
    lengths = [[1, 9, 2, 20], [16, 16]]  # one-token documents, longer than the kernel and the chunk
    documents = torch.tensor([sum(([d] * n for d, n in enumerate(row)), []) for row in lengths])
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(1))
    return ids, documents


def verdicts(model_fn, sample=3):
    # three of the six documents, seeded: each certificate samples the same ones
    ids, documents = batch()
    return {
        "isolation": check_isolation(model_fn, ids, documents, vocab=VOCAB, sample=sample).passed,
        "boundaries": check_boundaries(model_fn, ids, documents, vocab=VOCAB, sample=sample).passed,
        "faithful": check_faithful(model_fn, ids, documents, sample=sample).passed,
        "gradients": check_gradient_isolation(model_fn, ids, documents, sample=sample).passed,
    }


@pytest.mark.parametrize("kind", MIXERS)
def test_a_mixer_with_its_reset_passes_every_certificate(kind):
    source = generate(tensorcad.load(design_of(kind)))
    assert verdicts(model_of(source)) == {"isolation": True, "boundaries": True, "faithful": True,
                                          "gradients": True}


@pytest.mark.parametrize("kind", MIXERS)
def test_a_mixer_without_its_reset_fails_isolation_faithful_and_gradients(kind):
    source = without_reset(generate(tensorcad.load(design_of(kind))))
    got = verdicts(model_of(source))
    assert not got["isolation"] and not got["faithful"] and not got["gradients"], got


@pytest.mark.parametrize("kind", MIXERS)
def test_a_design_whose_mixer_reads_no_documents_is_flagged_and_fails(kind):
    design = tensorcad.load(design_of(kind, doc=False))
    op = tensorcad.OperatingPoint(seq=64, packing=tensorcad.Packing(mean=16, spread=1))
    (finding,) = [d for d in tensorcad.check(design, op) if d.rule == "mixer-crosses-documents"]
    assert finding.severity == "error" and finding.path == "nodes[1].params.block.params.mixer.params"
    assert f"layers.block.mixer ({kind}, 1 layer)" in finding.message
    got = verdicts(model_of(generate(design)))
    assert not got["isolation"] and not got["faithful"], got


@pytest.mark.parametrize("kind", MIXERS)
def test_the_training_steps_gradients_catch_the_missing_reset(kind):
    import tensorcad.testing

    ids, documents = batch()
    first = torch.ones_like(documents, dtype=torch.bool)
    first[:, 1:] = documents[:, 1:] != documents[:, :-1]
    step = {"input_ids": ids, "documents": documents, "labels": ids.masked_fill(first, -100)}
    source = generate(tensorcad.load(design_of(kind)))
    assert tensorcad.testing.assert_step_gradients(model_of(source), step).passed
    with pytest.raises(tensorcad.testing.CertificateError) as failure:  # the plant: the same model, its reset taken out
        tensorcad.testing.assert_step_gradients(model_of(without_reset(source)), step)
    assert not failure.value.report.passed
