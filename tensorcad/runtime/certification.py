"""The one registry of checks a design is certified by.

`tensorcad certify`, the pytest plugin's collected items (`pytest --tensorcad`),
its assertion functions and `tensorcad verify` all run these functions on a
`Subject`; each returns one `Check` (passed, failed or skipped with the reason,
and its figures). `REGISTRY` is the one place that says what each check holds
the design to. `CERTIFY` is the order certify and the collection run them in;
`VERIFY` adds the checks verify alone runs (forward, flops, fused-equals-eager,
kept-scores) and leaves out the goldens, which belong to a project's files.

A check that raises ``AssertionError`` has failed; one that raises
``Skipped`` (or ``NotApplicable``) does not apply, and is reported as a skip,
never as a pass; one that crashes has failed, with the error's first line.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tensorcad.errors import TensorcadError

from .subject import Subject

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
FUSED_TOLERANCE = 1e-5

Progress = Callable[[str, int, int], None]  # (check about to run, checks done, checks in all)


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
    run: Callable[[Subject], Check]
    category: str | None = None  # the pytest marker that selects it (-m isolation)


def passed(name: str, message: str, figures: dict | None = None) -> Check:
    return Check(name, PASSED, message, figures or {})


def failed(name: str, message: str, figures: dict | None = None) -> Check:
    return Check(name, FAILED, message, figures or {})


def skipped(name: str, reason: str) -> Check:
    return Check(name, SKIPPED, reason)


# -- the checks --------------------------------------------------------------------------


def _rules(s: Subject) -> Check:
    from tensorcad.rules import check

    found = check(s.design, s.op)
    errors = [d for d in found if d.severity == "error"]
    figures = {"diagnostics": [d.to_json() for d in found]}
    if errors:
        return failed("rules", f"{len(errors)} rule error{'s' if len(errors) != 1 else ''}\n"
                      + "\n".join(f"{d.rule} {d.path}: {d.message}" for d in errors), figures)
    if not found:
        return passed("rules", "no findings", figures)
    counts = {sev: sum(d.severity == sev for d in found) for sev in ("warn", "note")}
    named = "; ".join(f"{d.severity} {d.rule} {d.path}: {d.message}" for d in found)
    return passed("rules", f"no errors ({counts['warn']} warn, {counts['note']} note): {named}", figures)


def _needs_packed_documents(s: Subject) -> None:
    if s.design.input("documents") is None:
        raise Skipped(f"{s.design.name} has no documents input: no packed documents to check")
    if s.settings.pack is None:
        raise Skipped("packing is off (pack=None): one document a row, nothing to isolate")


def _isolation(s: Subject, form: str) -> Check:
    from .isolation import check_isolation

    name = f"isolation[{form}]"
    _needs_packed_documents(s)
    model = s.model(form)
    ids, documents, positions = s.batch
    try:
        result = check_isolation(model, ids, documents, positions, vocab=s.vocab,
                                 sample=s.settings.sample, seed=s.settings.seed)
    finally:
        model.form = "flex"
    if not result.passed:
        return failed(name, f"documents are not isolated\n{result.message()}", result.to_json())
    return passed(name, result.message(), result.to_json())


def _closed_form(s: Subject) -> Check:
    from .closed_form_check import assert_closed_form

    got, expected = assert_closed_form(s.design, s.op)  # AssertionError / NotApplicable propagate
    return passed("closed-form", f"keys per query {got:.6g}, closed form {expected:.6g}",
                  {"engine": got, "closedForm": expected})


def _compared_masks(s: Subject) -> list[tuple[Any, Any]]:
    """(attention, ModelMask) for every distinct mask of the model, each with the attention it belongs to.

    Every attention of the design that keeps less than every score must be run
    with a mask the module's table ascribes to it; every mask the model runs must
    belong to an attention of the design. No pairing by order, no fallback.
    """
    from .blockmask import model_masks

    attentions = [a for a, _ in s.small.attentions()]
    if not attentions:
        raise Skipped("the design has no attention")
    if all(a.keep is None for a in attentions):
        raise Skipped("every attention keeps every score: there is no mask to count")
    try:
        masks = model_masks(s.model("flex").module, s.mask_inputs)
    except TensorcadError as error:
        if error.path != "model":
            raise
        raise AssertionError(error.message) from None  # the model breaks its own contract: it fails
    by_path = {a.path: a for a in attentions}
    pairs, covered = [], set()
    for mask in masks:
        owners = [by_path[p] for p in mask.attentions if p in by_path]
        if not owners:
            raise AssertionError(f"the model runs mask {mask.name!r}, which belongs to no attention "
                                 f"of {s.design.name} (its table says {list(mask.attentions)})")
        pairs.append((owners[0], mask))
        covered.update(a.path for a in owners)
    missing = [a.path for a in attentions if a.keep is not None and a.path not in covered]
    if missing:
        raise AssertionError(f"the design masks {missing[0]}, but the model ran no mask for it")
    return pairs


def block_agreements(s: Subject) -> list[tuple[Any, Any, Any]]:
    """(attention, ModelMask, BlockAgreement) for every distinct mask of the model, on the engine's rows."""
    from tensorcad.design.masks import BLOCK, reads_documents

    from .blockmask import compare_blocks

    if s.settings.seq % BLOCK:
        raise Skipped(f"seq {s.settings.seq} is not a whole number of {BLOCK}-token blocks")
    out = []
    for attention, mask in _compared_masks(s):
        packing = s.packing if reads_documents(attention) else None
        out.append((attention, mask, compare_blocks(attention, mask.make, s.settings.seq, packing,
                                                    seed=s.settings.seed, rows=s.settings.block_rows)))
    return out


