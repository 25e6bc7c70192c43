"""``analyze --pack-strategy all``: one row a strategy, each row the figures ``analyze --pack-strategy S`` gives."""

import json

import pytest

from tensorcad import cli
from tensorcad.packing.settings import STRATEGIES

POINT = ["llama-3-8b-documents", "--seq", "8192", "--pack", "1000"]


def _json(capsys, *argv) -> dict:
    assert cli.main(["analyze", *POINT, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_strategy_is_a_row_with_its_own_analysis_figures(capsys):
    rows = _json(capsys, "--pack-strategy", "all")["strategies"]
    assert [r["strategy"] for r in rows] == list(STRATEGIES)
    for row in rows:
        alone = _json(capsys, "--pack-strategy", row["strategy"])  # the strategy analysed by itself
        packed = alone["flops"]["packed"]
        assert row["padding"] == packed["packing"]["padding"] and row["split"] == packed["packing"]["split"]
        assert row["keysPerQuery"] == packed["keysPerQuery"] and row["gpuHours"] == alone["training"]["gpuHours"]
    by = {r["strategy"]: r for r in rows}
    assert by["pad"]["documentsPerRow"] == 1.0 and by["pad"]["padding"] > 0.5  # a document a row wastes the rest
    assert by["stream"]["padding"] == 0.0 and by["stream"]["split"] > 0  # streaming cuts documents, pads nothing


def test_the_table_prints_and_needs_packing(capsys):
    assert cli.main(["analyze", *POINT, "--pack-strategy", "all"]) == 0
    out = capsys.readouterr().out
    assert "packing strategies at this operating point" in out and all(s in out for s in STRATEGIES)
    assert cli.main(["analyze", "llama-3-8b-documents", "--pack-strategy", "all"]) == 2
    assert "--pack-strategy: all compares how packed rows are filled" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["rules", "walkthrough"])
def test_all_is_for_analyze_alone(capsys, command):
    assert cli.main([command, *POINT, "--pack-strategy", "all"]) == 2
    assert "unknown strategy 'all'" in capsys.readouterr().err
