"""What a check returns: one result type (`Check`) for verify, certify and a pytest item.

Also what a check raises when it does not apply (`Skipped`), and a registered
check (`Spec`: its name, what it holds the design to, the function running it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class Skipped(Exception):
    """The check does not apply to this design; the message says why."""


@dataclass(frozen=True)
class Check:
    """One check's outcome: what `verify`, `certify` and a pytest item report."""

    name: str
    status: str  # passed | failed | skipped
    message: str = ""  # why it failed or was skipped; what it showed when it passed
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def outcome(self) -> str:  # the harness's older name for status
        return self.status

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def skipped(self) -> bool:
        return self.status == SKIPPED

    def __iter__(self):  # (name, outcome, message, seconds), as certify prints it
        return iter((self.name, self.status, self.message, self.seconds))

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "outcome": self.status, "passed": self.passed,
                "skipped": self.skipped, "message": self.message, "figures": self.figures,
                "seconds": round(self.seconds, 3)}


CheckResult = Check  # the harness's name for it


@dataclass(frozen=True)
class Spec:
    """A registered check: its name, what it holds the design to, and the function that runs it."""

    name: str
    holds: str
    run: Callable[[Any], Check]  # (Subject) -> Check
    category: str | None = None  # the pytest marker that selects it (-m isolation)


def passed(name: str, message: str, figures: dict | None = None) -> Check:
    return Check(name, PASSED, message, figures or {})


def failed(name: str, message: str, figures: dict | None = None) -> Check:
    return Check(name, FAILED, message, figures or {})


def skipped(name: str, reason: str) -> Check:
    return Check(name, SKIPPED, reason)
