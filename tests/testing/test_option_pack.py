"""--tensorcad-pack / --tensorcad-spread: the packing every fixture and check draws from."""

from __future__ import annotations

TEST = '''
import pytest

@pytest.mark.tensorcad(design="designs/tiny-documents.json")
def test_packing(tensorcad_operating_point, tensorcad_batch):
    packing = tensorcad_operating_point.packing
    documents = tensorcad_batch[1]
    if {mean!r} is None:
        assert packing is None and int(documents.max()) == 0  # one document a row
    else:
        assert (packing.mean, packing.spread) == ({mean!r}, {spread!r})
        # fixed 32-token documents: a 256-token row holds 8 or 9 of them
        assert int(documents[0].max()) + 1 in (8, 9) if {spread!r} == 0 else int(documents.max()) > 0
'''


def test_default_is_96_token_documents_spread_1(project):
    project.makepyfile(test_pack=TEST.format(mean=96.0, spread=1.0))
    project.runpytest().assert_outcomes(passed=1)


def test_options_set_mean_and_spread(project):
    project.makepyfile(test_pack=TEST.format(mean=32.0, spread=0.0))
    project.runpytest("--tensorcad-pack", "32", "--tensorcad-spread", "0").assert_outcomes(passed=1)


def test_off_means_one_document_a_row(project):
    project.makepyfile(test_pack=TEST.format(mean=None, spread=1.0))
    project.runpytest("--tensorcad-pack", "off").assert_outcomes(passed=1)


def test_packing_off_skips_collected_isolation(project):
    result = project.runpytest("--tensorcad", "designs/tiny-documents.json", "--tensorcad-pack", "off",
                               "-m", "isolation", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*packing is off*nothing to isolate*"])
