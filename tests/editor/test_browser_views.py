"""The editor's design view, kernel blocks, chart and context-parallel readout, in a real browser.

Each drawing is read back from the page (its data attributes and the
overlay's own pixels) and held to the engine called here, in-process, or to
``tensorcad analyze --json`` run as a command: never to the page's own
arithmetic.

Setting TENSORCAD_SCREENSHOTS to a folder writes the README's and
docs/editor.md's screenshots there (docs/images holds the committed ones).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from browser_fixtures import DOCS, _pack, _pick, _settle
from tensorcad.analysis.tiles import row_tile_counts, tile_verdicts
from tensorcad.design import load
from tensorcad.editor import api
from tensorcad.views.preview import sample_row
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing

HEADS = "nodes[1].params.block.params.attention.heads"
ATTENTION = "nodes[1].params.block.params.attention"
SHOTS = os.environ.get("TENSORCAD_SCREENSHOTS")


def _shot(page, name: str, selector: str | None = None) -> None:
    if not SHOTS:
        return
    path = Path(SHOTS) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (page.locator(selector) if selector else page).screenshot(path=str(path))


def _field(path: str) -> str:
    return f"#fields input[data-path='{path}']"


def _error_at(page, path: str):
    return page.locator(f".field-error[data-path='{path}']")


def _engine_error(design: dict) -> TensorcadError:
    with pytest.raises(TensorcadError) as caught:
        api.validate({"design": design})
    return caught.value


def test_an_invalid_head_count_shows_its_error_at_the_field_and_undo_restores_it(page):
    _pick(page, DOCS)
    page.click(f"#tree .item[data-path='{ATTENTION}']")
    assert page.input_value(_field(HEADS)) == "32"
    original = page.input_value("#design")

    page.fill(_field(HEADS), "30")
    _settle(page)
    bad = copy.deepcopy(load(DOCS).to_dict())
    bad["nodes"][1]["params"]["block"]["params"]["attention"]["heads"] = 30
    expected = _engine_error(bad)
    assert expected.path == HEADS
    error = _error_at(page, HEADS)
    assert error.is_visible() and error.inner_text() == expected.message  # the engine's words, at the field
    assert "invalid" in page.get_attribute(_field(HEADS), "class")
    assert "has-error" in page.get_attribute(f"#tree .item[data-path='{ATTENTION}']", "class")
    assert json.loads(page.input_value("#design")) == bad  # the JSON tab holds the same edit
    _shot(page, "editor-inspector.png", "#design-pane")

    page.click("#undo")
    _settle(page)
    assert page.input_value(_field(HEADS)) == "32"
    assert error.is_hidden()
    assert page.input_value("#design") == original
    assert page.get_attribute("body", "data-state") == "ready"

    # The keys do what the buttons do, and both views follow.
    page.keyboard.press("Control+Shift+Z")
    _settle(page)
    assert page.input_value(_field(HEADS)) == "30" and error.inner_text() == expected.message
    page.keyboard.press("Control+Z")
    _settle(page)
    assert page.input_value(_field(HEADS)) == "32" and error.is_hidden()
    page.click("#tab-json")
    assert page.locator("#design").is_visible() and page.input_value("#design") == original


def test_a_below_minimum_head_count_and_a_wrong_kind_of_value_are_the_engine_s_errors(page):
    _pick(page, DOCS)
    page.click(f"#tree .item[data-path='{ATTENTION}']")
    for typed, value in (("-3", -3), ("many", "many")):
        page.fill(_field(HEADS), typed)
        _settle(page)
        bad = copy.deepcopy(load(DOCS).to_dict())
        bad["nodes"][1]["params"]["block"]["params"]["attention"]["heads"] = value
        assert _error_at(page, HEADS).inner_text() == _engine_error(bad).message


def _overlay(page) -> tuple[list[str], list[list[tuple[int, int, int, int]]]]:
    """The overlay as drawn: its letters a query block, and the pixel at each block's centre."""
    states = page.get_attribute("#blocks", "data-states").split("/")
    pixels = page.evaluate("""() => {
        const c = document.getElementById('blocks'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const n = Number(c.dataset.blocks), side = c.width / n, out = [];
        for (let i = 0; i < n; i++) { const line = [];
          for (let j = 0; j < n; j++) {
            const x = Math.floor((j + 0.5) * side), y = Math.floor((i + 0.5) * side), k = (y * c.width + x) * 4;
            line.push([d[k], d[k + 1], d[k + 2], d[k + 3]]); }
          out.push(line); }
        return out; }""")
    return states, pixels


def _kind_of(pixel) -> str:
    r, g, b, a = pixel
    if a == 0:
        return "s"
    return "f" if g > r else "p"  # green: computed whole; orange: computed and masked


