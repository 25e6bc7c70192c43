"""The `tensorcad_designs` ini key: plain `pytest` collects the design files it names."""

from __future__ import annotations


def test_ini_key_collects_designs(project):
    project.makeini("[pytest]\ntensorcad_designs = designs\n")
    result = project.runpytest("--collect-only", "-q", "-m", "closed_form")
    assert [line for line in result.outlines if "::" in line] == [
        "designs/tiny-documents.json::closed-form", "designs/tiny-plain.json::closed-form"]


def test_a_missing_directory_is_a_usage_error(project):
    project.makeini("[pytest]\ntensorcad_designs = nowhere\n")
    result = project.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*tensorcad_designs: no such file or directory*nowhere*"])
