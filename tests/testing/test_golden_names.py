"""Goldens are keyed by what they depend on: the design and its operating point.

A test checking a design with `tensorcad_snapshot` at one operating point and the
collected design's golden items at another keep two files, so `--snapshot-update`
followed by a plain run passes; a missing golden fails in one line.
"""

from __future__ import annotations

import tensorcad
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing
from tensorcad.runtime.certification.design.goldens import golden_name

OWN_TEST = """
import tensorcad
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing


def test_at_my_point(tensorcad_snapshot):
    design = tensorcad.load("designs/tiny-documents.json")
    tensorcad_snapshot.analysis(design, OperatingPoint(seq=64, packing=Packing(16, 0.5)))
"""


def test_the_name_holds_the_operating_point_unless_it_is_the_designs_own():
    design = tensorcad.load("nano-sort")
    assert golden_name(design) == golden_name(design, OperatingPoint(seq=design.context)) == "nano-sort"
    assert golden_name(design, OperatingPoint(seq=128)) == "nano-sort@seq128"
    packed = golden_name(design, OperatingPoint(seq=128, packing=Packing(16, 0.5)))
    assert packed.startswith("nano-sort@") and {"mean16", "seq128", "spread0.5"} <= set(packed[10:].split("-"))
    assert packed != golden_name(design, OperatingPoint(seq=128, packing=Packing(16, 1.0)))


def test_a_test_and_the_collected_design_keep_two_goldens(project):
    project.makepyfile(test_mine=OWN_TEST)
    update = project.runpytest("--tensorcad", "designs", "-k", "golden or my_point", "--snapshot-update", "-p",
                               "no:randomly")
    update.assert_outcomes(passed=7)
    analysis = sorted(p.name for p in (project.path / "snapshots" / "analysis").iterdir())
    mine = [n for n in analysis if n.startswith("tiny-documents@") and "seq64" in n]
    collected = [n for n in analysis if n.startswith("tiny-documents") and n not in mine]
    assert len(mine) == 1 and len(collected) == 1, analysis  # two goldens, not one written twice
    project.runpytest("--tensorcad", "designs", "-k", "golden or my_point").assert_outcomes(passed=7)


def test_a_missing_golden_fails_in_one_line_naming_the_fix(project):
    project.makepyfile(test_mine=OWN_TEST)
    result = project.runpytest("-k", "my_point")
    result.assert_outcomes(failed=1)
    out = result.outlines
    failure = out[out.index(next(line for line in out if "FAILURES" in line)) + 2:
                  out.index(next(line for line in out if "short test summary" in line))]
    assert len(failure) == 1, failure  # one line: no traceback, no syrupy report
    assert failure[0].startswith("no golden ") and failure[0].endswith("run pytest --snapshot-update to write it")
