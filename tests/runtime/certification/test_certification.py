"""The one registry: verify and certify agree check for check, and block-counts compares every mask."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.runtime.building import generated as building  # noqa: E402 - the module whose build the subject calls
from tensorcad.runtime.certification.registry import CERTIFY, GOLDENS, REGISTRY, VERIFY, certify  # noqa: E402
from tensorcad.runtime.building.settings import Settings  # noqa: E402
from tensorcad.runtime.building.subject import clear_models  # noqa: E402
from tensorcad.runtime.certification.verification import verify  # noqa: E402

SETTINGS = Settings(seq=128, pack=32.0, spread=1.0, params=200_000, block_rows=32)
EXPORT_FREE = tuple(n for n in CERTIFY if n in VERIFY and n != "export")  # export: ~10 s a design, below


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def two_masks(name: str = "tiny-two-masks", window: int = 32) -> dict:
    """A sliding-window document layer, then a causal document layer: two distinct masks."""
    dim, vocab = 64, 64

    def stack(source: str, attention: dict) -> dict:
        return {"kind": "stack", "in": {"x": source, "doc": "documents"}, "params": {"repeat": 1, "block": {
            "kind": "transformer_block", "params": {"dim": dim, "norm": "rmsnorm",
                                                    "mlp": {"hidden": 2 * dim, "activation": "swiglu"},
                                                    "attention": attention}}}}

    base = {"heads": 4, "head_dim": 16, "causal": True, "rope": {"theta": 10000}, "mask": "doc(b, q) == doc(b, kv)"}
    return {"name": name, "context": 256,
            "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
            "nodes": [
                {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
                {"id": "local", **stack("embed", {**base, "window": window})},
                {"id": "global", **stack("local", base)},
                {"id": "norm", "kind": "rmsnorm", "in": {"x": "global"}},
                {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": vocab}}],
            "output": "head"}


def _timeless(value):
    """Figures without wall-clock times, which no two runs share."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _agree(design, names):
    by_verify = {c.name: c for c in verify(design, settings=SETTINGS, checks=names).checks}
    by_certify = {c.name: c for c in certify(design, SETTINGS, only=names)}
    assert sorted(by_verify) == sorted(by_certify) == sorted(names)
    for name in names:
        v, c = by_verify[name], by_certify[name]
        assert (v.status, v.message) == (c.status, c.message), name
        assert _timeless(v.figures) == _timeless(c.figures), name
    return by_verify


@pytest.mark.parametrize("design", ["nano-sort", "two-masks"])
def test_verify_and_certify_give_every_shared_check_the_same_outcome_and_figures(design):
    source = two_masks() if design == "two-masks" else design
    checks = _agree(source, EXPORT_FREE)
    # packed documents under a window have no closed form: a skip, the same in both
    expected = {n: "skipped" if (n, design) == ("closed-form", "two-masks") else "passed" for n in EXPORT_FREE}
    assert {n: c.status for n, c in checks.items()} == expected
    assert checks["isolation[flex]"].figures["perturbed"] > 2  # figures, not only outcomes, compared
    assert checks["block-counts"].figures  # one entry a distinct mask


@pytest.mark.slow
@pytest.mark.parametrize("design", ["nano-sort", "two-masks"])
def test_export_is_the_same_check_in_both(design):
    checks = _agree(two_masks() if design == "two-masks" else design, ("export",))
    figures = checks["export"].figures
    assert checks["export"].passed and figures["eager"]["exported"] and "flex" in figures


def test_block_counts_compares_every_distinct_mask_with_its_own_attention():
    (check,) = certify(two_masks(), SETTINGS, only=["block-counts"])
    assert check.passed, check.message
    assert {name: f["attention"] for name, f in check.figures.items()} == {
        "sliding_window_same_document": "nodes[1].params.block.params.attention",
        "causal_same_document": "nodes[2].params.block.params.attention",
    }
    for figures in check.figures.values():
        assert figures["mismatchedRows"] == [] and figures["rows"] == SETTINGS.block_rows
        assert figures["torch"]["full"] == figures["engine"]["full"]
        assert figures["torch"]["partial"] == figures["engine"]["partial"]


@pytest.fixture
def tampered(monkeypatch):
    """Models built from their generated source with one edit: (old, new) text replaced."""
    edits = []
    original = building.build

    def build(design, form="flex", seed=0, device="cpu"):
        source = tensorcad.generate(design)
        for old, new in edits:
            assert old in source
            source = source.replace(old, new)
        module = building.load_module(source, design.name)
        torch.manual_seed(seed)
        return module.Model(module.CONFIG, form=form)

    clear_models()
    monkeypatch.setattr(building, "build", build)
    yield edits
    clear_models()
    monkeypatch.setattr(building, "build", original)


def test_a_model_whose_second_mask_disagrees_fails_naming_that_mask(tampered):
    # The causal layer's mask lets a document see the ones before it; the window's is left alone.
    tampered.append(("return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx])",
                     "return (q_idx >= kv_idx) & (doc[b, q_idx] >= doc[b, kv_idx])"))
    # Two 128-token blocks a row: block (1, 0) turns full under the leak, partial as designed.
    (check,) = certify(two_masks(), replace(SETTINGS, seq=256), only=["block-counts"])
    assert check.status == "failed"
    assert "causal_same_document (nodes[2].params.block.params.attention)" in check.message
    assert "sliding_window_same_document" not in check.message
    assert check.figures["causal_same_document"]["mismatchedRows"]
    assert check.figures["sliding_window_same_document"]["mismatchedRows"] == []


def test_a_mask_the_module_does_not_state_fails(tampered):
    tampered.append(('    "causal_same_document": {', '    "causal_same_document_unlisted": {'))
    (check,) = certify(two_masks(), SETTINGS, only=["block-counts"])
    assert check.status == "failed"
    assert "'causal_same_document', which the module's MASKS table does not state" in check.message


def test_each_check_says_what_it_holds_the_design_to():
    from tensorcad.runtime.certification.registry import MODEL_CHECKS

    from tensorcad.runtime.certification.registry import OPT_IN

    from tensorcad.runtime.certification.registry import DATA_CHECKS, RL_CHECKS

    assert set(CERTIFY) | set(OPT_IN) | set(VERIFY) | set(MODEL_CHECKS) | set(DATA_CHECKS) | set(RL_CHECKS) == set(
        REGISTRY)
    assert not set(DATA_CHECKS) & (set(CERTIFY) | set(VERIFY))  # on a corpus and a loader, never on a design
    assert not set(RL_CHECKS) & (set(CERTIFY) | set(VERIFY))  # on an RL loop's functions, never on a design
    assert set(GOLDENS) <= set(CERTIFY) and not set(GOLDENS) & set(VERIFY)
    assert not set(OPT_IN) & set(CERTIFY) and set(OPT_IN) <= set(VERIFY)  # asked for by name; verify runs it
    assert all(len(spec.holds) > 20 for spec in REGISTRY.values())
    categories = {spec.category for spec in REGISTRY.values()} - {None}
    assert categories == {"isolation", "closed_form", "block_counts", "golden", "step", "export"}


def test_rules_names_each_warning_it_passes_with():
    (check,) = certify("nano-sort", SETTINGS, only=["rules"])
    assert check.passed
    diagnostics = check.figures["diagnostics"]
    assert diagnostics and all(f"{d['rule']} {d['path']}: {d['message']}" in check.message for d in diagnostics)
    assert json.dumps(check.to_json())  # plain data
