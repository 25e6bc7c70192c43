"""`TensorcadCallback`: the guard in transformers' `Trainer` (and so TRL's `SFTTrainer`).

On an audited step, ``on_step_begin`` opens a recording of the model (its first
forward's keywords: the batch as the model receives it; every attention call);
``on_step_end`` closes it and checks that batch (`tensorcad.guard.Guard`). A
failure raises `tensorcad.guard.GuardError` with the one-line cause, or warns,
or sets ``control.should_training_stop`` (``on_failure="stop"``). The summary
line is printed at ``on_train_end``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from transformers import TrainerCallback

from tensorcad.guard import Guard


class TensorcadCallback(TrainerCallback):
    """Certify the run's own batches: the first ``first`` steps, then every ``every`` (None: never again)."""

    def __init__(self, *, first: int = 1, every: int | None = None, certificates=None, certify_on: Any = "replica",
                 on_failure: str = "raise", verbose: bool = True):
        kwargs = {} if certificates is None else {"certificates": certificates}
        self.guard = Guard(first=first, every=every, certify_on=certify_on, on_failure=on_failure, **kwargs)
        self.verbose = verbose
        self._open: contextlib.ExitStack | None = None
        self._step = None

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if model is None or not self.guard.audited(state.global_step):
            return
        self._open = contextlib.ExitStack()
        self._step = self._open.enter_context(self.guard.recording_step(model))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self._open is None:
            return
        opened, step = self._open, self._step
        self._open = self._step = None
        opened.close()
        self.guard.check(model, state.global_step - 1, step.batch, step.calls)
        if self.guard.stop_requested:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self._open is not None:
            self._open.close()
            self._open = None
        if self.verbose and self.guard.reports:
            print(self.guard.summary())
