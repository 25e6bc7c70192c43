"""`check_batch` and `packing_path`: the guard on one batch, for a plain loop, a callback or a test.

``packing_path(model, batch)`` runs one recorded forward (no gradient) and
names the path each attention layer took. ``check_batch(model, batch)`` adds
the batch audit, the verdicts, and (``certify_on``: a replica of the model, or
a model small enough) the training step's certificates on the user's real
batch. A callback that already recorded the real step passes its ``calls``,
and no forward runs here at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from tensorcad.errors import TensorcadError, one_line

from .audit import Finding, audit_batch, documents_of
from .experts import ExpertsCall, experts_summary, with_padding
from .kernel import kernel_findings
from .path import LayerPath, paths_of, summarize
from .recording import AttentionCall, recording
from .verdicts import verdicts

# The step certificates a guard runs by default: a label crossing a boundary, a loss not the documents'
# own. Gradients and accumulation cost a backward each per document; ask for them by name.
CERTIFICATES = ("step[labels]", "step[loss]")
# Keywords a loop adds to the forward that are no part of the batch the certificates read.
MAX_GUARD_LINE = 300  # characters of GuardError's line and of the warning; the rest is in .report
NOT_BATCH = ("use_cache", "past_key_values", "cache", "fused_lm_head", "num_items_in_batch", "return_dict",
             "output_attentions", "output_hidden_states")


class GuardError(RuntimeError):
    """A guarded batch failed; ``report`` holds the path, the findings and the certificates."""

    def __init__(self, report: GuardReport, where: str = ""):
        self.report = report
        super().__init__(report.line(where))


@dataclass(frozen=True)
class PathReport:
    """Each attention call's path in one forward, and their one-line summary."""

    paths: list[LayerPath]

    @property
    def documents_apart(self) -> bool:
        return all(p.documents_apart for p in self.paths)

    def lines(self) -> list[str]:
        return summarize(self.paths)

    def to_json(self) -> dict:
        return {"documentsApart": self.documents_apart, "layers": [p.to_json() for p in self.paths]}


@dataclass(frozen=True)
class GuardReport:
    """What the guard found on one batch: the path, the audit, the certificates, and the failing lines."""

    paths: list[LayerPath]
    findings: list[Finding]
    certificates: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    experts: list[ExpertsCall] = field(default_factory=list)  # each mixture-of-experts layer's routing

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def cause(self) -> str | None:
        """The first failing line: the one a stopped run prints."""
        return self.failures[0] if self.failures else None

    def line(self, where: str = "") -> str:
        """The one line a stopped run prints: the first failure, how many more ``.report`` holds, cut to
        ``MAX_GUARD_LINE`` (a GuardError was 2 to 5 lines, 500 to 1,500 characters, where one was promised)."""
        head = (f"{where}: " if where else "") + (self.failures[0].splitlines()[0] if self.failures else self.message())
        more = f" (and {len(self.failures) - 1} more in .report)" if len(self.failures) > 1 else ""
        room = MAX_GUARD_LINE - len(more)
        return one_line(head if len(head) <= room else head[:room - 3] + "...") + more

    def message(self) -> str:
        if self.failures:
            return "\n".join(self.failures)
        checked = ", ".join(self.certificates) or "no certificates"
        experts = f"; experts: {experts_summary(self.experts)}" if self.experts else ""
        return (f"packing holds: {'; '.join(summarize(self.paths)) or 'no attention call recorded'}{experts} "
                f"({checked} passed)")

    def to_json(self) -> dict:
        return {"passed": self.passed, "failures": list(self.failures), "findings": [f.to_json() for f in self.findings],
                "layers": [p.to_json() for p in self.paths],
                "certificates": {n: r.passed for n, r in self.certificates.items()},
                "experts": [c.to_json() for c in self.experts]}


def is_hf(model: Any) -> bool:
    from tensorcad.hf import is_hf_model

    return is_hf_model(model)


def forward(model: Any, batch: Mapping[str, Any]) -> Any:
    """``model`` on ``batch`` as a loop calls it: ``model(**batch)`` for transformers, else (ids, documents=)."""
    if is_hf(model):
        return model(**{k: v for k, v in batch.items() if k != "documents"})
    return model(batch["input_ids"], documents=documents_of(batch))


