"""`tensorcad verify`: build the scaled model and prove it against PyTorch.

One entry per check, each passed, failed or skipped with the reason:

- ``forward``: the flex form runs on made-up tokens and the runtime's packing
  (its documents for a documents input, its positions for a positions input)
  and gives finite logits shaped (B, T, V);
- ``flops``: FlopCounterMode over the eager form; linear layers equal to
  ``2 × params.matmul × B × T`` exactly, attention to the dense figure the
  eager form computes, the analysis's kept and block figures beside them;
- ``export``: ``torch.export`` of the eager form (the flex form tried and reported);
- ``isolation[eager]``, ``isolation[flex]``: one document's tokens changed move
  no other output, bitwise (skipped for a design with no documents input);
- ``fused-equals-eager``: the flex form's logits within 1e-5 of the eager form's;
- ``block-counts``: create_block_mask's blocks against the engine's, row by row;
- ``kept-scores``: every score counted one by one against the engine's figures.

FlexAttention runs uncompiled unless ``compile=True``: on CPU compiling it
takes longer than every check together, and computes the same thing.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, draw

from .export import export_form, first_line
from .isolation import check_isolation

FUSED_TOLERANCE = 1e-5
CHECKS = ("forward", "flops", "export", "isolation[eager]", "isolation[flex]",
          "fused-equals-eager", "block-counts", "kept-scores")

Progress = Callable[[str, int, int], None]  # (check about to run, checks done, checks in all)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # passed | failed | skipped
    message: str = ""  # why it failed or was skipped; what it showed when it passed
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "passed": self.passed,
                "skipped": self.skipped, "message": self.message, "figures": self.figures,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class VerifyReport:
    design: str
    seq: int
    rows: int
    packing: Packing | None
    params: int  # parameters of the built model, counted by torch
    checks: tuple[Check, ...]

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
            "passed": self.passed, "checks": [c.to_json() for c in self.checks],
        }


def passed(name: str, message: str, figures: dict) -> Check:
    return Check(name, "passed", message, figures)


def failed(name: str, message: str, figures: dict | None = None) -> Check:
    return Check(name, "failed", message, figures or {})


def skipped(name: str, reason: str) -> Check:
    return Check(name, "skipped", reason)


@dataclass
class _Subject:
    """What the checks share: the scaled design, its model and one batch."""

    design: Design
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    packing: Packing | None  # the runtime's packing, when the design takes documents or positions
    seed: int

    @property
    def documents(self) -> torch.Tensor | None:
        return self.inputs.get("documents")

    def model_fn(self, form: str) -> Callable:
        model, positions_in = self.model, "positions" in self.inputs

        def run(ids, documents, positions):
            model.form = form
            extra = {"positions": positions} if positions_in else {}
            return model(ids=ids, documents=documents, **extra)

        return run


def make_inputs(design: Design, vocab: int, rows: int, seq: int, packing: Packing, seed: int
                ) -> dict[str, torch.Tensor]:
    """Token ids, and the runtime's packing for each documents or positions input the design has."""
    generator = torch.Generator().manual_seed(seed)
    inputs = {"ids": torch.randint(0, vocab, (rows, seq), generator=generator)}
    documents, positions = draw(rows, seq, seed=seed, packing=packing)
    if design.input("documents") is not None:
        inputs["documents"] = torch.from_numpy(documents)
    if design.input("positions") is not None:
        inputs["positions"] = torch.from_numpy(positions)
    return inputs


DEFAULT_SEQ = 512


def _validate(design: Design, seq: int, rows: int, params: int) -> None:
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= design.context:
        raise TensorcadError("seq", f"expected tokens a row in 1..{design.context:,} (the scaled "
                                    f"design's context), got {seq!r}")
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= 64:
        raise TensorcadError("rows", f"expected an integer in 1..64, got {rows!r}")
    tokens = [i.name for i in design.inputs if i.role == "tokens"]
    if len(tokens) != 1:
        raise TensorcadError("inputs", f"verify makes up one token-ids input; {design.name} has "
                                       f"{len(tokens)} ({', '.join(tokens) or 'none'})")


