"""The training step certified: its five certificates on a model and a batch dict, and as registry checks.

`certify_step(model, batch, ...)` runs ``step[labels]``, ``step[loss]``,
``step[gradients]``, ``step[accumulation]`` and ``eval[parity]`` (or
``only`` some) on a Hugging Face model (its own loss) or a
``model_fn(ids, documents, positions)`` (the loss given, else next-token
cross-entropy) and one batch as the loop hands it to the model; the harness's
``assert_step_*`` functions and a training callback call it. The registry
checks run the same on a subject: a design's generated model under its own
training loss (`next_token`), or a user's model on the batch its collator
packs (labels as the collator writes them, else as ``DataCollatorWithFlattening``
does: -100 at each document's first token), under ``token``, two micro-batches
accumulated with ``num_items_in_batch``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from tensorcad.errors import TensorcadError

from .accumulation import Accumulation, accumulation_name, check_accumulation
from ..certificates import STEP_CHECKS, _packed, _verdict
from .eval_parity import check_eval_parity
from ..outcome import Check, Skipped
from .reductions import Reduction, name_of
from .batch import IGNORE_INDEX, StepBatch, read_batch, split_batch
from .gradients import check_step_gradients
from .labels import check_labels
from .mtp import mtp_heads
from .loss import check_loss
from .limits import (MAX_ATOL, MAX_RTOL, MAX_STEP_DOCUMENTS, check_alone, check_documents, check_ids,
                     check_tolerance, hf_vocabulary, probed_vocabulary)
from .loop import TrainingStep, step_of, vision_samples

HEADLINES = {"step[labels]": "labels cross documents", "step[loss]": "the loss is not the documents' own",
             "step[gradients]": "the gradients are not the documents' own",
             "step[accumulation]": "accumulation does not give the whole batch's gradient",
             "eval[parity]": "the packed eval loss is not the unpacked one"}


@dataclass(frozen=True)
class StepReport:
    """Each certificate's result, by check name; those not run, with why."""

    results: dict[str, Any]
    not_run: dict[str, str] = field(default_factory=dict)
    call: str = ""  # which call of the model the certificates ran (tensorcad.hf.call_line), "" for a model_fn
    causes: dict[str, str] = field(default_factory=dict)  # a failed certificate's cause, where one is known

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results.values())

    @property
    def failures(self) -> dict[str, Any]:
        return {name: r for name, r in self.results.items() if not r.passed}

    def message(self) -> str:
        lines = [self.line(name) for name in self.failures] if not self.passed else [
            f"{name}: {r.message()}" for name, r in self.results.items()]
        lines += [f"{name}: not run ({why})" for name, why in self.not_run.items()]
        if self.call:
            lines.append(f"call: {self.call}")
        return "\n".join(lines)

    def line(self, name: str) -> str:
        """One certificate's message, and its cause on a line of its own where one is known."""
        cause = self.causes.get(name)
        return f"{name}: {self.results[name].message()}" + (f"\n{cause}" if cause else "")

    def to_json(self) -> dict:
        return {"passed": self.passed, "results": {n: r.to_json() for n, r in self.results.items()},
                "notRun": dict(self.not_run), "call": self.call, "causes": dict(self.causes)}


def _micro_batches(step: TrainingStep, batch: Any, parts: int, shift: str | None,
                   vocab: int | None = None) -> list[StepBatch]:
    """The user's own micro-batches (a list of batch dicts), or ``batch`` split into ``parts``."""
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return [read_batch(b, shift=shift, loss_shifts=step.own_loss, vocab=vocab) for b in batch]
    read = read_batch(batch, shift=shift, loss_shifts=step.own_loss, vocab=vocab)
    samples = vision_samples(step, read)
    if not samples:
        return split_batch(read, parts)

    def images(first: int, end: int) -> dict[str, Any]:
        """The images of a vision-language row's samples in first:end, in order, as each micro-batch carries."""
        mine = [s for (_, at), s in sorted(samples.items()) if first <= at < end and "pixel_values" in s]
        if not mine:
            return {}
        return {key: torch.cat([s[key] for s in mine]) for key in ("pixel_values", "image_grid_thw")}

    return split_batch(read, parts, images)


def _checked_read(step: TrainingStep, batch: Any, shift: str | None, probe: bool) -> tuple[StepBatch, int | None]:
    """One batch dict read and held to the limits (`limits`): its size, its ids and labels in the vocabulary."""
    if step.hf:
        ids_bound, vocab = hf_vocabulary(step.model)
        read = read_batch(batch, shift=shift, loss_shifts=step.own_loss, vocab=vocab)
        check_ids(read.ids, ids_bound)
    else:
        # Read once with the shift declared (labels past the vocabulary would fail the shift's detection first),
        # run once for the outputs' width, then read as the checks will.
        read = read_batch(batch, shift=shift or "shifted", loss_shifts=step.own_loss)
        check_documents(len(read.pieces()))
        vocab = probed_vocabulary(step, read) if probe else None
        read = read_batch(batch, shift=shift, loss_shifts=step.own_loss, vocab=vocab)
    check_documents(len(read.pieces()))
    return read, vocab


