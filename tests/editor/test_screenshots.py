"""The screenshots the README and docs/editor.md show exist, are PNGs, and stay small."""

import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+\.png)\)")


def _shown() -> list[Path]:
    out = []
    for page in (ROOT / "README.md", ROOT / "docs" / "editor.md"):
        out += [(page.parent / link).resolve() for link in IMAGE.findall(page.read_text())]
    return out


def test_every_screenshot_shown_is_a_small_png_under_docs_images():
    shown = _shown()
    names = {p.name for p in shown}
    assert {"editor.png", "editor-inspector.png", "editor-blocks.png", "editor-chart.png"} <= names
    for path in shown:
        assert path.parent == ROOT / "docs" / "images", path
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", path
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
        assert 100 <= width <= 1600 and 100 <= height <= 1200, (path, width, height)
        assert len(data) < 300_000, (path, len(data))
