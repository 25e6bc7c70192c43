"""The registry of rule ids: each rule has a severity, a doc line and a check function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

SEVERITIES = ("error", "warn", "note")


@dataclass(frozen=True)
class Diagnostic:
    rule: str
    severity: str
    message: str
    path: str

    def to_json(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "path": self.path}


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # the most severe it reports
    doc: str
    check: Callable[..., Iterable[Diagnostic]]


RULES: dict[str, Rule] = {}


def rule(id: str, severity: str, doc: str):
    """Register a check under a rule id."""
    assert severity in SEVERITIES

    def register(fn: Callable[..., Iterable[Diagnostic]]) -> Callable[..., Iterable[Diagnostic]]:
        if id in RULES:
            raise ValueError(f"rule {id!r} registered twice")
        RULES[id] = Rule(id, severity, doc, fn)
        return fn

    return register
