"""The checks a design file is certified by, runnable with or without pytest.

`run_checks(design)` is what `tensorcad certify DESIGN` prints; the collector
(`harness.collect`) makes each check a pytest item that calls the same
function. A check returns a line saying what it showed, raises
``AssertionError`` when the design fails it, or ``Skipped`` when it does not
apply (a design without a documents input has nothing to isolate): a skip is
reported as a skip, never as a pass.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorcad.errors import TensorcadError

from .fixtures import Settings, build_model, draw_batch, operating_point, scaled_design, vocab_of
from .options import CHECK_NAMES, DEFAULTS

BLOCK = 128  # FlexAttention's default block: the one the engine counts in

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class Skipped(Exception):
    """The check does not apply to this design; the message says why."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: str  # passed | failed | skipped
    message: str
    seconds: float

    def __iter__(self):  # (name, outcome, message, seconds), as certify prints it
        return iter((self.name, self.outcome, self.message, self.seconds))

    def to_json(self) -> dict:
        return {"name": self.name, "outcome": self.outcome, "message": self.message,
                "seconds": round(self.seconds, 3)}


# A golden comparer: (kind, name, data) -> None, raising AssertionError on a difference.
Golden = Callable[[str, str, Any], None]


@dataclass
class Context:
    """One design under check: what every check reads."""

    design: Any
    settings: Settings
    root: Path  # the project: goldens live under root/snapshots/
    golden: Golden

    def __post_init__(self) -> None:
        self.settings = self.settings.for_design(self.design)

    @property
    def op(self) -> Any:
        return operating_point(self.settings, self.design)


def file_golden(root: str | Path) -> Golden:
    """Compare with the golden file on disk (certify has no syrupy to update it)."""
    from .snapshot import KINDS, _file_name, golden_text

    def compare(kind: str, name: str, data: Any) -> None:
        path = Path(root) / "snapshots" / kind / f"{_file_name(name)}.{KINDS[kind]}"
        if not path.is_file():
            raise Skipped(f"no golden at {path} (write it with pytest --snapshot-update)")
        want, got = path.read_text(), golden_text(kind, name, data)
        if want != got:
            diff = "".join(list(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True), str(path), "now", n=1))[:40])
            raise AssertionError(f"{kind} of {name} differs from {path}\n{diff}")

    return compare


# --- the checks -----------------------------------------------------------------------------


def check_rules(ctx: Context) -> str:
    from tensorcad.rules import check

    found = check(ctx.design, ctx.op)
    errors = [d for d in found if d.severity == "error"]
    if errors:
        raise AssertionError(f"{len(errors)} rule error{'s' if len(errors) != 1 else ''}\n"
                             + "\n".join(f"{d.rule} {d.path}: {d.message}" for d in errors))
    counts = {s: sum(d.severity == s for d in found) for s in ("warn", "note")}
    return f"no errors ({counts['warn']} warn, {counts['note']} note)"


def _needs_documents(ctx: Context, what: str) -> None:
    if ctx.design.input("documents") is None:
        raise Skipped(f"{ctx.design.name} has no documents input: no {what} to check")


def check_isolation(ctx: Context, form: str) -> str:
    from .assertions import assert_isolated

    _needs_documents(ctx, "packed documents")
    if ctx.settings.pack is None:
        raise Skipped("packing is off (pack=None): one document a row, nothing to isolate")
    model = build_model(ctx.design, ctx.settings, form)
    ids, documents, positions = draw_batch(model_design(ctx), ctx.settings)
    (result,) = assert_isolated(model, ids, documents, positions, vocab=vocab_of(model_design(ctx)),
                                sample=ctx.settings.sample, seed=ctx.settings.seed)
    return f"{form}: {result.message()}"


def model_design(ctx: Context) -> Any:
    return scaled_design(ctx.design, ctx.settings.params)


def check_closed_form(ctx: Context) -> str:
    from .assertions import NotApplicable, assert_closed_form

    try:
        got, expected = assert_closed_form(ctx.design, ctx.op)
    except NotApplicable as error:
        raise Skipped(str(error)) from None
    return f"keys per query {got:.6g}, closed form {expected:.6g}"