def record_forward(model: Any, batch: Mapping[str, Any]) -> list[AttentionCall]:
    """The attention calls of one forward of ``model`` on ``batch``, without a gradient."""
    with torch.no_grad(), recording(model) as calls:
        forward(model, batch)
    return calls


def packing_path(model: Any, batch: Mapping[str, Any]) -> PathReport:
    """The path each attention layer of ``model`` takes on ``batch`` (one recorded forward, no gradient)."""
    return PathReport(paths_of(record_forward(model, batch), documents_of(batch)))


def data_findings(batch: Mapping[str, Any], lengths: Any, eos_id: int | None = None) -> list[Finding]:
    """``data[boundaries]`` on the batch the model received: each boundary unlike the packer's, a finding."""
    from tensorcad.runtime.certification import check_data_boundaries

    lengths = lengths(batch) if callable(lengths) else lengths
    result = check_data_boundaries(batch, lengths, eos_id=eos_id)
    if not result.forms:
        return [Finding("data[boundaries]", result.message)]
    return [Finding(f"data[boundaries] {f.form}", f.message.split(": ", 1)[1]) for f in result.findings]


def checked_ids(batch: Any) -> None:
    """The batch a guard can read: a mapping whose ``input_ids`` are a 2-D integer tensor with a token in each of
    at least one row (an empty row raised IndexError from the audit; no ids, transformers' ValueError)."""
    if not isinstance(batch, Mapping):
        raise TensorcadError("batch", f"expected a dict of tensors, got {type(batch).__name__}")
    ids = batch.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        raise TensorcadError("batch.input_ids", "the guard reads a batch by its input_ids: expected a tensor, got "
                                                f"{type(ids).__name__}")
    if ids.dim() != 2 or ids.shape[0] == 0 or ids.shape[1] == 0 or ids.is_floating_point() or ids.is_complex():
        raise TensorcadError("batch.input_ids", f"expected integer ids of shape (rows, tokens), at least one of "
                                                f"each; got {ids.dtype} of shape {tuple(ids.shape)}")


def check_batch(model: Any, batch: Mapping[str, Any], *, calls: list[AttentionCall] | None = None,
                certify_on: Any = None, certificates: Iterable[str] = CERTIFICATES,
                on: str = "the replica", lengths: Any = None, eos_id: int | None = None) -> GuardReport:
    """The guard's verdict on ``batch`` as ``model`` receives it.

    ``calls``: the attention calls already recorded on the real step (else one
    recorded forward runs here); ``certify_on``: the model the step certificates
    run on with this batch (a replica of ``model``, or ``model`` itself; None: none run).
    ``lengths``: the packer's document lengths of this batch (a list a row, or a
    function of the batch), to hold the boundaries the model received to them
    (``data[boundaries]``; with ``eos_id``, the EOS-derived ones too).
    """
    from tensorcad.runtime.certification import certify_step

    checked_ids(batch)
    findings = audit_batch(model, batch)
    if lengths is not None:
        lengths = lengths(batch) if callable(lengths) else lengths
        findings += data_findings(batch, lengths, eos_id)
    if calls is None:
        calls = record_forward(model, batch)
    if lengths is not None:  # and what each attention call received, held to the same lengths
        findings += kernel_findings(calls, lengths)
    paths = paths_of(calls, documents_of(batch))
    experts = _padding_routed(list(getattr(calls, "experts", ())), batch)
    results: dict[str, Any] = {}
    if certify_on is not None and tuple(certificates):
        step_batch = {k: v for k, v in batch.items() if k not in NOT_BATCH}
        results = dict(certify_step(certify_on, step_batch, only=tuple(certificates)).results)
    capacity = next((c for c in experts if not c.dropless and c.dropped), None)
    router = None if capacity is None else (
        f"{capacity.layer} routes with a capacity ({capacity.capacity:g}) and dropped {capacity.dropped} "
        "routing(s) on this batch: packed documents take each other's slots")
    return GuardReport(paths, findings, results, verdicts(paths, findings, results, on, router), experts)


def _padding_routed(experts: list[ExpertsCall], batch: Mapping[str, Any]) -> list[ExpertsCall]:
    mask = batch.get("attention_mask")
    if not experts or not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return experts
    return with_padding(experts, int((mask == 0).sum()), int(mask.numel()))
