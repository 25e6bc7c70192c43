"""A design whose mask lets a document see the ones before it fails both isolation items, readably."""

from __future__ import annotations

import re


def test_leaking_mask_fails_isolation_in_both_forms(project, design_texts):
    (project.path / "designs" / "tiny-leaking.json").write_text(design_texts["leaking"])
    result = project.runpytest("--tensorcad", "designs/tiny-leaking.json", "-m", "isolation")
    result.assert_outcomes(failed=2)
    for form in ("eager", "flex"):
        result.stdout.fnmatch_lines([f"*tiny-leaking.json::isolation[[]{form}[]]*"])
    # The message names the row and document changed, the document that moved, the
    # largest change and the first position that moved; not a traceback.
    for form in ("eager", "flex"):
        result.stdout.fnmatch_lines([f"tiny-leaking.json::isolation[[]{form}[]]: documents are not isolated"])
    # The failure sections only: under CI=true pytest repeats whole messages in its short summary.
    lines = result.outlines
    failures = lines[:next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines))]
    leaks = [line for line in failures if line.startswith("changing document")]
    assert len(leaks) == 2
    pattern = (r"changing document (\d+) of row (\d+) moved document (\d+) of (the same row|row \d+) "
               r"by up to [0-9.e+-]+, first at token (\d+) of the row")
    for line in leaks:
        found = re.search(pattern, line)
        assert found, line
        assert int(found.group(3)) > int(found.group(1))  # the later document saw the earlier one
    result.stdout.no_fnmatch_line("*Traceback*")


def test_isolated_design_passes_the_same_items(project):
    result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "-m", "isolation")
    result.assert_outcomes(passed=2)
