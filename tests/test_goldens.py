"""Goldens of every preset at its default operating point: analysis, rules and generated code.

A figure that moves fails here; `python -m pytest tests/test_goldens.py --snapshot-update`
rewrites `snapshots/`. Packing is off by default, so packing changes none of these.
"""

from pathlib import Path

import pytest

from tensorcad.testing.plugin.snapshot import assert_golden
from tensorcad.analysis.report import analyze
from tensorcad.design import load, preset_names
from tensorcad.rules import check

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", preset_names())
def test_analysis_golden(snapshot, name):
    assert_golden(snapshot, ROOT, "analysis", name, analyze(load(name)).to_json())


@pytest.mark.parametrize("name", preset_names())
def test_rules_golden(snapshot, name):
    assert_golden(snapshot, ROOT, "rules", name, [d.to_json() for d in check(load(name))])


@pytest.mark.parametrize("name", preset_names())
def test_codegen_golden(snapshot, name):
    from tensorcad.codegen import generate

    assert_golden(snapshot, ROOT, "codegen", name, generate(load(name)))
