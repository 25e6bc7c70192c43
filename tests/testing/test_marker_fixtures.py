"""A downstream project's own tests: the `tensorcad` marker configures the tensorcad_* fixtures."""

from __future__ import annotations

TEST_FILE = '''
import pytest
import torch
from tensorcad.testing import assert_closed_form, assert_isolated

pytestmark = pytest.mark.tensorcad(design="designs/tiny-documents.json", seq=256, pack=48, spread=1.0)


@pytest.mark.isolation
def test_isolated(tensorcad_model, tensorcad_batch):
    assert_isolated(tensorcad_model, *tensorcad_batch)


def test_batch_is_the_engines_packing(tensorcad_batch, tensorcad_design):
    from tensorcad.packing import draw
    ids, documents, positions = tensorcad_batch
    want_documents, want_positions = draw(2, 256, 48, 1.0, 0)
    assert torch.equal(documents, torch.from_numpy(want_documents))
    assert torch.equal(positions, torch.from_numpy(want_positions))
    assert ids.dtype == torch.int64 and int(ids.max()) < 64


@pytest.mark.closed_form
def test_closed_form(tensorcad_design, tensorcad_operating_point):
    assert tensorcad_operating_point.seq == 256
    assert tensorcad_operating_point.packing.mean == 48
    assert_closed_form(tensorcad_design, tensorcad_operating_point)


@pytest.mark.golden
def test_goldens(tensorcad_snapshot, tensorcad_design, tensorcad_operating_point):
    tensorcad_snapshot.analysis(tensorcad_design, tensorcad_operating_point)
    tensorcad_snapshot.rules(tensorcad_design, tensorcad_operating_point)
    tensorcad_snapshot.codegen(tensorcad_design)


@pytest.mark.tensorcad(design="designs/tiny-plain.json", forms=("eager",))
def test_model_form(tensorcad_model, tensorcad_form):
    assert tensorcad_model.form == tensorcad_form == "eager"
'''


def test_downstream_project_with_markers_and_fixtures_passes(project, golden_file):
    project.makepyfile(test_models=TEST_FILE)
    project.runpytest("--snapshot-update", "--strict-markers", "-m", "golden").assert_outcomes(passed=1)
    result = project.runpytest("--strict-markers", "-v")
    result.assert_outcomes(passed=6)
    # tensorcad_model is parametrized over the forms: one test a form.
    result.stdout.fnmatch_lines(["*test_isolated[[]eager[]] PASSED*", "*test_isolated[[]flex[]] PASSED*",
                                 "*test_model_form[[]eager[]] PASSED*"])
    assert golden_file(project.path, "analysis", "tiny-documents").is_file()


def test_dash_m_isolation_selects_the_marked_tests(project):
    project.makepyfile(test_models=TEST_FILE)
    result = project.runpytest("-m", "isolation", "--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == [
        "test_models.py::test_isolated[eager]", "test_models.py::test_isolated[flex]"]


def test_unknown_marker_keyword_is_a_usage_error(project):
    project.makepyfile(test_bad='''
import pytest

@pytest.mark.tensorcad(design="nano-sort", sequence=512)
def test_it(tensorcad_operating_point):
    pass
''')
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_it: tensorcad: unknown marker keyword 'sequence' (keywords: design, seq, *"])


def test_a_preset_name_is_a_design(project):
    project.makepyfile(test_preset='''
import pytest

@pytest.mark.tensorcad(design="nano-sort", pack=None)
def test_it(tensorcad_design, tensorcad_operating_point):
    assert tensorcad_design.name == "nano-sort"
    assert tensorcad_operating_point.seq == 256  # the design's context is shorter than 512
    assert tensorcad_operating_point.packing is None
''')
    project.runpytest().assert_outcomes(passed=1)
