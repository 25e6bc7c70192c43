"""The checks a design file is certified by: the runtime's registry, under the harness's names.

`run_checks(design)` is what `tensorcad certify DESIGN` prints and what each
collected pytest item runs (`tensorcad.testing.plugin.collect`): `tensorcad.runtime.certification`,
the one registry `tensorcad verify` runs too. A skip is reported as a skip, never
as a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tensorcad.runtime.building import DEFAULTS, Settings
from tensorcad.runtime.certification import CERTIFY, REGISTRY, Check, CheckResult, Skipped, file_golden, golden_data

CHECKS = {name: REGISTRY[name].run for name in CERTIFY}  # name -> the function, in order


def run_checks(
    design: Any,
    settings: Settings | None = None,
    *,
    root: str | Path = ".",
    only: Iterable[str] | None = None,
    golden: Any = None,
) -> list[Check]:
    """Certify one design: each check's (name, outcome, message, seconds), in order.

    ``design`` is a preset name, a path (tried against ``root`` first) or a loaded
    design; ``settings`` the operating point and scale (the runtime's defaults:
    seq 512, 96-token documents, spread 1, about a million parameters); goldens
    are read from ``root/snapshots/``.
    """
    from tensorcad.runtime.certification import certify

    from .plugin.fixtures import resolve_design

    design = resolve_design(design, Path(root))
    return list(certify(design, settings, only=only, golden=golden or file_golden(root)))


__all__ = ["CHECKS", "Check", "CheckResult", "DEFAULTS", "Skipped", "file_golden", "golden_data", "run_checks"]