@pytest.mark.parametrize("design, op, packing", [
    (DOCS, {"mean": 1024, "spread": 1}, Packing(1024, 1)),
    (DOCS, {"mean": 300, "spread": 0}, Packing(300, 0)),
    ("mistral-7b", None, None),  # a sliding window over one document
])
def test_the_block_overlay_is_the_engine_s_own_decision_for_the_row(page, design, op, packing):
    _pick(page, design)
    seq = load(design).context if design != "mistral-7b" else 8192
    page.fill("#seq", str(seq))
    if op is not None:
        _pack(page, op["mean"], op["spread"])
    _settle(page)
    assert page.get_attribute("#blocks", "data-state") == "drawn"
    states, pixels = _overlay(page)

    attention = load(design).attentions()[0][0]
    row = sample_row(seq, packing if op is not None else None, 0)  # packing.draw's row, seed 0, as the API's
    full, partial = tile_verdicts(attention, row.documents[None], row.positions[None], block=128)
    expected = np.where(full[0, 0], "f", np.where(partial[0, 0], "p", "s"))
    assert states == ["".join(line) for line in expected]
    assert [[_kind_of(p) for p in line] for line in pixels] == expected.tolist()

    # The counts come from the coarse-to-fine counter the report uses, a different path to the same verdicts.
    full_counts, partial_counts = row_tile_counts(attention, row.documents[None], row.positions[None], block=128)
    whole, masked = int(full_counts.sum()), int(partial_counts.sum())
    assert int(page.get_attribute("#count-whole", "data-count")) == whole == int((expected == "f").sum())
    assert int(page.get_attribute("#count-masked", "data-count")) == masked == int((expected == "p").sum())
    assert int(page.get_attribute("#count-skipped", "data-count")) == expected.size - whole - masked
    if op is not None and op["spread"] == 1:
        _shot(page, "editor-blocks.png", "#preview-figure")