def _block_counts(s: Subject) -> Check:
    figures, lines, failures = {}, [], []
    for attention, mask, a in block_agreements(s):
        figures[mask.name] = {"attention": attention.path, **a.to_json()}
        line = (f"{mask.name} ({attention.path}): {a.rows} rows, {a.torch_full:,} full and "
                f"{a.torch_partial:,} partial blocks")
        if a.mismatched_rows:
            failures.append(f"{line} by create_block_mask, the engine {a.engine_full:,} and "
                            f"{a.engine_partial:,}: {len(a.mismatched_rows)} of {a.rows} rows differ, "
                            f"first row {a.mismatched_rows[0]}")
        elif not a.passed:
            failures.append(f"{line}; the engine's figure is {a.total_difference:.3%} apart "
                            f"(tolerance {a.tolerance:.3%})")
        else:
            lines.append(f"{line}, row by row as the engine counts; its figure {a.total_difference:.3%} "
                         f"apart (tolerance {a.tolerance:.2%})")
    if failures:
        return failed("block-counts", "create_block_mask and the engine disagree on " + "; ".join(failures),
                      figures)
    return passed("block-counts", "; ".join(lines), figures)


def _golden(s: Subject, kind: str) -> Check:
    from .goldens import NoGolden, golden_data

    name = f"golden[{kind}]"
    if s.golden is None:
        raise Skipped("no goldens to compare with (pytest --tensorcad compares snapshots/)")
    try:
        s.golden(kind, s.design.name, golden_data(kind, s.design, s.op if kind != "codegen" else None))
    except NoGolden as none:
        raise Skipped(str(none)) from None
    return passed(name, f"{kind} matches its golden")


def _export(s: Subject) -> Check:
    from .export import export_form

    model = s.model("flex").module
    try:
        eager = export_form(model, s.inputs, "eager")
        flex = export_form(model, s.inputs, "flex")
    finally:
        model.form = "flex"
    figures = {"eager": eager.to_json(), "flex": flex.to_json(),
               "exported": [r.form for r in (eager, flex) if r.exported]}
    if not eager.exported:
        return failed("export", f"the eager form did not export: {eager.error}", figures)
    if not eager.matches:
        return failed("export", f"the exported eager program differs by {eager.largest_difference:.3g}", figures)
    if flex.exported and not flex.matches:
        return failed("export", f"the exported flex program differs by {flex.largest_difference:.3g}", figures)
    flex_note = (f"flex exported too ({flex.ops} ops)" if flex.exported else f"flex did not: {flex.error}")
    return passed("export", f"eager exported ({eager.ops} ops) and runs to the same logits; {flex_note}", figures)


# -- verify's own checks ---------------------------------------------------------------------


