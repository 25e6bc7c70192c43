"""--tensorcad-seq: tokens a row (default 512, or a design's shorter context); the marker overrides it."""

from __future__ import annotations

TEST = '''
import pytest

@pytest.mark.tensorcad(design="designs/tiny-documents.json")
def test_default(tensorcad_operating_point, tensorcad_batch):
    assert tensorcad_operating_point.seq == {want}
    assert tuple(tensorcad_batch[0].shape) == (2, {want})

@pytest.mark.tensorcad(design="designs/tiny-documents.json", seq=128)
def test_marker(tensorcad_operating_point):
    assert tensorcad_operating_point.seq == 128
'''


def test_default_is_the_designs_context_when_shorter(project):
    project.makepyfile(test_seq=TEST.format(want=256))  # tiny-documents has a 256-token context
    project.runpytest().assert_outcomes(passed=2)


def test_option_sets_it(project):
    project.makepyfile(test_seq=TEST.format(want=64))
    project.runpytest("--tensorcad-seq", "64").assert_outcomes(passed=2)


def test_bad_value_is_refused(project):
    project.makepyfile(test_seq=TEST.format(want=64))
    result = project.runpytest("--tensorcad-seq", "0")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*tensorcad.seq: expected an integer >= 1, got 0*"])