def _analyze_json(means: tuple[int, ...]) -> dict[int, dict]:
    """``tensorcad analyze --json`` at each mean, the commands run side by side."""
    runs = {mean: subprocess.Popen([sys.executable, "-m", "tensorcad.cli", "analyze", DOCS, "--seq", "8192",
                                    "--pack", str(mean), "--pack-spread", "1", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for mean in means}
    out = {}
    for mean, run in runs.items():
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr
        out[mean] = json.loads(stdout)["flops"]["packed"]
    return out


def test_the_chart_s_points_are_analyze_json_at_each_document_length(page):
    _pick(page, DOCS)
    _pack(page, 1024, 1)
    _settle(page)
    assert page.get_attribute("#chart-box", "data-state") == "drawn"
    drawn = {}
    for chart, key in (("chart-keys", "keysPerQuery"), ("chart-ratio", "blockRatio")):
        points = page.locator(f"#{chart} circle.point")
        rows = [(float(points.nth(i).get_attribute("data-mean")), float(points.nth(i).get_attribute("data-value")),
                 float(points.nth(i).get_attribute("cy"))) for i in range(points.count())]
        assert [m for m, _, _ in rows] == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
        # Drawn where their values say: a larger value is higher on the chart (a smaller cy).
        by_value = sorted(rows, key=lambda r: r[1])
        assert [r[2] for r in by_value] == sorted((r[2] for r in rows), reverse=True)
        drawn[key] = {m: v for m, v, _ in rows}
        ring = page.locator(f"#{chart} circle.current")
        assert float(ring.get_attribute("data-mean")) == 1024
        assert float(ring.get_attribute("data-value")) == drawn[key][1024]
    for mean, packed in _analyze_json((256, 1024, 4096)).items():
        assert drawn["keysPerQuery"][mean] == packed["keysPerQuery"]
        assert drawn["blockRatio"][mean] == packed["blockRatio"]
    # The seed's table: fixed lengths cost the kernel 1.37x at 1,024 tokens; exponential ones less.
    assert 1.1 < drawn["blockRatio"][1024] < 1.37
    assert "off the curve" not in page.inner_text("#chart-note")  # gamma lengths: the ring is on the curve
    _shot(page, "editor-chart.png", "#chart-box")


def test_each_context_parallel_rank_s_work_is_the_report_s(page):
    _pick(page, DOCS)
    _pack(page, 1024, 1)
    page.select_option("#cp-size", "4")
    page.select_option("#cp-shard", "ptrr")
    page.wait_for_selector("#ranks .rank")
    _settle(page)
    expected = api.analyze({"design": DOCS, "op": {"seq": 8192, "packing": {"mean": 1024, "spread": 1},
                                                   "cp": {"size": 4, "shard": "ptrr"}}})["report"]["contextParallel"]
    ranks = page.locator("#ranks .rank")
    assert ranks.count() == 4
    for r in expected["ranks"]:
        bar = page.locator(f"#ranks .rank[data-rank='{r['rank']}']")
        assert float(bar.get_attribute("data-blocks")) == r["blocks"]
        assert float(bar.get_attribute("data-kept")) == r["keptScores"]
    assert float(page.get_attribute("#ranks", "data-max-over-mean")) == expected["maxOverMean"]
    page.select_option("#cp-shard", "headtail")
    page.fill("#seq", "1000")  # head-tail cuts 1,000 tokens in 8 chunks of 125: not whole blocks
    _settle(page)
    assert page.get_attribute("#op-error", "data-path") == "op.cp.size"


def test_a_lengths_file_packs_as_pack_lengths_does(page, tmp_path):
    _pick(page, DOCS)
    page.check("#pack")
    _settle(page)
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("length,count\n100,30\n900,10\n5000,2\n")
    page.set_input_files("#lengths-file", str(corpus))
    page.wait_for_selector("#lengths-readout:not([hidden])")
    _settle(page)
    page.select_option("#strategy", "ffd")
    _settle(page)
    assert "corpus.csv: 42 documents" in page.inner_text("#lengths-name")
    out = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", DOCS, "--seq", "8192",
                          "--pack-lengths", str(corpus), "--pack-strategy", "ffd", "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    packed = json.loads(out.stdout)["flops"]["packed"]
    assert float(page.get_attribute("td.value[data-field='flops.packed.trainPerToken']", "data-value")) == \
        packed["trainPerToken"]
    assert float(page.get_attribute("#chart-keys circle.current", "data-value")) == packed["keysPerQuery"]
    # issue 42's friction: the file's ring sat off the gamma curve with nothing saying why
    assert ("the ring is the file's own lengths at their mean, so it sits off the curve"
            in page.inner_text("#chart-note"))
    _shot(page, "editor.png")

    bad = tmp_path / "bad.txt"
    bad.write_text("100\n-2\n")
    page.set_input_files("#lengths-file", str(bad))
    page.wait_for_selector("#op-error:not([hidden])")
    assert "bad.txt:2" in page.inner_text("#op-error")


def test_the_json_tab_and_the_tree_are_one_design_with_one_history(page):
    _pick(page, DOCS)
    original = page.input_value("#design")
    page.click("#tab-json")
    design = json.loads(original)
    design["nodes"][1]["params"]["repeat"] = 4
    page.fill("#design", json.dumps(design, indent=2))
    _settle(page)
    page.click("#tab-blocks")
    assert page.inner_text("#tree .item[data-path='nodes[1].params'] .label") == "layers ×4"
    assert int(page.get_attribute("td.value[data-field='params.total']", "data-value")) == \
        api.analyze({"design": design})["report"]["params"]["total"]
    page.keyboard.press("Control+Z")
    _settle(page)
    assert page.input_value("#design") == original
    assert page.inner_text("#tree .item[data-path='nodes[1].params'] .label") == "layers ×32"
    page.uncheck("#show-blocks")
    assert page.locator("#blocks").is_hidden() and page.locator("#preview").is_visible()


def test_the_rank_strip_is_the_engine_s_assignment_of_the_row_s_query_blocks(page):
    from tensorcad.analysis.context_parallel.ranks import block_ranks, query_block_counts
    from tensorcad.analysis.rows import Rows

    _pick(page, DOCS)
    _pack(page, 1024, 1)
    page.select_option("#cp-size", "4")
    page.select_option("#cp-shard", "ptrr")
    _settle(page)
    row = sample_row(8192, Packing(1024, 1), 0)
    rows = Rows.from_arrays(row.documents[None], row.positions[None])
    counts = query_block_counts(load(DOCS).attentions()[0][0], rows, 128)
    expected = np.asarray(block_ranks("ptrr", counts, 4))[0]
    assert page.get_attribute("#rank-strip", "data-ranks") == ",".join(str(r) for r in expected)
    assert page.get_attribute("#rank-strip", "data-blocks") == ",".join(
        str(int(b)) for b in np.bincount(expected, weights=counts[0], minlength=4))
    drawn = page.evaluate("""() => {
        const c = document.getElementById('rank-strip'), d = c.getContext('2d').getImageData(0, 0, c.width, 1).data;
        const n = 64, out = [];
        for (let i = 0; i < n; i++) { const x = Math.floor((i + 0.5) * c.width / n); out.push([d[x * 4], d[x * 4 + 1], d[x * 4 + 2]]); }
        return out; }""")
    # The strip's cells fall into one colour a rank: the same partition of query blocks as the engine's.
    colour_of = {}
    for rank, colour in zip(expected, drawn):
        assert colour_of.setdefault(int(rank), tuple(colour)) == tuple(colour)
    assert len(set(colour_of.values())) == len(colour_of) == 4


@pytest.mark.parametrize("width", [1500, 1200, 1000])
def test_the_kernel_blocks_toggle_is_whole_inside_its_pane_and_clear_of_the_preview(browser, url, width):
    # issue 42's friction: the label floated out of its 12px line, under the canvas's top edge
    context = browser.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    page.goto(url)
    _settle(page)
    toggle, pane = page.locator("label.toggle").bounding_box(), page.locator("#mask-pane").bounding_box()
    canvas = page.locator("#preview").bounding_box()
    assert pane["x"] <= toggle["x"] and toggle["x"] + toggle["width"] <= pane["x"] + pane["width"]
    assert toggle["y"] + toggle["height"] <= canvas["y"]  # above the preview, not under it
    assert toggle["x"] + toggle["width"] <= canvas["x"] + canvas["width"] + 0.5  # and no wider than it
    context.close()
