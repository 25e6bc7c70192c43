"""What a downstream project saw that it should not (issue 33, items 5 and 6), each through pytester."""

from __future__ import annotations

import pytest

MODELS = """
    import torch
    import torch.nn as nn


    class Leaks(nn.Module):
        vocab = 32

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Embedding(32, 8)
            self.out = nn.Linear(8, 32)

        def forward(self, ids, documents, positions=None):
            x = self.embed(ids)
            return self.out(x + x.mean(dim=1, keepdim=True))  # every position sees the whole row


    def leaks():
        return Leaks()


    def broken():
        raise ValueError("no checkpoint at /models/mine")
"""

OPTIONS = ("-p", "no:cacheprovider", "--tensorcad-seq", "64", "--tensorcad-pack", "12", "--tensorcad-sample", "4")


def test_isolation_flex_items_show_none_of_torchs_warnings(project):
    # Before: torch's 11-line "flex_attention called without torch.compile()" block on every isolation[flex]
    # item, and its torch.jit.script_method deprecations: filtered only in tensorcad's own pyproject.
    result = project.runpytest("--tensorcad", "designs", "-k", "tiny-documents and flex", *OPTIONS,
                               "-W", "default")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "flex_attention called without torch.compile" not in out
    assert "script_method" not in out


def test_a_bad_pack_value_names_the_option_and_what_it_takes(project):
    result = project.runpytest("--tensorcad-pack", "abc")
    assert result.ret != 0
    err = result.stderr.str()
    assert "argument --tensorcad-pack: expected a number or 'off', got 'abc'" in err
    assert "invalid _pack value" not in err


def test_a_certificate_failing_through_the_fixture_shows_the_users_line_not_the_harness(project):
    project.makepyfile(friction_models=MODELS)
    project.syspathinsert()
    project.makepyfile(test_mine="""
        import pytest

        @pytest.mark.tensorcad(model="friction_models:leaks", seq=64, pack=12, sample=4)
        def test_certified(tensorcad_certificate):
            tensorcad_certificate()
    """)
    result = project.runpytest("-p", "no:cacheprovider", "--no-tensorcad-subprocess",
                               "test_mine.py::test_certified[isolation]")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "documents are not isolated" in out and "tensorcad_certificate()" in out
    assert "tensorcad/testing/plugin/models.py" not in out and "tensorcad/testing/" not in out


def test_a_typo_in_the_markers_design_is_one_line_with_where_it_looked_and_a_guess(project):
    project.makepyfile(test_typo="""
        import pytest

        @pytest.mark.tensorcad(design="designs/tiny-documets.json")
        def test_it(tensorcad_design):
            pass
    """)
    result = project.runpytest("-p", "no:cacheprovider", "test_typo.py")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*tensorcad(design=...): designs/tiny-documets.json: no such design file "
                                 "(looked for */designs/tiny-documets.json); "
                                 "did you mean 'designs/tiny-documents.json'?*"])
    assert "Traceback" not in out and "load.py" not in out and "During handling" not in out


def test_a_factory_that_raises_in_the_child_says_so_once_in_one_line(project):
    project.makepyfile(friction_models=MODELS)
    project.syspathinsert()
    project.makefile(".ini", pytest="[pytest]\ntensorcad_models = friction_models:broken\n")
    from tensorcad.runtime.certification import MODEL_CHECKS

    result = project.runpytest(*OPTIONS, "-v")
    result.assert_outcomes(failed=len(MODEL_CHECKS))
    out = result.stdout.str()
    # The failure reports, not the short summary: its lines are cut at the terminal's width, which CI's differs from.
    reports = out.split("short test summary info")[0]
    assert reports.count("friction_models:broken raised ValueError: no checkpoint at /models/mine (friction_models.py:") == 1
    assert reports.count("could not make the model (why: its isolation item)") == len(MODEL_CHECKS) - 1
    assert " | " not in out


SLOW_EXIT = """
    import gc
    import time

    import hypothesis.internal.conjecture.junkdrawer as junkdrawer


    def pytest_configure(config):
        junkdrawer.gc_cumulative_time()  # installs hypothesis's gc hook, where the interrupt landed


    def pytest_unconfigure(config):
        if hasattr(config, "workerinput"):  # a worker's cleanup past execnet's 5 s, as on a loaded machine
            end = time.monotonic() + 7
            while time.monotonic() < end:
                gc.collect()
"""


@pytest.mark.slow  # 10 s: a worker kept 7 s past its session
def test_a_worker_slow_to_clean_up_ends_a_green_run_without_a_keyboard_interrupt(pytester):
    # Before (issue 33, item 13): execnet sent the worker SIGINT 5 s after closing it, and the green run ended
    # with "Exception ignored in: <function gc_cumulative_time.<locals>.gc_callback ...> ... KeyboardInterrupt".
    pytester.makeconftest(SLOW_EXIT)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")  # a green run is all the project needs
    result = pytester.runpytest_subprocess("-n", "1", "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "KeyboardInterrupt" not in result.stdout.str() + result.stderr.str()
