"""Multi-token prediction heads' labels: head k's target at t is the token k + 1 ahead, in t's document only.

A DeepSeek-V3-style MTP head k (1 <= k <= depth) at position t is trained on the
token at t + k + 1: the main target (the next token) k positions on. Under packing
that roll must stop at the document's end, so the last k + 1 positions of every
document train head k on nothing. Rolled over the whole row it trains a document's
last positions on the next document's first tokens: the loss still falls, and no
forward certificate sees it (Megatron-LM #1661, #4495/#6205; #5011 rolls the
padding mask twice).

The targets each head is trained on are the model's own (``model.mtp_targets(targets,
documents)``: (depth, B, T) in the convention of `StepBatch.targets`, the output at
t trained on ``targets[t]``); each is held to the batch's main targets rolled k
positions within each document, computed here. A head that differs is named with
the boundary its roll crossed.
"""

from __future__ import annotations

from typing import Any

import torch

from tensorcad.errors import TensorcadError

from .batch import IGNORE_INDEX, StepBatch


def rolled_targets(batch: StepBatch, k: int) -> torch.Tensor:
    """The batch's main targets k positions on, IGNORE_INDEX where that leaves t's document or the row."""
    targets, documents = batch.targets, batch.documents
    want = torch.full_like(targets, IGNORE_INDEX)
    seq = targets.shape[1]
    for t in range(seq - k):  # a loop, written apart from any model's vectorised roll
        same = documents[:, t + k] == documents[:, t]
        want[:, t] = torch.where(same, targets[:, t + k], want[:, t])
    return want


def _boundary(documents: torch.Tensor, row: int, t: int) -> int:
    """The first position after t in another document (the boundary t's document ends at)."""
    later = torch.nonzero(documents[row, t:] != documents[row, t]).flatten()
    return t + int(later[0]) if len(later) else documents.shape[1]


def head_failures(batch: StepBatch, k: int, got: torch.Tensor) -> list[str]:
    """What head k is trained on that its document does not hold k + 1 ahead, each named with the boundary."""
    want = rolled_targets(batch, k)
    got = got.to(want.device)
    wrong = got != want
    if not bool(wrong.any()):
        return []
    documents = batch.documents
    found = []
    for row, t in torch.nonzero(wrong).tolist():
        d = int(documents[row, t])
        end = _boundary(documents, row, t)
        if int(want[row, t]) == IGNORE_INDEX and t + k < documents.shape[1]:
            into = int(documents[row, t + k])
            found.append(f"head {k}: row {row}: the output at position {t} of document {d} (its last at {end - 1}) "
                         f"is trained on {int(got[row, t])}, a target of document {into}: the roll crosses the boundary at position {end}; the last {k + 1} positions of "
                         f"every document must train head {k} on nothing ({IGNORE_INDEX})")
        else:
            found.append(f"head {k}: row {row}: the output at position {t} (document {d}) is trained on "
                         f"{int(got[row, t])}, where the token {k + 1} ahead in its document is {int(want[row, t])}")
    return found


def mtp_heads(model: Any, batch: StepBatch) -> torch.Tensor | None:
    """(depth, B, T): the targets the model's MTP heads are trained on, from its own roll; None: it has none."""
    targets_of = getattr(model, "mtp_targets", None)
    if not callable(targets_of):
        return None
    heads = torch.as_tensor(targets_of(batch.targets, batch.documents))
    if heads.dim() != 3 or tuple(heads.shape[1:]) != tuple(batch.targets.shape):
        raise TensorcadError("model.mtp_targets", f"returned {tuple(heads.shape)}, expected (depth, "
                                                  f"{', '.join(map(str, batch.targets.shape))})")
    return heads


def check_heads(batch: StepBatch, heads: torch.Tensor) -> tuple[str, ...]:
    """Every head's failures, head 1 first (each head's first few)."""
    out: list[str] = []
    for k in range(1, heads.shape[0] + 1):
        out += head_failures(batch, k, heads[k - 1])
    return tuple(out)
