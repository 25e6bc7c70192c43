"""tensorcad.runtime.verify on real generated models, held to PyTorch and to closed forms."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.packing import Packing  # noqa: E402
from tensorcad.runtime.certification.verification import CHECKS, verify  # noqa: E402

SMALL = dict(seq=128, params=200_000, packing=Packing(32, 1.0))
NO_EXPORT = tuple(c for c in CHECKS if c != "export")  # export alone takes ~20 s; tested below


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def leaky(name: str = "nano-sort", mask: str = "doc(b, q) >= doc(b, kv)") -> dict:
    source = tensorcad.load(name).to_dict()
    source["name"] = f"{name}-leaky"
    source["nodes"][1]["params"]["block"]["params"]["attention"]["mask"] = mask
    return source


def test_nano_sort_passes_every_check_with_its_figures():
    report = verify("nano-sort", checks=NO_EXPORT, **SMALL)
    assert report.passed, [(c.name, c.message) for c in report.failures]
    assert [c.name for c in report.checks] == list(NO_EXPORT)
    assert all(c.status == "passed" for c in report.checks)
    flops = report.check("flops").figures
    assert flops["matmul"] == flops["expectedMatmul"] and flops["attention"] == flops["denseAttention"]
    # one 128-token block a row: the kernel computes it whole, as the eager form does
    assert flops["keptAttention"] < flops["blockAttention"] == flops["denseAttention"]
    blocks = report.check("block-counts").figures["causal_same_document"]  # one entry a distinct mask
    assert blocks["attention"] == "nodes[1].params.block.params.attention"
    assert blocks["torch"] == {**blocks["torch"], "full": blocks["engine"]["full"], "partial": blocks["engine"]["partial"]}
    assert blocks["mismatchedRows"] == [] and blocks["rows"] == 256
    kept = report.check("kept-scores").figures["causal_same_document"]
    assert kept["countedPerQuery"] == pytest.approx(kept["engineExactPerQuery"], rel=1e-12)
    assert kept["difference"] <= 0.03
    iso = report.check("isolation[flex]").figures
    assert iso["perturbed"] == iso["documents"] > 2 and iso["leaks"] == 0 and iso["ownChange"] > 0
    assert report.check("fused-equals-eager").figures["largestDifference"] <= 1e-5
    json = report.to_json()
    assert json["passed"] and json["packing"] == {"mean": 32.0, "spread": 1.0}


def test_flop_count_is_pytorchs_own_and_matches_the_models_weights():
    report = verify("nano-sort", checks=("flops",), **SMALL)
    figures = report.check("flops").figures
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale

    model = build(scale(tensorcad.load("nano-sort"), params=200_000))
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    tokens = report.rows * report.seq
    assert figures["matmul"] == 2 * linear * tokens
    config = model.config
    assert figures["attention"] == config.n_layer * 4 * report.seq ** 2 * config.head_dim * config.n_head * report.rows


def test_a_leaking_mask_fails_isolation_in_both_forms_naming_the_leak():
    report = verify(leaky(), checks=("isolation[eager]", "isolation[flex]"), **SMALL)
    assert not report.passed
    for form in ("eager", "flex"):
        check = report.check(f"isolation[{form}]")
        assert check.status == "failed"
        assert "changing document" in check.message and "of row" in check.message
        assert "moved document" in check.message and "by up to" in check.message
        worst = check.figures["worst"]
        assert worst["movedDocument"] > worst["document"] and worst["largest"] > 0


def test_a_design_without_documents_skips_isolation_and_says_why():
    report = verify("gpt2-small", seq=128, params=300_000,
                    checks=("forward", "isolation[eager]", "isolation[flex]", "block-counts", "kept-scores"))
    for form in ("eager", "flex"):
        check = report.check(f"isolation[{form}]")
        assert check.status == "skipped" and not check.passed
        assert "no documents input" in check.message
    assert report.passed  # skips are not failures, and not passes either
    assert report.check("block-counts").passed and report.check("kept-scores").passed


def test_export_reports_each_form():
    report = verify("nano-sort", seq=64, params=100_000, packing=Packing(16, 1.0), checks=("export",))
    check = report.check("export")
    assert check.passed, check.message
    eager = check.figures["eager"]
    assert eager["exported"] and eager["matches"] and eager["attention"] == "eager" and eager["ops"] > 0
    flex = check.figures["flex"]
    # torch 2.13 exports flex_attention as a higher-order op: the flex form must export and match
    assert flex["exported"] and flex["matches"] and flex["attention"] == "flex" and flex["ops"] > 0
    assert flex["error"] is None and check.figures["exported"] == ["eager", "flex"]


@pytest.mark.parametrize("kwargs, path", [
    (dict(seq=10**6), "seq"), (dict(checks=("nope",)), "checks"), (dict(rows=0), "rows"),
])
def test_bad_input_names_the_argument(kwargs, path):
    with pytest.raises(TensorcadError) as e:
        verify("nano-sort", **{**SMALL, **kwargs})
    assert e.value.path == path


@pytest.mark.slow
def test_llama_3_8b_documents_passes_every_check_at_512_tokens_in_96_token_documents():
    report = verify("llama-3-8b-documents", seq=512, packing=Packing(96, 1.0), params=2_000_000)
    assert report.passed, [(c.name, c.message) for c in report.failures]
    assert all(c.status == "passed" for c in report.checks)
    assert 1_500_000 < report.params < 3_000_000


@pytest.mark.slow
@pytest.mark.parametrize("name", tensorcad.preset_names())
def test_every_preset_verifies(name):
    report = verify(name, seq=256, params=1_000_000)
    assert report.passed, [(c.name, c.message) for c in report.failures]
    if tensorcad.load(name).input("documents") is None:
        assert report.check("isolation[eager]").skipped


def test_a_mask_that_keeps_nothing_agrees_with_nothing():
    # No kept score anywhere at 256 tokens: both counts are 0, and 0 against 0 is agreement.
    raw = tensorcad.load("nano-sort").to_dict()
    attention = raw["nodes"][1]["params"]["block"]["params"]["attention"]
    attention["mask"] = "(doc(b, q) == doc(b, kv)) & (q * kv * q * kv * q > 1099511627776)"
    report = verify(raw, seq=256, checks=("block-counts", "kept-scores"))
    assert [c.status for c in report.checks] == ["passed", "passed"]
    (blocks,) = report.checks[0].figures.values()
    assert blocks["torch"]["full"] == blocks["torch"]["partial"] == 0
