"""run_checks: what `tensorcad certify` prints, without pytest: (name, outcome, message, seconds)."""

from __future__ import annotations

import json

from tensorcad.testing import run_checks
from tensorcad.testing.checks import CHECKS, golden_data
from tensorcad.testing.plugin.fixtures import Settings
from tensorcad.testing.plugin.snapshot import golden_text


def test_every_check_in_order_with_skips_reported_as_skips(tmp_path, design_texts):
    path = tmp_path / "plain.json"
    path.write_text(design_texts["plain"])
    results = run_checks(str(path), root=tmp_path, only=(*CHECKS, "export"))  # export: asked for by name
    assert [r.name for r in results] == [*CHECKS, "export"]
    outcome = {r.name: r.outcome for r in results}
    assert outcome["isolation[eager]"] == outcome["isolation[flex]"] == "skipped"
    assert outcome["block-counts"] == "passed"  # its causal mask, counted by create_block_mask and the engine
    assert outcome["golden[analysis]"] == "skipped"  # no golden written yet: never a pass
    assert outcome["rules"] == outcome["closed-form"] == outcome["export"] == "passed"
    name, outcome, message, seconds = results[0]
    assert seconds >= 0 and message


def test_goldens_on_disk_are_compared(tmp_path, design_texts):
    import tensorcad

    design = tensorcad.load(json.loads(design_texts["isolated"]))
    settings = Settings().for_design(design)
    from tensorcad.testing.plugin.fixtures import operating_point

    from tensorcad.runtime.certification.design.goldens import file_name, golden_name

    op = operating_point(settings)
    name = golden_name(design, op)  # the collected item's golden is keyed by its operating point
    golden = tmp_path / "snapshots" / "analysis" / f"{file_name(name)}.txt"
    golden.parent.mkdir(parents=True)
    golden.write_text(golden_text("analysis", name, golden_data("analysis", design, op)))
    (result,) = run_checks(design, root=tmp_path, only=["golden[analysis]"])
    assert result.outcome == "passed"
    golden.write_text(golden.read_text().replace('"total": 90432', '"total": 90433'))
    (result,) = run_checks(design, root=tmp_path, only=["golden[analysis]"])
    assert result.outcome == "failed" and '-    "total": 90433' in result.message


def test_a_leaking_design_fails_isolation(tmp_path, design_texts):
    import tensorcad

    design = tensorcad.load(json.loads(design_texts["leaking"]))
    results = run_checks(design, Settings(seq=128, pack=24.0), root=tmp_path, only=["isolation[eager]"])
    assert results[0].outcome == "failed" and "moved document" in results[0].message
