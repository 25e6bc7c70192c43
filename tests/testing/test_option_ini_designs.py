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


def test_a_test_named_on_the_command_line_runs_alone_as_with_tensorcad_models(project):
    # Before: the ini's design items ran too (10 more items, ~40 s), where tensorcad_models' did not.
    project.makeini("[pytest]\ntensorcad_designs = designs\n")
    project.makepyfile(test_one="def test_y():\n    pass\n")
    result = project.runpytest("test_one.py::test_y", "--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == ["test_one.py::test_y"]
    named = project.runpytest("designs", "--collect-only", "-q", "-m", "closed_form")
    assert [line for line in named.outlines if "::" in line] == [
        "designs/tiny-documents.json::closed-form", "designs/tiny-plain.json::closed-form"]


def test_a_missing_option_directory_names_the_option_not_the_ini_key(project):
    result = project.runpytest("--tensorcad", "nodir")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--tensorcad: no such file or directory*nodir*"])
    assert "tensorcad_designs" not in result.stderr.str()
