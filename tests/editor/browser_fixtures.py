"""What the browser tests share: Debian's chromium through Playwright, one browser a module.

Skipped when chromium or Playwright is missing, unless TENSORCAD_REQUIRE_BROWSER=1
(CI sets it), which turns the skip into a failure. Each page gets its own
storage and fails its test on any script error, failed request, or request
to anywhere but the editor.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from tensorcad.editor import make_server

CHROMIUM = os.environ.get("TENSORCAD_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
DOCS = "llama-3-8b-documents"
TIMEOUT_MS = 20_000


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        if os.environ.get("TENSORCAD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TENSORCAD_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def url():
    httpd, address = make_server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield address
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def page(browser, url):
    """A fresh page with its own storage; fails the test on any script error or failed request."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: None if r.url.startswith((url, "data:")) else problems.append(
        f"fetched from elsewhere: {r.url}"))
    page.goto(url)
    _ready(page)
    yield page
    context.close()
    assert not problems, problems


def _ready(page) -> None:
    """Wait until the answer to the latest edit has been drawn (the page marks itself busy
    synchronously on every edit, so this never sees the state from before the edit)."""
    # A selector, not a predicate: the page's CSP forbids the eval a predicate needs.
    page.wait_for_selector("body[data-state='ready'], body[data-state='error']", state="attached")


_settle = _ready


def _pick(page, name: str) -> None:
    page.select_option("#preset", name)
    _settle(page)


def _value(page, field: str) -> float:
    return float(page.get_attribute(f"td.value[data-field='{field}']", "data-value"))
