"""The plugin is registered by its entry point, documents its markers, and costs nothing unused."""

from __future__ import annotations

import subprocess
import sys


def test_markers_are_documented(project):
    result = project.runpytest("--markers")
    for marker in ("tensorcad(design=", "isolation:", "closed_form:", "block_counts:", "golden:"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}*"])


def test_options_live_in_the_tensorcad_group(project):
    result = project.runpytest("--help")
    result.stdout.fnmatch_lines(["tensorcad: certify designs*", "*--tensorcad=DIR*", "*--tensorcad-seq=N*",
                                 "*--tensorcad-pack=MEAN*", "*--tensorcad-forms=LIST*", "*tensorcad_designs*"])


def test_strict_markers_pass(project):
    project.makepyfile(test_marks='''
import pytest

@pytest.mark.isolation
@pytest.mark.closed_form
@pytest.mark.block_counts
@pytest.mark.golden
@pytest.mark.tensorcad(design="nano-sort")
def test_marked():
    pass
''')
    project.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_loading_the_plugin_imports_neither_torch_nor_the_engine():
    # What pytest loads in every session of an environment with tensorcad installed: the plugin, and with it
    # tensorcad's face (its error type and lazy faces) and the testing face; nothing beyond the standard library.
    code = ("import sys, tensorcad.testing.plugin, tensorcad.testing; "
            "print(sorted(m for m in sys.modules if m.startswith('tensorcad')), "
            "sorted(m for m in ('torch', 'numpy', 'syrupy', 'scipy', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("['tensorcad', 'tensorcad.errors', 'tensorcad.faces', 'tensorcad.testing', "
                                  "'tensorcad.testing.plugin', 'tensorcad.testing.plugin.options'] []"), out.stdout


def test_a_project_that_never_uses_it_imports_no_torch(project):
    project.makepyfile(test_plain='''
import sys

def test_nothing_heavy():
    assert "torch" not in sys.modules
''')
    project.runpytest_subprocess("-p", "no:hypothesispytest").assert_outcomes(passed=1)


def test_a_session_without_syrupy_never_imports_it(project):
    # syrupy's own plugin off: what remains in sys.modules is what tensorcad's start-up and session hooks
    # import. Before issue 49 the session hook imported tensorcad.testing.plugin.snapshot, which imported syrupy.
    project.makepyfile(test_plain='''
import sys

def test_no_syrupy():
    assert "syrupy" not in sys.modules and "torch" not in sys.modules
''')
    project.runpytest_subprocess("-p", "no:syrupy", "-p", "no:hypothesispytest").assert_outcomes(passed=1)
