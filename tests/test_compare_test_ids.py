"""tools/compare_test_ids.py: the same tests pass before and after a change, modulo moved paths (issue 41)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compare_test_ids", ROOT / "tools" / "compare_test_ids.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def _junit(path: Path, cases: dict[str, str]) -> Path:
    rows = []
    for test_id, outcome in cases.items():
        classname, name = test_id.split("::")
        inner = {"passed": "", "failed": "<failure message='x'/>", "skipped": "<skipped message='y'/>"}[outcome]
        rows.append(f'<testcase classname="{classname}" name="{name}">{inner}</testcase>')
    path.write_text(f"<testsuites><testsuite>{''.join(rows)}</testsuite></testsuites>")
    return path


def test_a_moved_test_file_is_the_same_test(tmp_path):
    before = tool.outcomes(_junit(tmp_path / "b.xml", {"tests.a.test_step_loss::test_x": "passed",
                                                        "tests.a.test_kept::test_y": "passed"}))
    after = tool.outcomes(_junit(tmp_path / "a.xml", {"tests.a.step.test_step_loss::test_x": "passed",
                                                       "tests.a.test_kept::test_y": "passed"}))
    result = tool.compare(before, after, {"tests.a.test_step_loss": "tests.a.step.test_step_loss"})
    assert result["passed_before_not_after"] == [] and result["same_passing"] == 2 and result["new"] == []


def test_a_test_that_stops_passing_is_named_with_what_it_did(tmp_path):
    before = tool.outcomes(_junit(tmp_path / "b.xml", {"tests.t::test_x": "passed", "tests.t::test_y": "passed",
                                                        "tests.t::test_z": "passed"}))
    after = tool.outcomes(_junit(tmp_path / "a.xml", {"tests.t::test_x": "failed", "tests.t::test_y": "skipped"}))
    result = tool.compare(before, after, {})
    assert result["passed_before_not_after"] == [{"test": "tests.t::test_x", "after": "failed"},
                                                 {"test": "tests.t::test_y", "after": "skipped"},
                                                 {"test": "tests.t::test_z", "after": "missing"}]


def test_a_module_path_in_the_parameters_follows_its_move():
    modules = {"tensorcad.runtime.certification.step_loss": "tensorcad.runtime.certification.step.loss",
               "tensorcad.closed_form": "tensorcad.packing.closed_form"}
    old = "tests.t::test_doc[tensorcad.runtime.certification.step_loss.check_loss]"
    assert tool.renamed(old, {}, modules) == "tests.t::test_doc[tensorcad.runtime.certification.step.loss.check_loss]"
    # a name that still reads as it did (a face's attribute) is kept as it is
    kept = "tests.t::test_doc[tensorcad.closed_form]"
    assert tool.renamed(kept, {}, modules, after={kept: "passed"}) == kept
