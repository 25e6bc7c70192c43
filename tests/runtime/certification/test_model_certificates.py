"""The certificates in the registry, on generated models: an isolated design holds all nine, a leaking one fails
all but two (its boundaries, and its labels, which the registry writes within documents)."""

from __future__ import annotations

import pytest

import tensorcad

pytest.importorskip("torch")

from tensorcad.runtime.certification.registry import MODEL_CHECKS, REGISTRY, run_check  # noqa: E402
from tensorcad.runtime.building.subject import Subject  # noqa: E402

from tiny_designs import SETTINGS, design  # noqa: E402  (tests/, on sys.path)




def test_the_certificates_are_registered_with_their_markers():
    assert MODEL_CHECKS == ("isolation", "isolation[boundaries]", "faithful", "isolation[gradients]",
                            "step[labels]", "step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]")
    assert [REGISTRY[n].category for n in MODEL_CHECKS] == ["isolation", "isolation", None, "isolation"] + ["step"] * 5


def test_an_isolated_generated_model_holds_all_nine():
    subject = Subject(design("doc(b, q) == doc(b, kv)"), SETTINGS)
    checks = {name: run_check(subject, name) for name in MODEL_CHECKS}
    assert all(c.passed for c in checks.values()), {n: c.message for n, c in checks.items()}
    assert checks["faithful"].figures["largest"] <= 1e-5
    assert checks["isolation[boundaries]"].figures["moves"] == 4
    assert "the eager form: FlexAttention has no backward on CPU" in checks["isolation[gradients]"].message
    assert subject.model().form == "flex"  # the gradient check switched forms and back
    # the step under the generated models' own training loss: labels shifted, a token mean
    assert checks["step[labels]"].figures["how"] == "declared shift='shifted'"
    assert checks["step[loss]"].figures["gap"] <= checks["step[loss]"].figures["tolerance"]
    assert checks["step[accumulation]"].figures["microBatches"] == 2


def test_a_leaking_generated_model_fails_all_but_boundaries_and_labels():
    subject = Subject(design("doc(b, q) >= doc(b, kv)"), SETTINGS)
    checks = {name: run_check(subject, name) for name in MODEL_CHECKS}
    assert not checks["isolation"].passed and not checks["faithful"].passed
    assert not checks["isolation[gradients]"].passed
    assert checks["isolation[gradients]"].figures["worst"]["leakedDocument"] < checks[
        "isolation[gradients]"].figures["worst"]["document"]  # doc(q) >= doc(kv): later documents see earlier
    assert checks["step[labels]"].passed  # the labels are right: what the model does with them is not
    for name in ("step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]"):
        assert not checks[name].passed, name


def test_a_design_without_documents_skips():
    subject = Subject(design(None, documents=False), SETTINGS)
    for name in MODEL_CHECKS:
        check = run_check(subject, name)
        assert check.skipped and "no documents input" in check.message



def through_the_row():
    """GPT-2's shape with a document mask, its learned position table read with no positions input: 0..T-1."""
    return tensorcad.load({
        "name": "through", "context": 256, "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 64, "dim": 64}},
            {"id": "pos", "kind": "pos_embedding", "in": {"x": "embed"}, "params": {"context": 256}},
            {"id": "layers", "kind": "stack", "in": {"x": "pos", "doc": "documents"},
             "params": {"repeat": 2, "block": {"kind": "transformer_block", "params": {
                 "dim": 64, "norm": "layernorm", "mlp": {"hidden": 128, "activation": "gelu"},
                 "attention": {"heads": 4, "head_dim": 16, "causal": True, "mask": "doc(b, q) == doc(b, kv)"}}}}},
            {"id": "norm", "kind": "layernorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 64}},
        ],
        "output": "head",
    })


@pytest.mark.slow
def test_a_design_counting_positions_through_the_row_fails_with_that_hint_and_no_other():
    # `tensorcad certify` and MCP's certify print these checks' messages. Established first, by hand, in the eager
    # form: the row's last document differs from itself run alone (positions from 0).
    import torch

    from tensorcad.runtime.certification.causes import POSITIONS

    subject = Subject(through_the_row(), SETTINGS)
    ids, documents, _ = subject.batch
    model = subject.model("eager")
    where = torch.nonzero(documents[0] == documents[0, -1]).flatten()
    first, end = int(where[0]), int(where[-1]) + 1
    with torch.no_grad():
        alone = model(ids[:, first:end], torch.zeros_like(ids[:, first:end]))[0]
        assert first > 0 and (model(ids, documents)[0, first:end] - alone).abs().max() > 1e-3
    checks = {name: run_check(subject, name) for name in ("isolation", "isolation[boundaries]", "faithful")}
    assert checks["isolation"].passed, checks["isolation"].message
    for name in ("isolation[boundaries]", "faithful"):
        message = checks[name].message
        assert not checks[name].passed and message.splitlines()[-1] == POSITIONS, (name, message)
        assert not any(hint in message for hint in ("use_cache", "all-ones", "never restart", "encoder")), message
