"""``rl[logprobs]`` on an RL run's own batches (issue 43): the trainer's log-prob function on the rows it scored,
held to the model's forward on each sequence alone.

An RL trainer (TRL's ``GRPOTrainer`` and its kin) scores prompt-and-completion rows, the prompt left-padded
and the completion right-padded, through its own log-prob function (``_get_per_token_logps_and_entropies``)
after the model: a forward certificate never sees it, and an off-by-one, a cache carried into scoring or
positions counted through the padding move every reward's gradient without an error (prime-rl #1525, slime
#830). On an audited step the guard keeps the function's first call of the step, calls it again on the whole
row (every position, ``logits_to_keep`` = the row's length less one) and holds each position to the model's
own forward on that row's real tokens alone (`runtime.certification.rl.check_logprobs`: at most three
forward passes whatever the number of rows). The padding before and after the tokens is a sequence of its
own, which no loss reads.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import tensorcad.packing  # noqa: F401 - what the check reads rows with: imported with the guard, not at the step
from tensorcad.errors import TensorcadError
from tensorcad.runtime.certification.rl.logprobs import check_logprobs

from .check import GuardReport

CHECK = "rl[logprobs]"


def scored_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows as rl[logprobs] reads them: the left padding document 0, the tokens 1, the right padding 2."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise TensorcadError("input_ids", f"expected (rows, tokens) ids, got {getattr(input_ids, 'shape', None)}")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        raise TensorcadError("attention_mask", f"expected the ids' shape {tuple(input_ids.shape)}, got "
                                               f"{getattr(attention_mask, 'shape', None)}")
    real = attention_mask.bool()
    begun = real.long().cumsum(1) > 0
    going = real.flip(1).long().cumsum(1).flip(1) > 0
    inside = begun & going
    if bool((inside & ~real).any()):
        raise TensorcadError("attention_mask", "a row's tokens hold padding between them: a row is one sequence, "
                                               "padded before and after")
    documents = torch.where(~begun, 0, torch.where(going, 1, 2))
    return {"input_ids": input_ids, "attention_mask": attention_mask, "documents": documents,
            "loss_mask": real.long()}


def whole_rows(score: Callable[..., Any]) -> Callable[[Any, dict], torch.Tensor]:
    """``score(model, input_ids, attention_mask, logits_to_keep)`` (TRL's signature; its first output the
    log-probs of the last ``logits_to_keep`` tokens) as rl[logprobs]'s ``logprob_fn``: every position of the row,
    position t holding the log-prob of token t + 1, the last position none."""
    def logprob_fn(model: Any, batch: dict) -> torch.Tensor:
        ids = batch["input_ids"]
        out = score(model, ids, batch["attention_mask"], ids.shape[1] - 1)
        logps = out[0] if isinstance(out, tuple) else out
        return torch.cat([logps, torch.zeros(logps.shape[0], 1, dtype=logps.dtype, device=logps.device)], 1)

    return logprob_fn


def check_scoring(score: Callable[..., Any], model: Any, input_ids: torch.Tensor,
                  attention_mask: torch.Tensor) -> GuardReport:
    """The trainer's log-prob function on these rows held to the model on each row alone, as a guard's report."""
    with torch.no_grad():
        result = check_logprobs(whole_rows(score), model, scored_rows(input_ids, attention_mask))
    failures = [] if result.passed else [f"{CHECK} failed on the model: {result.message()}"]
    return GuardReport([], [], {CHECK: result}, failures)


__all__ = ("CHECK", "check_scoring", "scored_rows", "whole_rows")
