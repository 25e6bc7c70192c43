"""`TensorcadLightningCallback`: the guard in a `lightning` run (the ``lightning`` extra).

On an audited step, ``on_train_batch_start`` opens a recording of the model
(``pl_module.<model_attribute>`` when the module holds one, else the module
itself) and keeps the batch Lightning hands the step; ``on_train_batch_end``
closes it and checks that batch (`tensorcad.guard.Guard`): the path the
attention calls took, the audit, and the training step's certificates on the
model itself (a plain module) or a replica (a transformers model). A failure
raises `tensorcad.guard.GuardError`, warns, or sets ``trainer.should_stop``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.callbacks import Callback

from tensorcad.guard import Guard


class TensorcadLightningCallback(Callback):
    """Certify the run's own batches: the first ``first`` steps, then every ``every`` (None: never again)."""

    def __init__(self, *, first: int = 1, every: int | None = None, certificates=None, certify_on: Any = "replica",
                 on_failure: str = "raise", model_attribute: str = "model", verbose: bool = True):
        kwargs = {} if certificates is None else {"certificates": certificates}
        self.guard = Guard(first=first, every=every, certify_on=certify_on, on_failure=on_failure, **kwargs)
        self.model_attribute, self.verbose = model_attribute, verbose
        self._open: contextlib.ExitStack | None = None
        self._step = None

    def _model(self, pl_module):
        return getattr(pl_module, self.model_attribute, None) or pl_module

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if not self.guard.audited(trainer.global_step):
            return
        self._open = contextlib.ExitStack()
        self._step = self._open.enter_context(self.guard.recording_step(self._model(pl_module)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._open is None:
            return
        opened, step = self._open, self._step
        self._open = self._step = None
        opened.close()
        given = dict(batch) if isinstance(batch, Mapping) else step.batch  # the user's batch dict, as the loop has it
        self.guard.check(self._model(pl_module), trainer.global_step - 1, given, step.calls)
        if self.guard.stop_requested:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        if self._open is not None:
            self._open.close()
            self._open = None
        if self.verbose and self.guard.reports:
            print(self.guard.summary())
