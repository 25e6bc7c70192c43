"""What the browser tests share besides their fixtures (``conftest.py``): the browser's
path and flags, and waiting for the page to draw the answer to the latest edit."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("TENSORCAD_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
DOCS = "llama-3-8b-documents"
TIMEOUT_MS = 20_000


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


def _pack(page, mean, spread) -> None:
    """Turn packing on with gamma documents of this mean and spread (as a user types them)."""
    page.check("#pack")
    page.fill("#docs", str(mean))
    page.fill("#spread", str(spread))
