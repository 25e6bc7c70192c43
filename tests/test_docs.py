"""Every example in the README and docs/ runs as written.

- A ```python block is executed (in a child process, from the folder that holds
  this clone, as a newcomer would run it).
- A ```bash line that starts with ``tensorcad`` and names no placeholder
  (``DESIGN``, ``FILE``, ``[...]``) is run and must exit 0.
- A ```json block preceded by ``<!-- file: NAME -->`` is written to NAME first,
  so the commands after it can read it.
- A block preceded by ``<!-- not run: REASON -->`` is skipped with that reason
  (a server that blocks, a fragment of a larger program); the reason is reported.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!--\s*(?P<note>(?:not run|file):[^>]*?)\s*-->\s*\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b|\[|\.\.\.|\|")
SERVERS = ("editor", "mcp")


def _blocks():
    for page in PAGES:
        for m in FENCE.finditer(page.read_text()):
            line = page.read_text().count("\n", 0, m.start("body"))
            yield page.relative_to(ROOT), line, m.group("lang"), m.group("body"), m.group("note")


def _commands(body: str) -> list[str]:
    """The runnable ``tensorcad ...`` commands of a shell block, in order (``a && b`` counts both)."""
    out = []
    for text in body.splitlines():
        for part in text.split(" #")[0].split("&&"):
            command = part.strip()
            if command.startswith("tensorcad ") and not PLACEHOLDER.search(command):
                out.append(command)
    return out


def _examples():
    files: dict[Path, dict[str, str]] = {}
    for page, line, lang, body, note in _blocks():
        if note and note.startswith("file:"):
            files.setdefault(page, {})[note.removeprefix("file:").strip()] = body
        elif lang == "python" or (lang == "bash" and _commands(body)):
            yield pytest.param(page, lang, body, dict(files.get(page, {})), note, id=f"{page}:{line}")


@pytest.mark.parametrize("page,lang,code,files,note", list(_examples()))
def test_the_example_runs(page, lang, code, files, note, tmp_path):
    if note and note.startswith("not run:"):
        pytest.skip(f"{page}: {note}")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)  # a file in a folder: shards/part-0.jsonl
        (tmp_path / name).write_text(text)
    if lang == "bash":
        for command in _commands(code):  # in order, in one folder: a later line reads what an earlier wrote
            argv = shlex.split(command)[1:]
            if argv[0] in SERVERS:
                continue  # serves until interrupted: tests/editor and tests/mcp/test_mcp.py run its server
            run = subprocess.run([sys.executable, "-m", "tensorcad.cli", *argv], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, f"{page}: {command}\n{run.stderr[-2000:]}"
        return
    # From a folder holding a folder named like the package (as the folder above a clone
    # named tensorcad does): that folder must not shadow the installed package.
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / "tensorcad").symlink_to(ROOT, target_is_directory=True)
    script = tmp_path / "example.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], cwd=holder, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{page}: python block\n{run.stderr[-2000:]}"


def test_the_design_page_example_is_the_design_it_says():
    import json

    import tensorcad

    files = {note.removeprefix("file:").strip(): body for page, _, _, body, note in _blocks()
             if note and note.startswith("file:") and page.name == "designs.md"}
    design = tensorcad.load(json.loads(files["tiny-documents.json"]))
    assert design.name == "tiny-documents" and {i.role for i in design.inputs} == {"tokens", "documents", "positions"}
    assert set(design.source) == {"name", "description", "context", "inputs", "nodes", "output"}  # every top-level key
