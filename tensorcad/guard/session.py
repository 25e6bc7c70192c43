"""`Guard`: what a training callback runs, framework aside.

On the first ``first`` steps, and every ``every`` steps after (sampled), the
guard records the real step: a forward pre-hook on the model keeps the keywords
of its first call (the batch exactly as the model receives it, after every
collator and wrapper) and the attention calls are recorded as they run. No
forward is added. After the step, the batch is audited, the recorded path read,
and the training step's certificates run on ``certify_on`` (by default a
replica of a transformers model, built once: the same architecture and code path,
small) with that batch. A failure raises `GuardError` (``on_failure="raise"``),
warns (``"warn"``) or asks the loop to stop (``"stop"``: ``stop_requested``).
"""

from __future__ import annotations

import contextlib
import inspect
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorcad.errors import TensorcadError, shown

from .check import CERTIFICATES, GuardError, GuardReport, check_batch, is_hf
from .recording import AttentionCall, Calls, recording

ON_FAILURE = ("raise", "warn", "stop")


@dataclass
class _Step:
    """What one recorded step captured."""

    batch: dict[str, Any] | None = None
    calls: list[AttentionCall] = field(default_factory=list)
    first_forward: int | None = None  # how many calls the first forward made (a loop may call the model again)
    first_experts: int | None = None  # and how many routing layers' calls


def _named(module: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A forward's arguments by name (``model(ids, mask)`` is a call too)."""
    if not args:
        return dict(kwargs)
    try:
        return dict(inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return {"input_ids": args[0], **kwargs}


class _ModelFn:
    """A plain module as the certificates call a model, ``model_fn(ids, documents, positions)``, called the way
    the guard's forward calls it (``model(ids, documents=...)``). Its ``form`` is the module's, so the
    certificates run a generated model's eager form on CPU, where FlexAttention has no backward."""

    def __init__(self, model: Any):
        self.model = model

    @property
    def form(self) -> Any:
        return getattr(self.model, "form", None)

    @form.setter
    def form(self, value: Any) -> None:
        self.model.form = value

    def __call__(self, ids, documents, positions):
        return self.model(ids, documents=documents)


def _certificates(certificates: Any) -> tuple[str, ...]:
    """The step certificates named, checked where they are given (a string or None failed at the first step)."""
    from tensorcad.runtime.certification import STEP_CHECKS

    if isinstance(certificates, (str, bytes)) or not isinstance(certificates, Iterable):
        raise TensorcadError("certificates", f"expected a list of names ({', '.join(STEP_CHECKS)}), got "
                                             f"{shown(certificates, 60)}")
    names = tuple(certificates)
    unknown = [n for n in names if not isinstance(n, str) or n not in STEP_CHECKS]
    if unknown:
        raise TensorcadError("certificates", f"unknown certificate {shown(unknown[0], 60)} ({', '.join(STEP_CHECKS)})")
    return names


class Guard:
    """The guard of one training run."""

    def __init__(self, *, first: int = 1, every: int | None = None, certificates: Iterable[str] = CERTIFICATES,
                 certify_on: Any = "replica", on_failure: str = "raise", lengths: Any = None,
                 eos_id: int | None = None):
        if not isinstance(first, int) or first < 0:
            raise TensorcadError("first", f"the steps audited first are a count >= 0, not {shown(first)}")
        if every is not None and (not isinstance(every, int) or every < 1):
            raise TensorcadError("every", f"a sampling interval is a step count >= 1, not {shown(every)}")
        if on_failure not in ON_FAILURE:
            raise TensorcadError("on_failure", f"{shown(on_failure)} is not one of {', '.join(ON_FAILURE)}")
        self.first, self.every, self.on_failure = first, every, on_failure
        self.certificates = _certificates(certificates)
        if not (certify_on is None or certify_on == "replica" or (callable(certify_on)
                                                                   and not isinstance(certify_on, str))):
            raise TensorcadError("certify_on", f"expected 'replica', None or a model, got {shown(certify_on, 60)}")
        self.certify_on = certify_on
        # data[boundaries] on each audited batch: the packer's lengths (a function of the batch the model got)
        self.lengths, self.eos_id = lengths, eos_id
        self.reports: list[tuple[int, GuardReport]] = []
        self.seconds = 0.0
        self.stop_requested = False
        self._certified_model: Any = None

    def audited(self, step: int) -> bool:
        """Whether step ``step`` (0-based, as the loop counts) is checked."""
        return step < self.first or (self.every is not None and step % self.every == 0)

    def _target(self, model: Any) -> Any:
        if not (isinstance(self.certify_on, str) and self.certify_on == "replica"):
            return self.certify_on  # a model, or None (no certificates)
        if self._certified_model is None:
            if not is_hf(model):
                self._certified_model = _ModelFn(model)  # a plain module certifies as it is
            else:
                from tensorcad.runtime.building import replica

                self._certified_model = replica(model)
        return self._certified_model

    @contextlib.contextmanager
    def recording_step(self, model: Any) -> Iterator[_Step]:
        """Capture the first forward's batch and every attention call of the block."""
        step = _Step()

        def keep(module, args, kwargs):
            if step.batch is None:
                step.batch = _named(module, args, kwargs)

        with recording(model) as calls:
            def ended(module, args, output):
                if step.first_forward is None:
                    step.first_forward, step.first_experts = len(calls), len(calls.experts)

            handles = [model.register_forward_pre_hook(keep, with_kwargs=True), model.register_forward_hook(ended)]
            try:
                yield step
            finally:
                for handle in handles:
                    handle.remove()
                step.calls = Calls(calls[:step.first_forward], calls.experts[:step.first_experts])

    def check(self, model: Any, step_number: int, batch: Mapping[str, Any] | None,
              calls: list[AttentionCall] | None = None) -> GuardReport | None:
        """Check one recorded step; act on a failure as configured. None: nothing was captured."""
        if batch is None:
            return None
        started = time.perf_counter()
        target = self._target(model)
        on = "the replica" if target is not None and isinstance(self.certify_on, str) and is_hf(model) else "the model"
        try:
            report = check_batch(model, batch, calls=calls, certify_on=target, certificates=self.certificates, on=on,
                                 lengths=self.lengths, eos_id=self.eos_id)
        except TensorcadError as error:  # a malformed batch: the run's own choice (warn, stop) is honoured
            self.seconds += time.perf_counter() - started
            if self.on_failure == "raise":
                raise
            if self.on_failure == "warn":
                warnings.warn(f"tensorcad guard, step {step_number}: {error}", stacklevel=2)
            else:
                self.stop_requested = True
            return None
        self.seconds += time.perf_counter() - started
        self.reports.append((step_number, report))
        if not report.passed:
            where = f"tensorcad guard, step {step_number}"
            if self.on_failure == "raise":
                raise GuardError(report, where)
            if self.on_failure == "warn":
                warnings.warn(report.line(where), stacklevel=2)
            else:
                self.stop_requested = True
        return report

    def summary(self) -> str:
        """The line printed at the end of training."""
        failed = [(s, r) for s, r in self.reports if not r.passed]
        head = f"tensorcad guard: {len(self.reports)} batch{'es' if len(self.reports) != 1 else ''} checked"
        if failed:
            step, report = failed[0]
            return f"{head}, {len(failed)} failed (first at step {step}: {report.cause})"
        return f"{head}, packing held on each ({self.seconds:.2f} s spent)"