def _forward(s: Subject) -> Check:
    import torch

    model = s.model("flex").module
    with torch.no_grad():
        logits = model(**s.inputs)
    rows, seq = s.inputs["ids"].shape
    expected = (rows, seq, model.config.vocab_size)
    paths = dict(getattr(type(model), "runtime_paths", None) or {})
    figures = {"shape": list(logits.shape), "finite": bool(torch.isfinite(logits).all()),
               "inputs": sorted(s.inputs), "paths": paths}
    documents = s.inputs.get("documents")
    if documents is not None:
        figures["documents"] = int(sum(len(torch.unique(r)) for r in documents))
    if tuple(logits.shape) != expected:
        return failed("forward", f"logits shaped {tuple(logits.shape)}, expected {expected}", figures)
    if not figures["finite"]:
        return failed("forward", "logits hold NaN or infinity", figures)
    return passed("forward", f"logits {expected}, finite", figures)


def _flops(s: Subject) -> Check:
    from tensorcad.design.masks import reads_documents

    from .profile import profile

    uses = any(reads_documents(a) for a, _ in s.small.attentions())
    p = profile(s.model("flex").module, s.small, s.inputs, s.packing if uses else None, seed=s.settings.seed)
    figures = p.to_json()
    if not p.matmul_agrees:
        return failed("flops", f"linear layers counted {p.matmul:,} FLOPs; the analysis says "
                               f"2 × params.matmul × B × T = {p.expected_matmul:,}", figures)
    if not p.attention_agrees:
        return failed("flops", f"attention counted {p.attention:,} FLOPs; the eager form computes "
                               f"{p.dense_attention:,} (every score, then masked)", figures)
    if p.other:
        return failed("flops", f"{p.other:,} FLOPs in ops that are neither linear nor attention: {p.by_op}", figures)
    return passed("flops", f"linear {p.matmul:,} = 2·matmul params·B·T; attention {p.attention:,} dense "
                           f"(analysis: {p.kept_attention:,.0f} kept, {p.block_attention:,.0f} in blocks)", figures)


def _fused(s: Subject) -> Check:
    import torch

    model = s.model("flex").module
    with torch.no_grad():
        model.form = "flex"
        flex = model(**s.inputs)
        model.form = "eager"
        eager = model(**s.inputs)
        model.form = "flex"
    largest = float((flex - eager).abs().max())
    figures = {"largestDifference": largest, "tolerance": FUSED_TOLERANCE}
    if not largest <= FUSED_TOLERANCE or math.isnan(largest):
        return failed("fused-equals-eager", f"flex and eager logits differ by {largest:.3g} "
                                            f"(tolerance {FUSED_TOLERANCE:g})", figures)
    return passed("fused-equals-eager", f"largest difference {largest:.3g}", figures)


def _kept(s: Subject) -> Check:
    from tensorcad.design.masks import reads_documents

    from .blockmask import compare_kept

    figures, lines, failures = {}, [], []
    for attention, mask in _compared_masks(s):
        packing = s.packing if reads_documents(attention) else None
        k = compare_kept(attention, mask.make, s.settings.seq, packing, seed=s.settings.seed,
                         rows=s.settings.block_rows)
        figures[mask.name] = {"attention": attention.path, **k.to_json()}
        if k.mismatched_rows:
            failures.append(f"{mask.name}: counted one by one, {len(k.mismatched_rows)} rows differ from "
                            f"the engine's exact count, first row {k.mismatched_rows[0]}")
        elif not k.passed:
            failures.append(f"{mask.name}: the analysis's {k.analysis:.2f} keys a query is {k.difference:.2%} "
                            f"from the {k.counted:.2f} counted (tolerance {k.tolerance:.1%})")
        else:
            lines.append(f"{mask.name}: {k.counted:.2f} keys a query counted over {k.rows} rows; the "
                         f"analysis says {k.analysis:.2f} ({k.difference:.2%}, within {k.tolerance:.1%})")
    if failures:
        return failed("kept-scores", "; ".join(failures), figures)
    return passed("kept-scores", "; ".join(lines), figures)