def verify(design: Design | str, *, seq: int | None = None, packing: Packing | None = None,
           params: int = 2_000_000, seed: int = 0, rows: int = 2, compile: bool = False,
           checks: tuple[str, ...] | None = None, progress: Progress | None = None) -> VerifyReport:
    """Run every check (or only ``checks``, by name) on ``design`` scaled to about ``params`` parameters.

    ``seq`` defaults to 512 tokens a row, or the scaled design's context when that is shorter.
    """
    unknown = sorted(set(checks or ()) - set(CHECKS))
    if unknown:
        raise TensorcadError("checks", f"unknown check {unknown[0]!r} (checks: {', '.join(CHECKS)})")
    from .building import build
    from .scaling import scale

    design = load(design) if not isinstance(design, Design) else design
    small = scale(design, params=params)
    seq = min(DEFAULT_SEQ, small.context) if seq is None else seq
    _validate(small, seq, rows, params)
    packing = packing if packing is not None else Packing(seq / 4, 1.0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        model = build(small, form="flex", seed=seed)
        namespace = type(model).forward.__globals__
        if "COMPILE" in namespace:
            namespace["COMPILE"].update(flex_attention=compile, create_block_mask=compile)
        vocab = model.config.vocab_size
        subject = _Subject(small, model, make_inputs(small, vocab, rows, seq, packing, seed), packing, seed)
        runs = [("forward", _forward), ("flops", _flops), ("export", _export),
                ("isolation[eager]", lambda s: _isolation(s, "eager")),
                ("isolation[flex]", lambda s: _isolation(s, "flex")),
                ("fused-equals-eager", _fused), ("block-counts", _blocks), ("kept-scores", _kept)]
        runs = [(name, run) for name, run in runs if checks is None or name in checks]
        results = []
        for done, (name, run) in enumerate(runs):
            if progress is not None:
                progress(name, done, len(runs))
            start = time.perf_counter()
            try:
                check = run(subject)
            except TensorcadError:
                raise
            except Exception as error:  # noqa: BLE001 - a check that crashes has failed
                check = failed(name, first_line(error))
            results.append(Check(check.name, check.status, check.message, check.figures,
                                time.perf_counter() - start))
        model.form = "flex"
        if progress is not None:
            progress("done", len(runs), len(runs))
    count = sum(p.numel() for p in model.parameters())
    return VerifyReport(design.name, seq, rows, packing, count, tuple(results))


# -- the checks ----------------------------------------------------------------------


def _forward(s: _Subject) -> Check:
    s.model.form = "flex"
    with torch.no_grad():
        logits = s.model(**s.inputs)
    rows, seq = s.inputs["ids"].shape
    expected = (rows, seq, s.model.config.vocab_size)
    paths = dict(type(s.model).forward.__globals__.get("RUNTIME_PATHS", {}))
    figures = {"shape": list(logits.shape), "finite": bool(torch.isfinite(logits).all()),
               "inputs": sorted(s.inputs), "paths": paths}
    if s.documents is not None:
        figures["documents"] = int(sum(len(torch.unique(r)) for r in s.documents))
    if tuple(logits.shape) != expected:
        return failed("forward", f"logits shaped {tuple(logits.shape)}, expected {expected}", figures)
    if not figures["finite"]:
        return failed("forward", "logits hold NaN or infinity", figures)
    return passed("forward", f"logits {expected}, finite", figures)


def _flops(s: _Subject) -> Check:
    from tensorcad.analysis.report import reads_documents

    from .profile import profile

    uses = any(reads_documents(a) for a, _ in s.design.attentions())
    p = profile(s.model, s.design, s.inputs, s.packing if uses else None, seed=s.seed)
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


def _export(s: _Subject) -> Check:
    eager = export_form(s.model, s.inputs, "eager")
    flex = export_form(s.model, s.inputs, "flex")
    figures = {"eager": eager.to_json(), "flex": flex.to_json(),
               "exported": [r.form for r in (eager, flex) if r.exported]}
    if not eager.exported:
        return failed("export", f"the eager form did not export: {eager.error}", figures)
    if not eager.matches:
        return failed("export", f"the exported eager program differs by {eager.largest_difference:.3g}", figures)
    flex_note = (f"flex exported too ({flex.ops} ops)" if flex.exported else f"flex did not: {flex.error}")
    return passed("export", f"eager exported ({eager.ops} ops) and runs to the same logits; {flex_note}", figures)


def _isolation(s: _Subject, form: str) -> Check:
    name = f"isolation[{form}]"
    if s.documents is None:
        return skipped(name, f"{s.design.name} has no documents input: its attention reads across "
                             "whatever is packed into a row, so there is nothing to keep apart")
    result = check_isolation(s.model_fn(form), s.inputs["ids"], s.documents, s.inputs.get("positions"),
                             vocab=s.model.config.vocab_size, seed=s.seed)
    s.model.form = "flex"
    return Check(name, "passed" if result.passed else "failed", result.message(), result.to_json())


def _fused(s: _Subject) -> Check:
    with torch.no_grad():
        s.model.form = "flex"
        flex = s.model(**s.inputs)
        s.model.form = "eager"
        eager = s.model(**s.inputs)
        s.model.form = "flex"
    largest = float((flex - eager).abs().max())
    figures = {"largestDifference": largest, "tolerance": FUSED_TOLERANCE}
    if not largest <= FUSED_TOLERANCE or math.isnan(largest):
        return failed("fused-equals-eager", f"flex and eager logits differ by {largest:.3g} "
                                            f"(tolerance {FUSED_TOLERANCE:g})", figures)
    return passed("fused-equals-eager", f"largest difference {largest:.3g}", figures)


def _compared(s: _Subject, name: str, compare):
    """``compare`` run on the model's own mask over the engine's rows, or the Check that says why not."""
    from tensorcad.analysis.report import reads_documents

    from .blockmask import model_mask

    attentions = s.design.attentions()
    if not attentions:
        return skipped(name, "the design has no attention")
    attention = attentions[0][0]
    if attention.keep is None:
        return skipped(name, "the attention keeps every score: there is no mask to count")
    mask_for = model_mask(s.model, s.inputs)
    if mask_for is None:
        return failed(name, "the design has a mask, but the model handed none to attend")
    packing = s.packing if reads_documents(attention) else None
    return compare(attention, mask_for, int(s.inputs["ids"].shape[1]), packing, seed=s.seed)


def _blocks(s: _Subject) -> Check:
    from .blockmask import compare_blocks

    a = _compared(s, "block-counts", compare_blocks)
    if isinstance(a, Check):
        return a
    figures = a.to_json()
    if a.mismatched_rows:
        r = a.mismatched_rows[0]
        return failed("block-counts", f"create_block_mask and the engine disagree on {len(a.mismatched_rows)} "
                                      f"of {a.rows} rows, first row {r}", figures)
    if not a.passed:
        return failed("block-counts", f"the engine's figure differs from create_block_mask's by "
                                      f"{a.total_difference:.3%} (tolerance {a.tolerance:.3%})", figures)
    return passed("block-counts", f"{a.rows} rows: {a.torch_full:,} full and {a.torch_partial:,} partial "
                                  f"blocks, row by row as the engine counts; its figure {a.total_difference:.3%} "
                                  f"apart (tolerance {a.tolerance:.2%}), its own rows' {a.analysis_difference:.2%}",
                  figures)


def _kept(s: _Subject) -> Check:
    from .blockmask import compare_kept

    k = _compared(s, "kept-scores", compare_kept)
    if isinstance(k, Check):
        return k
    figures = k.to_json()
    if k.mismatched_rows:
        return failed("kept-scores", f"counted one by one, {len(k.mismatched_rows)} rows differ from the "
                                     f"engine's exact count, first row {k.mismatched_rows[0]}", figures)
    if not k.passed:
        return failed("kept-scores", f"the analysis's {k.analysis:.2f} keys a query is {k.difference:.2%} "
                                     f"from the {k.counted:.2f} counted (tolerance {k.tolerance:.1%})", figures)
    return passed("kept-scores", f"{k.counted:.2f} keys a query counted over {k.rows} rows; the analysis "
                                 f"says {k.analysis:.2f} ({k.difference:.2%}, within {k.tolerance:.1%})", figures)
