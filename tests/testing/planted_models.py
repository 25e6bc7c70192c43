"""Hand-written models whose flaw is written in, shared by the certificates' tests (`test_certificates`,
`test_grouped_verdicts`): a backward that mixes positions, a mask forgotten, positions counted through the row."""

from __future__ import annotations

import torch
import torch.nn as nn

VOCAB = 32


class MixBackward(torch.autograd.Function):
    """The identity forward; a backward that adds each row's mean gradient to every position."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad + grad.mean(dim=1, keepdim=True)


class TinyAttention(nn.Module):
    """One causal document-masked attention layer; ``leaky_backward`` inserts MixBackward after the
    embedding, ``mask`` may be forgotten, ``learned_positions`` counts them through the row."""

    def __init__(self, mask: bool = True, leaky_backward: bool = False, learned_positions: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 16)
        self.where = nn.Embedding(128, 16) if learned_positions else None
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, VOCAB)
        self.mask, self.leaky_backward = mask, leaky_backward

    def forward(self, ids, documents, positions=None):
        x = self.embed(ids)
        if self.where is not None:
            x = x + self.where(torch.arange(ids.shape[1]))  # counted through the row, not restarting
        if self.leaky_backward:
            x = MixBackward.apply(x)
        q, k, v = self.qkv(x).split(16, dim=-1)
        T = ids.shape[1]
        keep = torch.ones(T, T, dtype=torch.bool).tril()[None]
        if self.mask:
            keep = keep & (documents[:, :, None] == documents[:, None, :])
        scores = (q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf"))
        return self.out(scores.softmax(-1) @ v)
