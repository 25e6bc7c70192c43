"""`pytest --tensorcad designs/`: each design file becomes its checks, ids readable, categories marked."""

from __future__ import annotations

import pytest

STEP = ["step[labels]", "step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]"]
CHECKS = ["rules", "isolation[eager]", "isolation[flex]", "closed-form", "block-counts",
          "golden[analysis]", "golden[rules]", "golden[codegen]", *STEP]


def test_each_design_becomes_its_checks_and_export_is_deselected_without_dash_m(project):
    result = project.runpytest("--tensorcad", "designs", "--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == [f"designs/{name}.json::{check}" for name in ("tiny-documents", "tiny-plain")
                   for check in CHECKS]
    result.stdout.fnmatch_lines([f"{len(ids)}/{len(ids) + 2} tests collected (2 deselected)*"])


@pytest.mark.parametrize("expression, expected", [("export", ["export"]), ("tensorcad", [*CHECKS, "export"])])
def test_dash_m_export_asks_for_the_export_items(project, expression, expected):
    result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "--collect-only", "-q",
                               "-m", expression)
    assert [line.split("::")[1] for line in result.outlines if "::" in line] == expected


def test_dash_m_isolation_selects_only_isolation_items(project):
    result = project.runpytest("--tensorcad", "designs", "--collect-only", "-q", "-m", "isolation")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == [f"designs/{name}.json::isolation[{form}]" for name in ("tiny-documents", "tiny-plain")
                   for form in ("eager", "flex")]


def test_categories_are_markers(project):
    for marker, checks in (("closed_form", ["closed-form"]), ("block_counts", ["block-counts"]),
                           ("golden", ["golden[analysis]", "golden[rules]", "golden[codegen]"]), ("step", STEP)):
        result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "--collect-only", "-q",
                                   "-m", marker)
        assert [line.split("::")[1] for line in result.outlines if "::" in line] == checks


def test_design_without_documents_skips_with_the_reason(project):
    result = project.runpytest("--tensorcad", "designs/tiny-plain.json", "-m",
                               "isolation or block_counts", "-rs")
    # Its causal mask still has blocks to count: block-counts runs on every mask, documents or not.
    result.assert_outcomes(skipped=2, passed=1)
    result.stdout.fnmatch_lines(["SKIPPED * tiny-plain has no documents input: no packed documents to check"])


@pytest.mark.slow  # every default check of two designs, flex compile included: ~30 s on 2 cores
def test_two_designs_certify(project, golden_file):
    # Goldens are written once, then every check passes (or skips where it does not apply).
    project.runpytest("--tensorcad", "designs", "-m", "golden", "--snapshot-update").assert_outcomes(passed=6)
    result = project.runpytest("--tensorcad", "designs", "-rs")
    result.assert_outcomes(passed=19, skipped=7, deselected=2)  # export deselected without -m; tiny-plain's
    # causal mask has block counts too; no step
    assert golden_file(project.path, "analysis", "tiny-documents").is_file()
    assert (project.path / "snapshots" / "codegen" / "tiny-plain.py").is_file()


def test_a_bad_design_file_is_a_collection_error_naming_the_place(project):
    (project.path / "designs" / "broken.json").write_text('{"name": "broken", "nodes": 3}')
    result = project.runpytest("--tensorcad", "designs/broken.json")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*broken.json: *nodes*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_other_json_files_are_not_collected(project):
    (project.path / "package.json").write_text("{}")
    result = project.runpytest("--tensorcad", "designs", "--collect-only", "-q", ".")
    assert not [line for line in result.outlines if "package.json" in line]
