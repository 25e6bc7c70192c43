"""Goldens: syrupy snapshots of analysis, rules and generated code as readable text.

Each golden is one file under the project's `snapshots/<kind>/`, named after the
design, with a version header, sorted keys and stable number formatting, so a
reviewer can read a diff of it. `pytest --snapshot-update` rewrites them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

VERSION = 1
KINDS = {"analysis": "txt", "rules": "txt", "codegen": "py"}
SIGNIFICANT = 10  # digits kept of every float: enough for any figure, immune to last-bit noise


def _stable(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) < 2**53:
            return int(value)
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    return value


def golden_text(kind: str, name: str, data: Any) -> str:
    """The text a golden file holds: a header line, then sorted JSON or source."""
    if kind not in KINDS:
        raise ValueError(f"unknown golden kind {kind!r} ({', '.join(KINDS)})")
    header = f"# tensorcad golden v{VERSION}: {kind} of {name}\n"
    if kind == "codegen":
        return header + data
    return header + json.dumps(_stable(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def golden_extension(root: str | Path, kind: str) -> type[SingleFileSnapshotExtension]:
    """A syrupy extension writing `<root>/snapshots/<kind>/<name>.<ext>`."""
    directory = str(Path(root) / "snapshots" / kind)

    class TensorcadGolden(SingleFileSnapshotExtension):
        _write_mode = WriteMode.TEXT
        file_extension = KINDS[kind]

        @classmethod
        def dirname(cls, *, test_location) -> str:
            return directory

        @classmethod
        def discovery_dirname(cls, *, test_location) -> str:
            return directory

        @classmethod
        def get_snapshot_name(cls, *, test_location, index=0) -> str:
            # The design's name, not the test's: one golden a design, whatever test checks it.
            return str(index) if isinstance(index, str) else f"{test_location.testname}.{index}"

    TensorcadGolden.__name__ = f"TensorcadGolden_{kind}"
    return TensorcadGolden


def assert_golden(snapshot, root: str | Path, kind: str, name: str, data: Any) -> None:
    """Compare (or, with --snapshot-update, write) one golden."""
    text = golden_text(kind, name, data)
    assert text == snapshot(extension_class=golden_extension(root, kind), name=_file_name(name))


def _file_name(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name)
    return safe.strip(".") or "design"
