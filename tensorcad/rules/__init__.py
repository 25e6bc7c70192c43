"""Rules: a registry of rule ids, one module per family, and `check` that runs them all."""

from __future__ import annotations

from functools import cached_property

from ..design import load
from ..design.model import Design
from ..errors import as_text
from . import context_parallel, experts, mixers, packing, roles, rope, shapes  # noqa: F401  (each module registers its rules)
from .registry import RULES, SEVERITIES, Diagnostic, Rule

__all__ = ["RULES", "Diagnostic", "Rule", "check", "render"]


class _Context:
    """What several rules share, computed once and only if one asks."""

    def __init__(self, design: Design, op):
        self.design, self.op = design, op

    @cached_property
    def _report(self):
        from ..analysis.report import analyze

        return analyze(self.design, self.op)

    def report(self):
        return self._report


def check(design, op=None) -> list[Diagnostic]:
    """Every rule's diagnostics, errors first, then by path."""
    design = load(design)
    if op is None:
        from ..analysis.operating_point import OperatingPoint

        op = OperatingPoint(seq=design.context)
    context = _Context(design, op)
    found = [d for r in RULES.values() for d in r.check(design, op, context)]
    return sorted(found, key=lambda d: (SEVERITIES.index(d.severity), d.path, d.rule, d.message))


def render(diagnostics: list[Diagnostic]):
    from rich.table import Table

    if not diagnostics:
        return "no findings"
    table = Table("severity", "rule", "path", "message", box=None)
    for d in diagnostics:
        style = {"error": "red", "warn": "yellow", "note": "cyan"}[d.severity]
        table.add_row(f"[{style}]{d.severity}[/]", d.rule, as_text(d.path), as_text(d.message))
    return table
