"""Eval parity: the packed evaluation loss equals the unpacked one, under the reduction.

An evaluation loop packs, or does not, on a switch of its own (axolotl's
"very high eval loss" came with eval packing on against off), and it runs in
eval mode, with no gradient, where a model may take other paths. Here the
packed batch's loss is computed in eval mode, as the loop computes it (its value
and what it trains, `step_loss`), and the
same documents are evaluated unpacked, the way a loop without packing runs
them: one document a row, right-padded, the padding masked (a Hugging Face
model's ``attention_mask``; a model_fn's padding a document of its own). Each
document's targets' cross-entropies are reduced as declared; the two losses
agree to rounding (`training_step.loss_tolerance`, stated).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .reductions import Reduction, name_of
from .batch import IGNORE_INDEX, StepBatch
from .loss import LossResult, compared, measured
from .loop import DocumentLosses, TrainingStep, loss_tolerance, padded_images, padded_rows, targets_at, widened
from .router import RouterAux, held_aux


def unpacked_losses(step: TrainingStep, batch: StepBatch) -> tuple[DocumentLosses, RouterAux | None]:
    """Every document of the batch in a padded batch of its own, one a row: its targets' cross-entropies, and the
    router's auxiliary loss over them (None where the model's loss adds none)."""
    pieces = batch.pieces()
    ids, real = padded_rows(step, batch)
    logits, router = step.padded_parts(ids, real, padded_images(step, batch, real))
    targets = batch.targets
    tokens, where = [], []
    for i, (row, _, first, end) in enumerate(pieces):
        mine = targets[row, first:end - 1]
        kept = mine != IGNORE_INDEX
        tokens.append(F.cross_entropy(widened(logits[i, :end - first - 1][kept]), mine[kept], reduction="none"))
        where.append((row, targets_at(first, kept)))
    return DocumentLosses(tuple(tokens), tuple(p[0] for p in pieces), tuple(pieces), tuple(where)), router


def check_eval_parity(step: TrainingStep, batch: StepBatch, reduction: Reduction = "token", *,
                      atol: float | None = None, rtol: float | None = None) -> LossResult:
    """The packed eval loss (eval mode, no gradient) against the documents evaluated unpacked."""
    name_of(reduction)
    with step.mode(train=False) as note:
        packed, trained, router = measured(step, batch)
        with torch.no_grad():
            losses, padded = unpacked_losses(step, batch)
    dtype = step.named_parameters()[0][1].dtype
    return compared(packed, trained, losses, batch, reduction, dtype, atol=atol, rtol=rtol, note=note,
                    what="the packed eval loss", against="the documents evaluated unpacked (one a padded row)",
                    router=held_aux(router, padded, lambda v: loss_tolerance(dtype, v, atol, rtol)))
