"""`tensorcad verify`: build the scaled model and prove it against PyTorch.

verify runs the registry of `runtime.certification` (`VERIFY`: the checks certify and
the pytest collection run, less the goldens, plus its own forward, flops,
fused-equals-eager and kept-scores) on one `Subject` at the one set of defaults
(`runtime.settings`). What each check holds the design to is said once, in
`certification.REGISTRY`; `tensorcad verify --help` lists it.

FlexAttention runs uncompiled unless ``compile=True``: on CPU compiling it
takes longer than every check together, and computes the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing
from tensorcad.runtime.building.settings import DEFAULTS, Settings

from .registry import (  # noqa: F401 - Check and its makers are verify's public names too
    FUSED_TOLERANCE,
    VERIFY,
    Check,
    Progress,
    Subject,
    check_names,
    failed,
    passed,
    run_checks,
    skipped,
)

CHECKS = VERIFY
DEFAULT_SEQ = DEFAULTS["seq"]


@dataclass(frozen=True)
class VerifyReport:
    design: str
    seq: int
    rows: int
    packing: Packing | None
    params: int  # parameters of the built model, counted by torch
    checks: tuple[Check, ...]
    settings: Any = None  # the Settings it ran at

    @property
    def passed(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "failed"]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def to_json(self) -> dict:
        return {
            "design": self.design, "seq": self.seq, "rows": self.rows, "params": self.params,
            "packing": None if self.packing is None else {"mean": self.packing.mean, "spread": self.packing.spread},
            "settings": None if self.settings is None else self.settings.to_json(),
            "passed": self.passed, "checks": [c.to_json() for c in self.checks],
        }


def _validate(design: Design, seq: int | None, rows: int) -> None:
    tokens = [i.name for i in design.inputs if i.role == "tokens"]
    if len(tokens) != 1:
        raise TensorcadError("inputs", f"verify makes up one token-ids input; {design.name} has "
                                       f"{len(tokens)} ({', '.join(tokens) or 'none'})")
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= 64:
        raise TensorcadError("rows", f"expected an integer in 1..64, got {rows!r}")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise TensorcadError("seq", f"expected tokens a row, got {seq!r}")


def settings_for(seq: int | None = None, packing: Packing | None = None, params: int = DEFAULTS["params"],
                 seed: int = DEFAULTS["seed"], rows: int = DEFAULTS["rows"]) -> Settings:
    """The Settings verify's keyword arguments mean (packing None: the default packing)."""
    pack = {} if packing is None else {"pack": packing.mean, "spread": packing.spread}
    return Settings(seq=seq, params=params, seed=seed, rows=rows, **pack)


def verify(design: Design | str, *, seq: int | None = None, packing: Packing | None = None,
           params: int = DEFAULTS["params"], seed: int = DEFAULTS["seed"], rows: int = DEFAULTS["rows"],
           compile: bool = False, checks: tuple[str, ...] | None = None, settings: Settings | None = None,
           progress: Progress | None = None) -> VerifyReport:
    """Run every check (or only ``checks``, by name) on ``design`` scaled to about ``params`` parameters.

    ``seq`` defaults to 512 tokens a row, or the scaled design's context when that is shorter;
    ``packing`` to 96-token documents of spread 1 (`runtime.settings.DEFAULTS`). ``settings``,
    when given, stands for all of seq, packing, params, seed and rows.
    """
    names = check_names(checks, VERIFY)
    design = load(design) if not isinstance(design, Design) else design
    _validate(design, seq, rows)
    settings = settings if settings is not None else settings_for(seq, packing, params, seed, rows)
    subject = Subject(design, settings, compile=compile)
    subject.check_seq()  # a seq the scaled model cannot hold is bad input, refused first
    results = run_checks(subject, names, progress)
    count = sum(p.numel() for p in subject.model("flex").module.parameters())
    return VerifyReport(design.name, subject.settings.seq, subject.settings.rows, subject.packing, count,
                        results, subject.settings)
