"""The editor in a real browser: Debian's chromium driven by Playwright (no browser download).

Skipped when chromium or Playwright is missing, unless TENSORCAD_REQUIRE_BROWSER=1
(CI sets it), which turns the skip into a failure. What the page shows is
compared with what the API answers for the same design and operating point,
and the preview's pixels with the fractions the server counted.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tensorcad.editor import api, make_server

from browser_fixtures import DOCS, TIMEOUT_MS, _pack, _pick, _ready, _settle, _value

SCREENSHOT = Path(os.environ.get("TENSORCAD_SCREENSHOT", "/tmp/tensorcad-editor.png"))


def test_packed_readout_block_ratio_and_preview(page):
    _pick(page, DOCS)
    _pack(page, 1024, 0)
    page.wait_for_selector("td.value[data-field='flops.packed.blockRatio']")
    _settle(page)

    expected = api.analyze({"design": DOCS, "op": {"seq": 8192, "packing": {"mean": 1024, "spread": 0}}})
    packed = expected["report"]["flops"]["packed"]
    assert _value(page, "flops.packed.blockRatio") == packed["blockRatio"]
    assert page.inner_text("td.value[data-field='flops.packed.blockRatio']") == f"{packed['blockRatio']:.2f}×"
    assert page.inner_text("td.value[data-field='flops.packed.blockRatio']") == "1.37×"
    assert _value(page, "flops.packed.trainPerToken") == packed["trainPerToken"]
    assert _value(page, "training.cost") == expected["report"]["training"]["cost"]
    assert "the cost counts from this" in page.inner_text("tr[data-field='flops.packed.trainPerToken']")
    assert "keeps packed documents apart" in page.inner_text("li[data-step='attention']")
    assert "1.37x" in page.inner_text("li[data-step='attention']")
    assert page.inner_text("tr[data-rule='document-blocks']").count("note") == 1

    # The preview: one sampled row, each cell shaded by the fraction the server counted.
    canvas = page.locator("#preview")
    assert canvas.get_attribute("data-state") == "drawn"
    assert page.inner_text("#preview-sample") == "one sampled row"
    truth = api.preview({"design": DOCS, "op": {"seq": 8192, "packing": {"mean": 1024, "spread": 0}},
                         "attention": 0, "cells": 128})
    pixels = page.evaluate("""() => {
        const c = document.getElementById('preview');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const n = 128, side = c.width / n, out = [];
        for (let i = 0; i < n; i++) { const line = [];
          for (let j = 0; j < n; j++) {
            const x = Math.floor((j + 0.5) * side), y = Math.floor((i + 0.5) * side);
            line.push(d[(y * c.width + x) * 4]); }
          out.push(line); }
        return out; }""")
    kept_cells = 0
    for i, line in enumerate(truth["fractions"]):
        for j, fraction in enumerate(line):
            # The red channel falls from 255 (nothing kept) to 31 (everything kept).
            assert abs(pixels[i][j] - round(255 + (31 - 255) * fraction)) <= 1, (i, j, fraction)
            kept_cells += fraction > 0
    assert int(canvas.get_attribute("data-kept-cells")) == kept_cells
    page.screenshot(path=str(SCREENSHOT), full_page=True)


def test_packing_control_hides_for_a_design_without_documents_until_a_packing_is_set(page):
    _pick(page, "llama-3-8b")
    assert page.locator("#packing").is_hidden()
    _pick(page, DOCS)
    assert page.locator("#packing").is_visible()
    page.check("#pack")
    assert page.input_value("#spread") == "1"  # real corpora vary: spread starts at 1
    _settle(page)
    # Carried over to a design with no documents input, it stays in view to be taken off.
    _pick(page, "llama-3-8b")
    assert page.locator("#packing").is_visible()
    assert "changes nothing" in page.inner_text("#packing-note")
    assert page.locator("td.value[data-field='flops.packed.blockRatio']").count() == 0
    page.uncheck("#pack")
    _settle(page)
    assert page.locator("#packing").is_hidden()
    assert json.loads(page.evaluate("localStorage.getItem('tensorcad.op')"))["packing"] is None


def test_a_stored_packing_the_engine_refuses_is_dropped_on_load(page):
    op = {"seq": 8192, "hardware": "H100", "gpus": 64, "mfu": 0.4, "pricePerGpuHour": 2.5,
          "packing": {"mean": -5, "spread": 1}}
    page.evaluate(f"localStorage.setItem('tensorcad.op', {json.dumps(json.dumps(op))})")
    page.reload()
    _ready(page)
    stored = json.loads(page.evaluate("localStorage.getItem('tensorcad.op')"))
    assert stored["packing"] is None and stored["gpus"] == 64  # the rest is kept
    assert not page.is_checked("#pack")
    assert "Dropped a stored packing" in page.inner_text("#op-notice")
    assert "op.packing.mean" in page.inner_text("#op-notice")


def test_a_stored_packing_the_engine_accepts_shows_on_any_design(page):
    _pick(page, "llama-3-8b")
    op = {"seq": 8192, "packing": {"mean": 512, "spread": 1}}
    page.evaluate(f"localStorage.setItem('tensorcad.op', {json.dumps(json.dumps(op))})")
    page.reload()
    _ready(page)
    assert page.locator("#packing").is_visible() and page.is_checked("#pack")
    assert page.input_value("#docs") == "512"


def test_a_malformed_design_shows_the_error_and_keeps_the_text(page):
    _pick(page, DOCS)
    page.click("#tab-json")
    broken = page.input_value("#design").replace('"dim": 4096', '"dim": -4096', 1)
    page.fill("#design", broken)
    _settle(page)
    error = page.locator("#design-error")
    assert error.is_visible()
    assert error.get_attribute("data-path").startswith("nodes[0]")
    assert page.input_value("#design") == broken

    not_json = broken[: len(broken) // 2]
    page.fill("#design", not_json)
    _settle(page)
    assert "is not valid JSON" in page.inner_text("#design-error")
    assert page.input_value("#design") == not_json
    assert page.locator("#readout").get_attribute("class").split().count("stale") == 1


def test_choosing_a_strategy_shows_padding_and_the_apis_figures(page):
    _pick(page, DOCS)
    _pack(page, 1024, 3)
    page.select_option("#strategy", "bfd")
    page.wait_for_selector("td.value[data-field='flops.packed.packing.padding']")
    _settle(page)
    op = {"seq": 8192, "packing": {"mean": 1024, "spread": 3, "strategy": "bfd"}}
    expected = api.analyze({"design": DOCS, "op": op})["report"]
    packed = expected["flops"]["packed"]
    assert _value(page, "flops.packed.packing.padding") == pytest.approx(packed["packing"]["padding"])
    assert _value(page, "flops.packed.trainPerToken") == packed["trainPerToken"]
    assert _value(page, "training.cost") == expected["training"]["cost"]
    assert "bfd: figures per real token" in page.inner_text("tr[data-field='flops.packed.packing.padding']")


def test_a_design_opened_from_the_command_line_starts_at_its_own_context(browser):
    # nano-sort holds 256 positions: the editor must not open it at a preset's 8,192.
    httpd, address = make_server(design="nano-sort")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(address)
        _ready(page)
        assert page.input_value("#seq") == "256"
        assert _value(page, "flops.keysPerQuery") == api.analyze({"design": "nano-sort", "op": {"seq": 256}})[
            "report"]["flops"]["keysPerQuery"]
    finally:
        context.close()
        httpd.shutdown()
        httpd.server_close()
