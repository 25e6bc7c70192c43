"""Tiny hand-written models and batches for the step certificates' tests, and the references they are held to.

`TinyLM` is one causal attention layer whose scores are kept within documents
(positions learned, restarting per document), so every document computes as
it would alone; its variants break one thing each. The references below are
written out here, apart from the code under test: each document run by itself
through the model, cross-entropy by hand, reduced by hand.

```python
from step_models import TinyLM, batch_of, alone_token_losses
```
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32


class TinyLM(nn.Module):
    """model(ids, documents, positions) -> logits: attention within documents (``leak``: across them too)."""

    vocab = VOCAB

    def __init__(self, leak: bool = False, leak_in_eval: bool = False, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, 16)
        self.place = nn.Embedding(64, 16)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, VOCAB)
        self.leak, self.leak_in_eval = leak, leak_in_eval

    def forward(self, ids, documents, positions=None):
        if positions is None:
            positions = torch.arange(ids.shape[1])[None].expand_as(ids)
        x = self.embed(ids) + self.place(positions)
        q, k, v = self.qkv(x).split(16, dim=-1)
        T = ids.shape[1]
        keep = torch.ones(T, T, dtype=torch.bool).tril()[None]
        if not (self.leak or (self.leak_in_eval and not self.training)):
            keep = keep & (documents[:, :, None] == documents[:, None, :])
        scores = (q @ k.transpose(-1, -2) / 4).masked_fill(~keep, float("-inf"))
        return self.head(x + scores.softmax(-1) @ v)


class _MixBackward(torch.autograd.Function):
    """Forward exact; backward adds each row's mean gradient to every position (documents mixed)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g + g.mean(dim=1, keepdim=True)


class MixedBackward(TinyLM):
    """Isolated forward, a backward that crosses documents (a hand-written kernel's bug)."""

    def forward(self, ids, documents, positions=None):
        return _MixBackward.apply(super().forward(ids, documents, positions))


def documents_of(lengths_by_row: list[list[int]]) -> torch.Tensor:
    return torch.stack([torch.cat([torch.full((n,), d) for d, n in enumerate(row)]) for row in lengths_by_row])


def positions_of(lengths_by_row: list[list[int]]) -> torch.Tensor:
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in lengths_by_row])


def inside_labels(ids: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """The collator's labels, written out: the ids, -100 at every document's first token."""
    labels = ids.clone()
    for r in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            if t == 0 or documents[r, t] != documents[r, t - 1]:
                labels[r, t] = -100
    return labels


def batch_of(lengths_by_row: list[list[int]], seed: int = 0, labels: str = "inside") -> dict:
    """A batch dict of rows holding documents of these lengths; labels inside (the loss shifts) or shifted."""
    documents = documents_of(lengths_by_row)
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(seed))
    batch = {"input_ids": ids, "documents": documents, "position_ids": positions_of(lengths_by_row)}
    if labels == "inside":
        batch["labels"] = inside_labels(ids, documents)
    else:  # already shifted: the next token where it is in the same document
        shifted = torch.full_like(ids, -100)
        same = documents[:, 1:] == documents[:, :-1]
        shifted[:, :-1] = torch.where(same, ids[:, 1:], shifted[:, :-1])
        batch["labels"] = shifted
    return batch


def spans(documents: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row, first, end) of each document, found by walking the rows."""
    out = []
    for r in range(documents.shape[0]):
        first = 0
        for t in range(1, documents.shape[1] + 1):
            if t == documents.shape[1] or documents[r, t] != documents[r, t - 1]:
                out.append((r, first, t))
                first = t
    return out


def alone_token_losses(model, batch: dict, shifted: bool = False) -> list[tuple[int, torch.Tensor]]:
    """(row, each target's cross-entropy) of every document run by itself, its targets inside it only."""
    out = []
    for r, first, end in spans(batch["documents"]):
        ids = batch["input_ids"][r:r + 1, first:end]
        n = end - first
        logits = model(ids, torch.zeros_like(ids), torch.arange(n)[None])[0]
        if shifted:
            targets = batch["labels"][r, first:end - 1]
        else:
            targets = batch["labels"][r, first + 1:end]
        kept = targets != -100
        out.append((r, F.cross_entropy(logits[:n - 1][kept], targets[kept], reduction="none")))
    return out


def by_hand(reduction: str, losses: list[tuple[int, torch.Tensor]]) -> torch.Tensor:
    """The reductions, written out."""
    if reduction == "token":
        return sum(t.sum() for _, t in losses) / sum(len(t) for _, t in losses)
    if reduction == "document":
        means = [t.mean() for _, t in losses if len(t)]
        return sum(means) / len(means)
    rows = sorted({r for r, _ in losses})
    means = []
    for row in rows:
        mine = [t for r, t in losses if r == row]
        if sum(len(t) for t in mine):
            means.append(sum(t.sum() for t in mine) / sum(len(t) for t in mine))
    return sum(means) / len(means)


def row_mean_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The naive loop: each row's mean cross-entropy (the loss shifting the labels), then the mean of rows."""
    rows = []
    for r in range(logits.shape[0]):
        targets = labels[r, 1:]
        kept = targets != -100
        rows.append(F.cross_entropy(logits[r, :-1][kept], targets[kept]))
    return torch.stack(rows).mean()
