"""golden[analysis]: a changed figure fails, `--snapshot-update` rewrites the golden, others stay put."""

from __future__ import annotations

import json


def test_changed_figure_fails_and_snapshot_update_rewrites_it(project, golden_file):
    project.runpytest("--tensorcad", "designs", "-m", "golden", "--snapshot-update").assert_outcomes(passed=6)
    golden = golden_file(project.path, "analysis", "tiny-documents")
    other = golden_file(project.path, "analysis", "tiny-plain")
    before, other_before = golden.read_text(), other.read_text()
    assert before.startswith(f"# tensorcad golden v1: analysis of {golden.stem}\n")
    assert json.loads(before.split("\n", 1)[1])["params"]["total"] == 90432

    # A wider MLP changes the parameter count and every FLOP figure.
    path = project.path / "designs" / "tiny-documents.json"
    design = json.loads(path.read_text())
    design["nodes"][1]["params"]["block"]["params"]["mlp"]["hidden"] = 256
    path.write_text(json.dumps(design))

    result = project.runpytest("--tensorcad", "designs", "-m", "golden")
    result.assert_outcomes(failed=3, passed=3)  # every golden of the changed design moves
    result.stdout.fnmatch_lines(["*FAILED designs/tiny-documents.json::golden[[]analysis[]]*"])
    # syrupy's diff names the figure that moved (its summary line is not printed
    # when this test itself runs inside an xdist worker, so the diff is what we read)
    result.stdout.fnmatch_lines(["*-*\"attentionShare\": *", "*+*\"attentionShare\": *"])

    project.runpytest("--tensorcad", "designs", "-m", "golden", "--snapshot-update").assert_outcomes(passed=6)
    after = golden.read_text()
    assert after != before
    assert json.loads(after.split("\n", 1)[1])["params"]["total"] > 90432
    assert other.read_text() == other_before  # the other design's golden is kept
    project.runpytest("--tensorcad", "designs", "-m", "golden").assert_outcomes(passed=6)
