"""The generated models' training loss: next-token cross-entropy inside documents, a mean over every target.

What `tensorcad smoke-train` trains with and what `tensorcad certify` holds a
generated model's step to: labels already shifted (the output at t is trained
on the token at t + 1), written only where t + 1 is in t's document (and,
given ``scored``, where the loop scores it), -100 everywhere else; the loss the
mean of the targets' cross-entropies over the whole batch (``token``), or their
sum over ``num_items_in_batch`` when a loop accumulates micro-batches.
"""

from __future__ import annotations

from typing import Any

import torch

from .batch import IGNORE_INDEX
from .loop import token_cross_entropy

REDUCTION = "token"  # what the loss below is: every target of the step weighs 1/N
SHIFT = "shifted"  # the labels it reads


def next_token_labels(ids: torch.Tensor, documents: torch.Tensor, scored: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T): ``ids[t + 1]`` where t + 1 is in t's document (and ``scored[t]``), else IGNORE_INDEX."""
    keep = documents[:, 1:] == documents[:, :-1]
    if scored is not None:
        keep = keep & scored[:, :-1]
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = torch.where(keep, ids[:, 1:], labels[:, :-1])
    return labels


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """The mean cross-entropy of each output against its (already shifted) label; or the sum over N."""
    return token_cross_entropy(logits, labels, num_items_in_batch)
