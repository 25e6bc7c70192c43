"""docs/packing.md's strategy and headline tables are the engine's own figures, regenerated here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorcad.analysis import evidence

DOC = Path(__file__).resolve().parents[2] / "docs" / "packing.md"


@pytest.fixture(scope="module")
def sections():
    return evidence.sections()


@pytest.mark.parametrize("name", ["strategies", "headline"])
def test_the_tables_in_docs_are_current(sections, name):
    assert evidence.between(DOC.read_text(), name) == sections[name], (
        "docs/packing.md is stale: python -m tensorcad.analysis.evidence --write docs/packing.md")


def test_the_default_count_is_the_one_the_evidence_chose():
    from tensorcad.analysis.operating_point import OperatingPoint

    _, worst = evidence.headline_table()
    assert OperatingPoint().count == ("kept" if worst < evidence.MOVE_AT else "blocks")


def test_the_strategy_table_holds_what_each_strategy_promises():
    rows = {r["strategy"]: r for r in evidence.strategy_rows()}
    assert rows["stream"]["padding"] == 0 and rows["stream"]["truncated"] == 0
    assert rows["bfd"]["split"] == rows["ffd"]["split"] == 0 and rows["split"]["truncated"] == 0
    # Truncation keeps the same pieces under bfd, ffd and pad: the same keys, exactly.
    assert rows["bfd"]["keysPerQuery"] == pytest.approx(rows["ffd"]["keysPerQuery"], rel=1e-9)
    # One document a row pays for its padding in every matmul, 1 / real share, which is
    # most of a token's work (attention, the rest, is a few percent and about the same).
    inflation = 1 / (1 - rows["pad"]["padding"])
    assert 0.9 * inflation < rows["pad"]["costVsStream"] < inflation


def test_the_log_normal_table_has_the_asked_shape():
    lengths = evidence.lognormal_lengths(1024, 3.0)
    assert lengths.documents == 200_000
    assert lengths.mean == pytest.approx(1024, rel=0.005) and lengths.spread == pytest.approx(3.0, rel=0.03)


def test_the_strategy_table_drops_what_truncation_cuts_off_and_only_there():
    """Tokens dropped: count * (length - 8,192)+ summed over the table's histogram, by the strategies that truncate."""
    import numpy as np

    lengths = evidence.lognormal_lengths(1024, 3.0)
    every = np.repeat(lengths.values, lengths.counts)
    cut = np.maximum(every - evidence.SEQ, 0).sum() / every.sum()
    for row in evidence.strategy_rows():
        truncates = row["strategy"] in ("bfd", "ffd", "pad", "trl-bfd", "torchtune")
        assert row["tokensDropped"] == pytest.approx(cut if truncates else 0.0, rel=1e-9, abs=0)
        assert (row["truncated"] > 0) == truncates