def certify_step(model: Any, batch: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                 loss: Callable[..., Any] | None = None, reduction: Reduction = "token", shift: str | None = None,
                 accumulation: Accumulation | None = None, micro_batches: int = 2,
                 alone: Callable[..., Any] | None = None, atol: float | None = None, rtol: float | None = None,
                 only: Iterable[str] | None = None, call: str = "trainer") -> StepReport:
    """The five certificates of one training step (``only``: some of them), on ``model`` and ``batch``.

    ``batch`` is one batch dict; for ``step[accumulation]`` it is split into
    ``micro_batches`` (or is the loop's own micro-batches, a list of dicts, which
    the other certificates do not take). ``accumulation`` None: the loop does not
    accumulate, and ``step[accumulation]`` is not run (the report says so).
    ``call``: how the loop calls a Hugging Face model (`tensorcad.hf.calls`:
    ``"trainer"``, use_cache=False as transformers' Trainer passes it;
    ``"plain"``, ``model(**batch)`` with the config's own use_cache); the
    report names it.
    """
    wanted = tuple(STEP_CHECKS if only is None else only)
    unknown = [n for n in wanted if n not in STEP_CHECKS]
    if unknown:
        raise TensorcadError("only", f"unknown step certificate {unknown[0]!r} ({', '.join(STEP_CHECKS)})")
    name_of(reduction)
    check_tolerance("atol", atol, MAX_ATOL)
    check_tolerance("rtol", rtol, MAX_RTOL)
    step = step_of(model, loss, alone, call)
    check_alone(alone, step.hf)
    given_micro = isinstance(batch, Sequence) and not isinstance(batch, (str, bytes))
    if given_micro and set(wanted) - {"step[accumulation]"}:
        raise TensorcadError("batch", "a list of micro-batches is for step[accumulation] alone: pass one batch dict")
    probe = bool(set(wanted) - {"step[labels]"})  # only the labels certificate runs no model
    vocab = None
    if given_micro:
        if len(batch) > MAX_STEP_DOCUMENTS:
            check_documents(len(batch))
        checked = [_checked_read(step, b, shift, probe) for b in batch]
        check_documents(sum(len(b.pieces()) for b, _ in checked))
        vocab = next((v for _, v in checked), None)
        read = None
    else:
        read, vocab = _checked_read(step, batch, shift, probe)
    results: dict[str, Any] = {}
    not_run: dict[str, str] = {}
    for name in wanted:
        if name == "step[labels]":
            results[name] = check_labels(read, mtp_heads(model, read))
        elif name == "step[loss]":
            results[name] = check_loss(step, read, reduction, atol=atol, rtol=rtol)
        elif name == "step[gradients]":
            results[name] = check_step_gradients(step, read, reduction, rtol=rtol)
        elif name == "step[accumulation]":
            if accumulation is None:
                not_run[name] = "accumulation=None: the loop takes one batch a step"
                continue
            accumulation_name(accumulation)
            batches = _micro_batches(step, batch, micro_batches, shift, vocab)
            results[name] = check_accumulation(step, batches, reduction, accumulation, rtol=rtol)
        else:
            results[name] = check_eval_parity(step, read, reduction, atol=atol, rtol=rtol)
    return StepReport(results, not_run, _call_line(step), _causes(step, read, results))


def _causes(step: TrainingStep, read: StepBatch | None, results: dict[str, Any]) -> dict[str, str]:
    """The setting of a Hugging Face model's call that explains its failed forward (the cache, an all-ones mask,
    layers that carry state: `tensorcad.hf.diagnosis`), for each certificate that ran the forward and failed."""
    failed = [name for name, r in results.items() if not r.passed and name != "step[labels]"]
    if not failed or not step.hf or read is None:
        return {}
    from tensorcad.hf.diagnosis import cause_of_call

    hint = cause_of_call(step.model, step._hf_inputs(read, labels=False))
    return dict.fromkeys(failed, hint) if hint else {}


def _call_line(step: TrainingStep) -> str:
    from tensorcad.hf import call_line

    return call_line(step.model, step.call) if step.hf else ""


# -- as registry checks, on a subject ---------------------------------------------------------


def collator_labels(ids: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """Labels as ``DataCollatorWithFlattening`` writes them: the ids, -100 at each document's first token."""
    labels = ids.clone()
    first = torch.ones_like(documents, dtype=torch.bool)
    first[:, 1:] = documents[:, 1:] != documents[:, :-1]
    labels[first] = IGNORE_INDEX
    return labels


def subject_step(s: Any) -> tuple[TrainingStep, dict[str, Any], str | None]:
    """(the step, its batch dict, its declared shift) of a design's generated model or a user's model."""
    from .next_token import SHIFT, next_token_labels, next_token_loss

    ids, documents, positions = _packed(s)
    batch = {"input_ids": ids, "documents": documents, "position_ids": positions}
    if getattr(s, "design", None) is not None:
        batch["labels"] = next_token_labels(ids, documents)
        return TrainingStep(s.model("flex"), next_token_loss), batch, SHIFT
    from tensorcad.hf import is_hf_model

    model_fn = s.model()
    inner = getattr(model_fn, "model", None)
    labels = getattr(s, "labels", None)
    batch["labels"] = labels if labels is not None else collator_labels(ids, documents)
    if is_hf_model(inner):
        return TrainingStep(inner, call=getattr(s, "call", "trainer")), batch, None  # its own loss, its loop's call
    return TrainingStep(model_fn, alone=getattr(s, "alone", None)), batch, None


def step_check(name: str, s: Any) -> Check:
    """The registry's check ``name`` (one of STEP_CHECKS) on a subject.

    A model the step cannot be compared on (it drops out in train mode, it has
    nothing to train) skips, saying why; so does a batch too small to accumulate.
    """
    step, batch, shift = subject_step(s)
    try:
        report = certify_step(step.model, batch, loss=step.loss, alone=step.alone, shift=shift,
                              accumulation="num_items_in_batch", only=[name], call=step.call)
    except TensorcadError as error:
        if error.path == "micro_batches":
            raise Skipped(f"the batch cannot be accumulated: {error.message}") from None
        if error.path == "model":
            raise Skipped(error.message) from None
        raise
    check = _verdict(name, report.results[name], HEADLINES[name])
    cause = report.causes.get(name)
    return replace(check, message=f"{check.message}\n{cause}") if cause else check
