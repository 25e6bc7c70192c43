"""--tensorcad-forms: the forms tensorcad_model is parametrized over (and the marker's `forms`)."""

from __future__ import annotations

TEST = '''
import pytest

@pytest.mark.tensorcad(design="designs/tiny-documents.json")
def test_model(tensorcad_model, tensorcad_form):
    assert tensorcad_model.form == tensorcad_form
'''


def test_default_is_both_forms(project):
    project.makepyfile(test_forms=TEST)
    result = project.runpytest("--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == [
        "test_forms.py::test_model[eager]", "test_forms.py::test_model[flex]"]


def test_option_narrows_them(project):
    project.makepyfile(test_forms=TEST)
    result = project.runpytest("--tensorcad-forms", "eager", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_model[[]eager[]] PASSED*"])


def test_unknown_form_is_refused(project):
    project.makepyfile(test_forms=TEST)
    result = project.runpytest("--tensorcad-forms", "eager,compiled")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*forms are a comma-separated list of eager, flex*"])