REGISTRY: dict[str, Spec] = {spec.name: spec for spec in (
    Spec("forward", "the flex form runs on the batch to finite logits shaped (B, T, V)", _forward),
    Spec("flops", "FlopCounterMode over the eager form: linear layers exactly 2 × params.matmul × B × T, "
                  "attention exactly the dense scores the eager form computes", _flops),
    Spec("rules", "no rule finds an error at the operating point (warnings and notes are named)", _rules),
    Spec("isolation[eager]", "changing one packed document's tokens moves no other document's "
                             "outputs, bitwise, in the eager form", lambda s: _isolation(s, "eager"),
         "isolation"),
    Spec("isolation[flex]", "the same in the flex form (FlexAttention)", lambda s: _isolation(s, "flex"),
         "isolation"),
    Spec("fused-equals-eager", f"the flex form's logits within {FUSED_TOLERANCE:g} of the eager form's", _fused),
    Spec("closed-form", "the engine's keys per query equals the closed form (exact, or 1% for gamma "
                        "lengths), and an unpacked mask's every score counted at a small length", _closed_form,
         "closed_form"),
    Spec("block-counts", "for every distinct mask the model runs, create_block_mask's full and partial "
                         "blocks equal the engine's, row by row, over the engine's rows", _block_counts,
         "block_counts"),
    Spec("kept-scores", "for every distinct mask, every score counted one by one equals the engine's "
                        "exact count, and the analysis's sampled figure within its stated error", _kept),
    Spec("golden[analysis]", "the analysis equals its golden under snapshots/",
         lambda s: _golden(s, "analysis"), "golden"),
    Spec("golden[rules]", "the rules' findings equal their golden", lambda s: _golden(s, "rules"), "golden"),
    Spec("golden[codegen]", "the generated source equals its golden", lambda s: _golden(s, "codegen"), "golden"),
    Spec("export", "torch.export of both forms runs to the model's own logits (the eager form must export)",
         _export),
)}

CERTIFY = ("rules", "isolation[eager]", "isolation[flex]", "closed-form", "block-counts",
           "golden[analysis]", "golden[rules]", "golden[codegen]", "export")
VERIFY = ("forward", "flops", "export", "rules", "isolation[eager]", "isolation[flex]",
          "fused-equals-eager", "closed-form", "block-counts", "kept-scores")
GOLDENS = tuple(n for n in CERTIFY if n.startswith("golden["))


def run_check(subject: Subject, name: str) -> Check:
    """One check, timed; a failure, a skip or a crash becomes its outcome."""
    from .closed_form_check import NotApplicable

    spec = REGISTRY[name]
    start = time.perf_counter()
    try:
        check = spec.run(subject)
    except Skipped as skip:
        check = skipped(name, str(skip))
    except NotApplicable as none:
        check = skipped(name, str(none))
    except AssertionError as failure:
        check = failed(name, str(failure))
    except TensorcadError:
        raise  # bad input (a seq the model cannot hold): one line, not a table of failures
    except Exception as error:  # noqa: BLE001 - a check that crashes has failed
        from .export import first_line

        check = failed(name, first_line(error))
    return Check(check.name, check.status, check.message, check.figures, time.perf_counter() - start)


def check_names(names: Iterable[str] | None, default: tuple[str, ...], path: str = "checks") -> tuple[str, ...]:
    """``names`` in registry terms (``default`` when None); an unknown one is a TensorcadError."""
    if names is None:
        return default
    names = tuple(names)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise TensorcadError(path, f"unknown check {unknown[0]!r} (checks: {', '.join(REGISTRY)})")
    return names


def run_checks(subject: Subject, names: Iterable[str], progress: Progress | None = None) -> tuple[Check, ...]:
    """The named checks on ``subject``, in order, each reported to ``progress`` before it runs."""
    import warnings

    names = tuple(names)
    results = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        for done, name in enumerate(names):
            if progress is not None:
                progress(name, done, len(names))
            results.append(run_check(subject, name))
        if progress is not None:
            progress("done", len(names), len(names))
    return tuple(results)


def certify(design: Any, settings: Any = None, *, only: Iterable[str] | None = None, golden: Any = None,
            progress: Progress | None = None) -> tuple[Check, ...]:
    """Certify one design: the CERTIFY checks (or ``only``), at ``settings`` (the one set of defaults)."""
    from .settings import Settings

    names = check_names(only, CERTIFY, "only")
    subject = Subject(design, settings if settings is not None else Settings(), golden=golden)
    return run_checks(subject, names, progress)
