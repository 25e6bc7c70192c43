"""The browser tests' fixtures: Debian's chromium through Playwright, one browser a module.

Skipped when chromium or Playwright is missing, unless TENSORCAD_REQUIRE_BROWSER=1
(CI sets it), which turns the skip into a failure. Each page gets its own
storage and fails its test on any script error, failed request, or request
to anywhere but the editor. Helpers the tests call are in ``browser_fixtures.py``.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from browser_fixtures import ARGS, CHROMIUM, TIMEOUT_MS, _ready
from tensorcad.editor import make_server


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401 (only whether it is there)
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
