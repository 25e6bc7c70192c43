"""`TensorcadRLCallback`: the guard in an RL trainer (TRL's `GRPOTrainer` and the trainers built on it).

On an audited step the trainer's log-prob function (``_get_per_token_logps_and_entropies``) is watched: its
first call of the step (the rows the loss scores, the model it scored them with) is kept, and at the step's
end the function is held to the model on each row alone (``tensorcad.guard.check_scoring``, rl[logprobs]). A
failure raises `tensorcad.guard.GuardError` with the one-line cause, warns, or stops the run after the step
(``on_failure="stop"``). Add it once the trainer exists: ``trainer.add_callback(TensorcadRLCallback(trainer))``.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

from transformers import TrainerCallback

from tensorcad.errors import TensorcadError
from tensorcad.guard import Guard, GuardError, check_scoring

SCORER = "_get_per_token_logps_and_entropies"  # TRL's log-prob function, on every RL trainer it ships


class TensorcadRLCallback(TrainerCallback):
    """Certify the run's own scoring: the first ``first`` steps, then every ``every`` (None: never again)."""

    def __init__(self, trainer: Any, *, first: int = 1, every: int | None = None, on_failure: str = "raise",
                 verbose: bool = True):
        if not callable(getattr(trainer, SCORER, None)):
            raise TensorcadError("trainer", f"{type(trainer).__name__} has no {SCORER}: the RL guard watches TRL's "
                                            "log-prob function")
        self.guard = Guard(first=first, every=every, certify_on=None, on_failure=on_failure)
        self.trainer, self.verbose = trainer, verbose
        self._kept: dict[str, Any] | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.guard.audited(state.global_step):
            return
        score = getattr(self.trainer, SCORER)
        kept: dict[str, Any] = {"score": score}

        def watched(model, input_ids, attention_mask, logits_to_keep, *rest, **more):
            if "rows" not in kept:  # the step's first call: the rows its loss scores
                kept.update(model=model, rows=(input_ids.detach(), attention_mask.detach()))
            return score(model, input_ids, attention_mask, logits_to_keep, *rest, **more)

        setattr(self.trainer, SCORER, watched)
        self._kept = kept

    def on_step_end(self, args, state, control, **kwargs):
        if self._kept is None:
            return
        kept, self._kept = self._kept, None
        setattr(self.trainer, SCORER, kept["score"])
        if "rows" not in kept:
            return
        started = time.perf_counter()
        was = kept["model"].training
        kept["model"].eval()  # no dropout: the rows scored twice must be the same computation
        try:
            report = check_scoring(kept["score"], kept["model"], *kept["rows"])
        finally:
            kept["model"].train(was)
            self.guard.seconds += time.perf_counter() - started
        step = state.global_step - 1
        self.guard.reports.append((step, report))
        if report.passed:
            return
        where = f"tensorcad guard, step {step}"
        if self.guard.on_failure == "raise":
            raise GuardError(report, where)
        if self.guard.on_failure == "warn":
            warnings.warn(report.line(where), stacklevel=2)
        else:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self._kept is not None:
            setattr(self.trainer, SCORER, self._kept["score"])
            self._kept = None
        if self.verbose and self.guard.reports:
            print(self.guard.summary())
