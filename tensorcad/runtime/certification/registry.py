"""The one registry of checks a design is certified by.

`tensorcad certify`, the pytest plugin's collected items (`pytest --tensorcad`),
its assertion functions and `tensorcad verify` all run these functions on a
`Subject` (the model's mask checks are in `mask_checks`, verify's own in
`verify_checks`); each returns one `Check` (`outcome`) (passed, failed or skipped with the reason,
and its figures). `REGISTRY` is the one place that says what each check holds
the design to. `CERTIFY` is the order certify and the collection run them in;
`VERIFY` adds the checks verify alone runs (forward, flops, fused-equals-eager,
kept-scores) and leaves out the goldens, which belong to a project's files.

A check that raises ``AssertionError`` has failed; one that raises
``Skipped`` (or ``NotApplicable``) does not apply, and is reported as a skip,
never as a pass; one that crashes has failed, with the error's first line.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building.subject import Subject

from .certificates import (  # noqa: F401
    MODEL_CHECKS,
    STEP_CHECKS,
    boundaries_check,
    faithful_check,
    gradients_check,
    tokens_check,
)
from .forward.calls import ModelRaised
from .design.masks import block_agreements, block_counts_check, compared_masks, kept_scores_check  # noqa: F401
from .outcome import FAILED, PASSED, SKIPPED, Check, CheckResult, Skipped, Spec, failed, passed, skipped  # noqa: F401
from .design.checks import FUSED_TOLERANCE, flops_check, forward_check, fused_check
from .data.checks import DATA_CHECKS, coverage_check, data_boundaries_check  # noqa: F401 (numpy only at import)
from .rl.checks import RL_CHECKS, aggregation_check, alignment_check, logprobs_check, metrics_check  # noqa: F401

Progress = Callable[[str, int, int], None]  # (check about to run, checks done, checks in all)


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


def _cp_plan(s: Subject) -> Check:
    from .parallel.certificate import cp_plan_check  # torch at import: the CLI lists the registry without it

    return cp_plan_check(s)


def _needs_packed_documents(s: Subject) -> None:
    if s.design.input("documents") is None:
        raise Skipped(f"{s.design.name} has no documents input: no packed documents to check")
    if s.settings.pack is None:
        raise Skipped("packing is off (pack=None): one document a row, nothing to isolate")


def _isolation(s: Subject, form: str) -> Check:
    from .methods import certificate

    name = f"isolation[{form}]"
    _needs_packed_documents(s)
    model = s.model(form)
    ids, documents, positions = s.batch
    try:
        result = certificate("isolation", s.settings.method)(model, ids, documents, positions, vocab=s.vocab,
                                 sample=s.settings.sample, seed=s.settings.seed)
    finally:
        model.form = "flex"
    if not result.passed:
        from .design.crossing import cause_lines

        message = "\n".join(["documents are not isolated", result.message(), *cause_lines(s)])
        return failed(name, message, result.to_json())
    return passed(name, result.message(), result.to_json())


def _closed_form(s: Subject) -> Check:
    from .design.closed_form import assert_closed_form

    got, expected = assert_closed_form(s.design, s.op)  # AssertionError / NotApplicable propagate
    return passed("closed-form", f"keys per query {got:.6g}, closed form {expected:.6g}",
                  {"engine": got, "closedForm": expected})


def _golden(s: Subject, kind: str) -> Check:
    from .design.goldens import NoGolden, golden_data, golden_name

    name = f"golden[{kind}]"
    if s.golden is None:
        raise Skipped("no goldens to compare with (pytest --tensorcad compares snapshots/)")
    try:
        op = s.op if kind != "codegen" else None  # generated code depends on the design alone
        s.golden(kind, golden_name(s.design, op), golden_data(kind, s.design, op))
    except NoGolden as none:
        raise Skipped(str(none)) from None
    return passed(name, f"{kind} matches its golden")


def _export(s: Subject) -> Check:
    from tensorcad.runtime.building.export import export_form

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


def _step(name: str) -> Callable[[Any], Check]:
    def run(s: Any) -> Check:
        from .step.certificates import step_check  # torch, on first use

        return step_check(name, s)

    return run


REGISTRY: dict[str, Spec] = {spec.name: spec for spec in (
    Spec("forward", "the flex form runs on the batch to finite logits shaped (B, T, V)", forward_check),
    Spec("flops", "FlopCounterMode over the eager form: linear layers exactly 2 × params.matmul × B × T, "
                  "attention exactly the dense scores the eager form computes", flops_check),
    Spec("rules", "no rule finds an error at the operating point (warnings and notes are named)", _rules),
    Spec("isolation[eager]", "changing one packed document's tokens moves no other document's "
                             "outputs, bitwise, in the eager form", lambda s: _isolation(s, "eager"),
         "isolation"),
    Spec("isolation[flex]", "the same in the flex form (FlexAttention)", lambda s: _isolation(s, "flex"),
         "isolation"),
    Spec("fused-equals-eager", f"the flex form's logits within {FUSED_TOLERANCE:g} of the eager form's", fused_check),
    Spec("closed-form", "the engine's keys per query equals the closed form (exact, or 1% for gamma "
                        "lengths), and an unpacked mask's every score counted at a small length", _closed_form,
         "closed_form"),
    Spec("block-counts", "for every distinct mask the model runs, create_block_mask's full and partial "
                         "blocks equal the engine's, row by row, over the engine's rows", block_counts_check,
         "block_counts"),
    Spec("kept-scores", "for every distinct mask, every score counted one by one equals the engine's "
                        "exact count, and the analysis's sampled figure within its stated error", kept_scores_check),
    Spec("golden[analysis]", "the analysis equals its golden under snapshots/",
         lambda s: _golden(s, "analysis"), "golden"),
    Spec("golden[rules]", "the rules' findings equal their golden", lambda s: _golden(s, "rules"), "golden"),
    Spec("golden[codegen]", "the generated source equals its golden", lambda s: _golden(s, "codegen"), "golden"),
    Spec("export", "torch.export of both forms runs to the model's own logits (the eager form must export)",
         _export, "export"),
    # The certificates of any packed model (a user's own, collected from tensorcad_models, or a design's).
    Spec("isolation", "changing one packed document's tokens moves no other document's outputs, bitwise",
         tokens_check, "isolation"),
    Spec("isolation[boundaries]", "a document made one token shorter or longer moves nothing of the next "
                                  "document, at its own positions, beyond rounding", boundaries_check, "isolation"),
    Spec("faithful", "each packed document's outputs equal the same document run alone, beyond rounding",
         faithful_check),
    Spec("isolation[gradients]", "in train mode the loss on one document has exactly zero gradient on every "
                                 "other document's input embeddings", gradients_check, "isolation"),
    # The training step (a design's generated model under its own training loss; a user's model under its
    # own loss, on labels as its collator writes them): step_certificates.
    Spec("step[labels]", "every supervised target is predicted from a position of its own document, in the "
                         "labels' shift convention (no label crosses a boundary)", _step("step[labels]"), "step"),
    Spec("step[loss]", "the packed step's loss equals its documents run alone, a mean over every target "
                       "(token), beyond rounding", _step("step[loss]"), "step"),
    Spec("step[gradients]", "every parameter's gradient from the packed step equals that of its documents run "
                            "alone under the token mean, beyond rounding", _step("step[gradients]"), "step"),
    Spec("step[accumulation]", "the batch as 2 micro-batches, each loss over the batch's targets "
                               "(num_items_in_batch), accumulates the gradient of its documents alone",
         _step("step[accumulation]"), "step"),
    Spec("eval[parity]", "the packed loss in eval mode equals the documents evaluated unpacked (one a padded "
                         "row) under the token mean, beyond rounding", _step("eval[parity]"), "step"),
    Spec("cp-plan", "each sharding the analysis counts, over two ranks, puts every token on one rank and "
                    "each rank's attention over its shard with the gathered keys equal to the unsharded",
         _cp_plan),
    # The data path, on a DataSubject (a corpus and the user's loader), never on a design: `certify-data`.
    Spec("data[coverage]", "every (document, token span) of an epoch comes out of the loader once, or as the "
                           "declared policy says, across its workers, shuffling and a save and resume",
         coverage_check),
    Spec("data[boundaries]", "the boundaries the loader's first batches give the model (position_ids, "
                             "cu_seq_lens_q, seq_idx, documents, EOS) equal the packer's own document lengths",
         data_boundaries_check),
    # An RL loop, on an RLSubject (its functions and one batch): each held to the unpacked global batch.
    Spec("rl[logprobs]", "the loop's per-token log-prob function on the packed batch equals the model's own "
                         "forward on each sequence alone, no score across a boundary", logprobs_check),
    Spec("rl[aggregation]", "the loop's loss over packing, micro-batches and ranks weighs each token as the "
                            "declared mode weighs it on the one global batch", aggregation_check),
    Spec("rl[alignment]", "every per-sample and per-token tensor comes back through pack, reorder and unpack "
                          "on its own sequence", alignment_check),
    Spec("rl[metrics]", "each logged metric is its declared reduction over the sequences, no boundary token "
                        "counted", metrics_check),
)}

CERTIFY = ("rules", "isolation[eager]", "isolation[flex]", "closed-form", "block-counts",
           "golden[analysis]", "golden[rules]", "golden[codegen]", *STEP_CHECKS)
# Run when asked for by name (`certify --export`, `pytest -m export`), not by default: torch.export of
# both forms took 2.9 of certify nano-sort's 8.3 s, and it holds the model to deploying, not to packing.
OPT_IN = ("export",)
VERIFY = ("forward", "flops", "export", "rules", "isolation[eager]", "isolation[flex]",
          "fused-equals-eager", "closed-form", "block-counts", "kept-scores", "cp-plan")
GOLDENS = tuple(n for n in CERTIFY if n.startswith("golden["))


def run_check(subject: Subject, name: str) -> Check:
    """One check, timed; a failure, a skip or a crash becomes its outcome."""
    from .design.closed_form import NotApplicable

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
    except ModelRaised as raised:  # the model (or torch's compiler) raised: this check's verdict, one line
        check = failed(name, str(raised))
    except TensorcadError:
        raise  # bad input (a seq the model cannot hold): one line, not a table of failures
    except Exception as error:  # noqa: BLE001 - a check that crashes has failed
        from tensorcad.runtime.building.export import first_line

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
    from tensorcad.runtime.building.settings import Settings

    names = check_names(only, CERTIFY, "only")
    subject = Subject(design, settings if settings is not None else Settings(), golden=golden)
    return run_checks(subject, names, progress)