def check_block_counts(ctx: Context) -> str:
    from .assertions import NotApplicable, assert_block_counts_agree, describe_blocks

    _needs_documents(ctx, "document blocks")
    if ctx.settings.pack is None:
        raise Skipped("packing is off (pack=None): one document a row, no document blocks")
    if ctx.settings.seq % BLOCK:
        raise Skipped(f"seq {ctx.settings.seq} is not a whole number of {BLOCK}-token blocks")
    try:
        results = assert_block_counts_agree(ctx.design, ctx.op, rows=ctx.settings.block_rows,
                                            params=ctx.settings.params)
    except NotApplicable as error:
        raise Skipped(str(error)) from None
    return "; ".join(describe_blocks(r) for r in results)


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


def check_golden(ctx: Context, kind: str) -> str:
    ctx.golden(kind, ctx.design.name, golden_data(kind, ctx.design, ctx.op))
    return f"{kind} matches its golden"


def check_export(ctx: Context) -> str:
    from tensorcad.runtime.export import export_form

    model = build_model(ctx.design, ctx.settings, "eager")
    ids, documents, positions = draw_batch(model_design(ctx), ctx.settings)
    # forward(ids, documents=None, positions=None) declares only the inputs the design has.
    inputs = {"ids": ids, **{role: t for role, t in (("documents", documents), ("positions", positions))
                             if ctx.design.input(role) is not None}}
    result = export_form(model.module, inputs, "eager")
    if not result.exported:
        raise AssertionError(f"torch.export failed (eager form): {result.error}")
    if not result.matches:
        raise AssertionError(f"the exported program differs from the model by {result.largest_difference:.3g}")
    return f"eager form exported: {result.ops} ops, outputs equal the model's"


CHECKS: dict[str, Callable[[Context], str]] = {
    "rules": check_rules,
    "isolation[eager]": lambda ctx: check_isolation(ctx, "eager"),
    "isolation[flex]": lambda ctx: check_isolation(ctx, "flex"),
    "closed-form": check_closed_form,
    "block-counts": check_block_counts,
    "golden[analysis]": lambda ctx: check_golden(ctx, "analysis"),
    "golden[rules]": lambda ctx: check_golden(ctx, "rules"),
    "golden[codegen]": lambda ctx: check_golden(ctx, "codegen"),
    "export": check_export,
}
assert tuple(CHECKS) == CHECK_NAMES


def run_check(name: str, ctx: Context) -> CheckResult:
    """One check, timed; a failure, a skip or an error becomes its outcome."""
    start = time.perf_counter()
    try:
        message = CHECKS[name](ctx)
        outcome = PASSED
    except Skipped as skip:
        outcome, message = SKIPPED, str(skip)
    except AssertionError as failure:
        outcome, message = FAILED, str(failure)
    except Exception as error:  # noqa: BLE001 - certify reports a crash as that check's failure
        text = str(error).strip().splitlines()
        outcome, message = FAILED, f"{type(error).__name__}: {text[0] if text else ''}"
    return CheckResult(name, outcome, message, time.perf_counter() - start)


def run_checks(
    design: Any,
    settings: Settings | None = None,
    *,
    root: str | Path = ".",
    only: Iterable[str] | None = None,
    golden: Golden | None = None,
) -> list[CheckResult]:
    """Certify one design: each check's (name, outcome, message, seconds), in order.

    ``design`` is a preset name, a path or a loaded design; ``settings`` the
    operating point and scale (defaults: seq 512, 96-token documents, spread 1,
    about a million parameters); goldens are read from ``root/snapshots/``.
    """
    from .fixtures import resolve_design

    design = resolve_design(design, Path(root))
    settings = settings if settings is not None else Settings()
    ctx = Context(design, settings, Path(root), golden or file_golden(root))
    names = list(only) if only is not None else list(CHECK_NAMES)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise TensorcadError("only", f"unknown check {unknown[0]!r} ({', '.join(CHECK_NAMES)})")
    return [run_check(name, ctx) for name in names]


__all__ = ["CHECKS", "CheckResult", "Context", "Skipped", "file_golden", "golden_data", "run_check",
           "run_checks", "DEFAULTS"]
