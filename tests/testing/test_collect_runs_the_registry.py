"""The collected items, `tensorcad certify` and `tensorcad verify` run one registry (runtime.certification)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tensorcad.runtime import certification  # noqa: E402


@pytest.fixture
def marked_rules(monkeypatch):
    """The registry's `rules` check replaced by one that fails with a message of its own."""
    def run(subject):
        return certification.failed("rules", f"the registry's own rules ran on {subject.design.name}")

    spec = certification.REGISTRY["rules"]
    monkeypatch.setitem(certification.REGISTRY, "rules", certification.Spec("rules", spec.holds, run))


def test_a_collected_item_runs_the_registry(project, marked_rules):
    result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "-k", "rules and not golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*tiny-documents.json::rules: the registry's own rules ran on tiny-documents*"])


def test_certify_and_verify_run_the_registry(marked_rules, monkeypatch, capsys):
    from tensorcad.cli import main

    for name, spec in list(certification.REGISTRY.items()):  # the rest skip: this is about where rules come from
        if name != "rules":
            monkeypatch.setitem(certification.REGISTRY, name, certification.Spec(
                name, spec.holds, lambda subject, name=name: certification.skipped(name, "not this test")))

    assert main(["certify", "nano-sort", "--json"]) == 1
    (out,) = json.loads(capsys.readouterr().out)
    rules = next(c for c in out["checks"] if c["name"] == "rules")
    assert rules["status"] == "failed" and rules["message"] == "the registry's own rules ran on nano-sort"

    import tensorcad.runtime.certification.verification as verification

    report = verification.verify("nano-sort", checks=("rules",))
    assert report.check("rules").message == "the registry's own rules ran on nano-sort"


def test_collected_items_are_the_registrys_certify_checks_in_order(project):
    result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "--collect-only", "-q")
    names = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert names == list(certification.CERTIFY)
