"""Goldens: what each golden holds, the text of its file, and where that file lives.

One golden a design, kind (analysis, rules, codegen) and operating point, one
file under the project's `snapshots/<kind>/`, named after what it depends on:
the design's name alone at the design's own operating point (its context,
unpacked), and the name with the settings that differ otherwise
(`nano-sort@mean96-seq128-spread1`), so that two tests checking one design at
two operating points keep two goldens. Each file has a version header,
sorted keys and stable number formatting, so a reviewer can read a diff of it.
The pytest plugin compares (and, with --snapshot-update, rewrites) them through
syrupy (`tensorcad.testing.plugin.snapshot`); `tensorcad certify` compares the files on disk.
No torch here.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Any, Callable

VERSION = 1
KINDS = {"analysis": "txt", "rules": "txt", "codegen": "py"}
SIGNIFICANT = 10  # digits kept of every float: enough for any figure, immune to last-bit noise


class NoGolden(Exception):
    """No golden file to compare with (a check reports it as a skip, never a pass)."""


def golden_data(kind: str, design: Any, op: Any) -> Any:
    """What a golden of ``kind`` holds for a design at an operating point."""
    if kind == "analysis":
        from tensorcad.analysis.report import analyze

        return analyze(design, op).to_json()
    if kind == "rules":
        from tensorcad.rules import check

        return [d.to_json() for d in check(design, op)]
    if kind == "codegen":
        from tensorcad.codegen import generate

        return generate(design)
    raise ValueError(f"unknown golden kind {kind!r}")


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


def golden_name(design: Any, op: Any = None) -> str:
    """The name of ``design``'s golden at ``op``: what the golden depends on, in its name.

    The design's own operating point (``OperatingPoint(seq=design.context)``) or
    None gives the bare name, so existing goldens keep their files.
    """
    if op is None:
        return design.name
    from tensorcad.analysis.operating_point import OperatingPoint

    here, base = _flat(op.to_json()), _flat(OperatingPoint(seq=design.context).to_json())
    parts = [f"{key.rsplit('.', 1)[-1]}{_short(value)}" for key, value in sorted(here.items())
             if base.get(key) != value]
    return f"{design.name}@{'-'.join(parts)}" if parts else design.name


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(_flat(inner, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (int, str)) or value is None:
        return str(value)
    # A list (an empirical histogram's quantiles, say): a short digest keeps the name a name.
    import hashlib

    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def file_name(name: str) -> str:
    """A golden's name as a file name: anything but letters, digits and -._@ becomes _."""
    safe = "".join(c if c.isalnum() or c in "-._@" else "_" for c in name)
    return safe.strip(".") or "design"


def golden_dir(root: str | Path, kind: str) -> Path:
    return Path(root) / "snapshots" / kind


def golden_path(root: str | Path, kind: str, name: str) -> Path:
    return golden_dir(root, kind) / f"{file_name(name)}.{KINDS[kind]}"


def file_golden(root: str | Path) -> Callable[[str, str, Any], None]:
    """Compare with the golden file on disk (certify has no syrupy to update it)."""

    def compare(kind: str, name: str, data: Any) -> None:
        path = golden_path(root, kind, name)
        if not path.is_file():
            raise NoGolden(f"no golden at {path} (write it with pytest --snapshot-update)")
        want, got = path.read_text(), golden_text(kind, name, data)
        if want != got:
            diff = "".join(list(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True), str(path), "now", n=1))[:40])
            raise AssertionError(f"{kind} of {name} differs from {path}\n{diff}")

    return compare
