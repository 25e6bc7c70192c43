"""The loss-aggregation modes of RL post-training, as the frameworks name them, and what each weighs a token.

A batch of S sequences (a sequence with loss tokens: n_s of them), N loss
tokens in all; ``loss_mat`` is each token's loss term (policy, KL, entropy).
Every mode is linear in ``loss_mat``, so a mode *is* the weight it gives each
token:

| mode (verl's ``loss_agg_mode``) | the loss | a token of sequence s weighs |
|---|---|---|
| ``token-mean`` | the mean over every loss token of the batch | 1/N |
| ``seq-mean-token-mean`` | the mean over sequences of each one's token mean | 1/(S n_s) |
| ``seq-mean-token-sum`` | the mean over sequences of each one's token sum | 1/S |
| ``seq-mean-token-sum-norm`` | the sum over every token / (S C), C a constant | 1/(S C) |
| ``token-sum`` | the sum over every loss token of the batch | 1 |

``seq-mean-token-sum-norm`` is Dr. GRPO's: C is a constant of the run (TRL's
``max_completion_length``; verl's ``loss_scale_factor``), never a width the
batch happens to have. GSPO's sequence-level ratio (one importance ratio a
sequence, the exponential of its tokens' mean log-ratio) aggregates as
``seq-mean-token-mean``: its ``sequence-level`` row below is that mode, held
to one sequence at a time (a pack row is not a sequence).

The mapping table says which mode each framework's setting means, read from
their source: TRL 1.16's ``GRPOTrainer._compute_loss`` (``loss_type``), verl's
``core_algos.agg_loss`` (``loss_agg_mode``), OpenRLHF's ``token_level_loss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from tensorcad.errors import TensorcadError

# token-sum last: the explanations try the sequence means (MODES[1:3]) on pack rows
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
ALIASES = {"sequence-level": "seq-mean-token-mean"}  # GSPO's ratio, aggregated a sequence at a time
# Each mode computed as the frameworks compute it, inside each micro-batch and then averaged over the
# micro-batches and ranks: does it stay the global batch's? (packing, micro-batches, ranks; docs/rl.md)
INVARIANCE = {
    "token-mean": ("yes", "only with equal token counts a micro-batch", "only with equal token counts a rank"),
    "seq-mean-token-mean": ("only over sequences, never pack rows", "with equal sequence counts a micro-batch",
                            "with equal sequence counts a rank"),
    "seq-mean-token-sum": ("only over sequences, never pack rows", "with equal sequence counts a micro-batch",
                           "with equal sequence counts a rank"),
    "seq-mean-token-sum-norm": ("yes, with C a constant", "with equal sequence counts and C a constant",
                                "with equal sequence counts and C a constant"),
    "token-sum": ("yes", "yes", "yes, each rank's sum scaled by the ranks (verl's dp_size)"),
}


@dataclass(frozen=True)
class Setting:
    """One framework setting and the mode it aggregates by."""

    framework: str
    setting: str  # as the framework spells it
    mode: str  # one of MODES
    scope: str  # where its normaliser is counted: "global" (the accumulated batch) or "micro-batch"
    note: str = ""


# TRL 1.16, GRPOTrainer._compute_loss: the per-token loss masked, then
SETTINGS = (
    Setting("trl", "loss_type='grpo'", "seq-mean-token-mean", "micro-batch",
            "each sequence's token mean, mean over the micro-batch's sequences, / gradient_accumulation_steps"),
    Setting("trl", "loss_type='sapo'", "seq-mean-token-mean", "micro-batch", "as grpo"),
    Setting("trl", "loss_type='bnpo'", "token-mean", "micro-batch",
            "the micro-batch's own token count (TRL: 'results may slightly vary depending on the local batch "
            "size')"),
    Setting("trl", "loss_type='dr_grpo'", "seq-mean-token-sum-norm", "micro-batch",
            "sum / (micro-batch sequences x max_completion_length), / gradient_accumulation_steps"),
    Setting("trl", "loss_type='dapo'", "token-mean", "global", "sum / num_items_in_batch over the accumulated batch"),
    Setting("trl", "loss_type='cispo'", "token-mean", "global", "as dapo"),
    Setting("trl", "loss_type='vespo'", "token-mean", "global", "as dapo"),
    Setting("trl", "loss_type='luspo'", "seq-mean-token-sum", "micro-batch",
            "each sequence's token sum, mean over the micro-batch's sequences, / gradient_accumulation_steps"),
    Setting("trl", "importance_sampling_level='sequence'", "seq-mean-token-mean", "micro-batch",
            "GSPO: loss_type='grpo' with the sequence-level ratio"),
    Setting("verl", "loss_agg_mode='token-mean'", "token-mean", "micro-batch",
            "agg_loss: masked mean of the micro-batch, scaled by the accumulation"),
    Setting("verl", "loss_agg_mode='seq-mean-token-mean'", "seq-mean-token-mean", "micro-batch", ""),
    Setting("verl", "loss_agg_mode='seq-mean-token-sum'", "seq-mean-token-sum", "micro-batch", ""),
    Setting("verl", "loss_agg_mode='token-sum'", "token-sum", "global",
            "masked sum x dp_size: the ranks' average is the global batch's sum"),
    Setting("verl", "loss_agg_mode='seq-mean-token-sum-norm'", "seq-mean-token-sum-norm", "micro-batch",
            "sum / loss_mask.shape[-1]: the padded width unless loss_scale_factor is set (verl #5625)"),
    Setting("openrlhf", "token_level_loss=True", "token-mean", "micro-batch", ""),
    Setting("openrlhf", "token_level_loss=False", "seq-mean-token-mean", "micro-batch", ""),
)
FRAMEWORKS = tuple(sorted({s.framework for s in SETTINGS}))


def mode_of(mode: str) -> str:
    """The mode's canonical name (``sequence-level`` is ``seq-mean-token-mean``), checked."""
    if not isinstance(mode, str) or (mode not in MODES and mode not in ALIASES):
        raise TensorcadError("mode", f"unknown mode {mode!r} (modes: {', '.join(MODES + tuple(ALIASES))})")
    return ALIASES.get(mode, mode)


