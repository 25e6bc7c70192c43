"""Collected designs under pytest-xdist: the same items on every worker, every check passes."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_two_designs_under_two_workers(project):
    project.runpytest("--tensorcad", "designs", "-m", "golden", "--snapshot-update").assert_outcomes(passed=6)
    result = project.runpytest_subprocess("--tensorcad", "designs", "-n", "2", "-p", "xdist")
    # export deselected without -m (on the workers: xdist's summary does not count it); tiny-plain's causal
    # mask has block counts too; no step
    result.assert_outcomes(passed=19, skipped=7)
