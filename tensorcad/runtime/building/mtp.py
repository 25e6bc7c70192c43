"""Multi-token prediction (DeepSeek-V3) around a generated model: k heads sharing its embedding and output head.

DeepSeek-V3's MTP module k (1 <= k <= depth) takes the previous depth's hidden state
h (the trunk's last hidden state for k = 1) and the embedding of the token k
positions ahead, and computes h_k = block(W [norm(h); norm(emb(t + k))]); its
logits are the shared head over a norm of h_k, trained on the token k + 1 ahead.
Under packing both reads of "k ahead" must stay in the document: the input roll
(the token k ahead, none past the document's end) and the targets' roll (the last
k + 1 tokens of every document have nothing to predict). Megatron-LM #1661,
#4495/#6205 and #5011 are this roll crossing a boundary.

`with_mtp(model, depth)` wraps a generated `Model`: its embedding and head shared,
each depth a fresh block of the model's own block class (its document mask
included, called as the trunk calls its blocks), a projection of 2 x dim to dim and
three norms of the model's own norm class. ``forward`` returns the main logits as
the model does; `heads` every head's; `mtp_targets` the targets each head is trained
on. ``roll="plain"`` plants the bug (``torch.roll`` over the row, boundaries ignored).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

IGNORE = -100
ROLLS = ("documents", "plain")


def roll_within_documents(values: torch.Tensor, documents: torch.Tensor, k: int, fill: int) -> torch.Tensor:
    """``values`` k positions ahead, ``fill`` where that is past the row's end or in another document."""
    ahead = torch.full_like(values, fill)
    if k < values.shape[1]:
        same = documents[:, k:] == documents[:, :-k] if k else torch.ones_like(documents, dtype=torch.bool)
        ahead[:, :values.shape[1] - k] = torch.where(same, values[:, k:], torch.full_like(values[:, k:], fill))
    return ahead


def _plain_roll(values: torch.Tensor, documents: torch.Tensor, k: int, fill: int) -> torch.Tensor:
    """The bug: the row rolled, boundaries ignored (only the row's end filled)."""
    ahead = torch.roll(values, -k, dims=1)
    ahead[:, values.shape[1] - k:] = fill
    return ahead


class MultiTokenPrediction(nn.Module):
    """A generated model with ``depth`` MTP modules; the model's own calls and outputs unchanged."""

    def __init__(self, model: nn.Module, depth: int, *, roll: str = "documents", embedding: str = "embed",
                 head: str = "head", norm: str = "norm", blocks: str = "layers"):
        super().__init__()
        if not 1 <= depth <= 8:
            raise ValueError(f"an MTP depth of 1..8, not {depth}")
        if roll not in ROLLS:
            raise ValueError(f"roll is one of {ROLLS}, not {roll!r}")
        self.model, self.depth, self.roll = model, depth, roll
        self._names = (embedding, head, norm, blocks)
        trunk_norm, last = getattr(model, norm), getattr(model, blocks)[-1]
        dim = getattr(model, embedding).embedding_dim
        self.mtp = nn.ModuleList()
        for _ in range(depth):
            module = nn.Module()
            module.hnorm, module.enorm, module.norm = (copy.deepcopy(trunk_norm) for _ in range(3))
            module.eh_proj = nn.Linear(2 * dim, dim, bias=False)
            module.block = copy.deepcopy(last)
            module.apply(model._init_weights)  # a fresh block, as the generated model inits its own
            self.mtp.append(module)
        self.config = getattr(model, "config", None)
        self.vocab = getattr(model, head).out_features

    def _roll(self, values: torch.Tensor, documents: torch.Tensor, k: int, fill: int) -> torch.Tensor:
        return (roll_within_documents if self.roll == "documents" else _plain_roll)(values, documents, k, fill)

    def heads(self, ids: torch.Tensor, documents: torch.Tensor, positions: torch.Tensor | None = None) -> list:
        """[main logits, head 1's, ..., head depth's], each (B, T, V)."""
        embedding, head, norm, blocks = (getattr(self.model, n) for n in self._names)
        seen: dict[str, Any] = {}
        hooks = [norm.register_forward_pre_hook(lambda m, args: seen.__setitem__("h", args[0])),
                 blocks[-1].register_forward_pre_hook(lambda m, args, kwargs: seen.__setitem__("kw", kwargs),
                                                      with_kwargs=True)]
        try:
            main = self.model(ids, documents, positions)
        finally:
            for hook in hooks:
                hook.remove()
        h, out = seen["h"], [main]
        for k, module in enumerate(self.mtp, start=1):
            ahead = self._roll(ids, documents, k, 0)  # token 0 where nothing lies k ahead: its target is ignored
            h = module.eh_proj(torch.cat([module.hnorm(h), module.enorm(embedding(ahead))], dim=-1))
            h = module.block(h, **seen["kw"])
            out.append(head(module.norm(h)))
        return out

    def forward(self, ids: torch.Tensor, documents: torch.Tensor, positions: torch.Tensor | None = None):
        return self.model(ids, documents, positions)

    def all_logits(self, ids, documents, positions=None) -> torch.Tensor:
        """Every head's logits side by side, (B, T, (1 + depth) x V): what a certificate of all heads compares."""
        return torch.cat(self.heads(ids, documents, positions), dim=-1)

    def mtp_targets(self, targets: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        """(depth, B, T): head k's target at t, the main target k positions ahead in the document (IGNORE else)."""
        return torch.stack([self._roll(targets, documents, k, IGNORE) for k in range(1, self.depth + 1)])


def with_mtp(model: nn.Module, depth: int, *, roll: str = "documents", **names: str) -> MultiTokenPrediction:
    """``model`` (a generated Model) with ``depth`` DeepSeek-V3 MTP modules sharing its embedding and head."""
    return MultiTokenPrediction(model, depth, roll=roll, **names)


__all__ = ("IGNORE", "ROLLS", "MultiTokenPrediction", "roll_within_documents", "with_mtp")