def setting(framework: str, value: str) -> Setting:
    """The mode a framework's setting means: ``setting("trl", "dr_grpo")``, ``setting("verl", "token-mean")``."""
    mine = [s for s in SETTINGS if s.framework == framework]
    if not mine:
        raise TensorcadError("framework", f"unknown framework {framework!r} (frameworks: {', '.join(FRAMEWORKS)})")
    for s in mine:
        if s.setting.split("=", 1)[1].strip("'") == str(value) or s.setting == value:
            return s
    raise TensorcadError("setting", f"{framework} has no setting {value!r} (settings: "
                                    f"{', '.join(s.setting for s in mine)})")


def weights(mode: str, counts: Sequence[int], constant: int | None = None) -> tuple[Fraction, ...]:
    """What a token of each sequence weighs under ``mode``, exactly (0 for a sequence without loss tokens)."""
    mode = mode_of(mode)
    live = [n for n in counts if n]
    if not live:
        raise TensorcadError("mask", "no sequence holds a loss token")
    S, N = len(live), sum(live)
    if mode == "token-mean":
        return tuple(Fraction(1, N) if n else Fraction(0) for n in counts)
    if mode == "seq-mean-token-mean":
        return tuple(Fraction(1, S * n) if n else Fraction(0) for n in counts)
    if mode == "seq-mean-token-sum":
        return tuple(Fraction(1, S) if n else Fraction(0) for n in counts)
    if mode == "token-sum":
        return tuple(Fraction(1) if n else Fraction(0) for n in counts)
    if constant is None or isinstance(constant, bool) or not isinstance(constant, int) or constant < 1:
        raise TensorcadError("constant", f"seq-mean-token-sum-norm needs its constant (Dr. GRPO's C: TRL's "
                                         f"max_completion_length, verl's loss_scale_factor), got {constant!r}")
    return tuple(Fraction(1, S * constant) if n else Fraction(0) for n in counts)


def describe(mode: str, constant: int | None = None) -> str:
    """``seq-mean-token-sum-norm`` (C = 64), or the mode's name in backquotes."""
    mode = mode_of(mode)
    return f"`{mode}` (C = {constant})" if mode == "seq-mean-token-sum-norm" and constant else f"`{mode}`"
