"""Serving a stream: one document a sequence, decoding at full context.

A request is one document, so serving ignores the operating point's packing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..design.expr import Env, evaluate
from ..design.mixers import mixers
from ..design.model import Attention, Design
from .cost import attention_flops, kv_cache_bytes, state_bytes
from .mixers import decode_flops, state_numbers

# Deciding the last query's keys one by one costs seq × heads mask evaluations;
# past this many they are sampled evenly instead (2^24 tokens × 128 heads would
# otherwise be two billion).
EXACT_LIMIT = 1 << 22


def decode_keys(attention: Attention, seq: int) -> float:
    """Keys the last query of a full-context document keeps, mean over heads."""
    if attention.keep is None:
        return float(seq)
    heads = attention.heads if "h" in _variables(attention) else 1
    if seq * heads <= EXACT_LIMIT:
        kv = np.arange(seq, dtype=np.int64)
        weight = 1.0
    else:
        count = max(EXACT_LIMIT // heads, 1)
        kv = np.unique(np.linspace(0, seq - 1, count).round().astype(np.int64))
        weight = seq / kv.size
    h = np.arange(heads, dtype=np.int64)[:, None]
    tensors = {}
    for port, wire in attention.tensors.items():
        row = np.zeros((1, seq), np.int64) if wire.role == "documents" else np.arange(seq, dtype=np.int64)[None]
        tensors[port] = row
    env = Env(b=np.zeros((1, 1), np.int64), h=h, q=np.full((1, 1), seq - 1, np.int64), kv=kv[None, :], tensors=tensors)
    kept = np.broadcast_to(evaluate(attention.keep, env), (heads, kv.size))
    return float(kept.sum(axis=1).mean() * weight)


def _variables(attention: Attention) -> frozenset[str]:
    from ..design.expr import variables

    return variables(attention.keep)


@dataclass(frozen=True)
class PerStream:
    kv_cache_bytes: float
    decode_flops_per_token: float
    state_bytes: float | None = None  # the stateful mixers' state, the same at any context; None: no mixer

    def to_json(self) -> dict:
        out = {"kvCacheBytes": self.kv_cache_bytes, "decodeFlopsPerToken": self.decode_flops_per_token}
        if self.state_bytes is not None:
            out["stateBytes"] = self.state_bytes
        return out


def per_stream(design: Design, seq: int, matmul: float, dtype_bytes: float) -> PerStream | None:
    """KV-cache bytes, mixer state and decode FLOPs a token at full context; None without either.

    Only causal attention decodes token by token and keeps a cache; a window
    keeps only its last W positions (a rolling buffer, as Mistral's does). A
    stateful mixer keeps a fixed state instead (`analysis.mixers.state_numbers`)
    and steps it once a token, whatever the context.
    """
    attentions = design.attentions()
    stateful = mixers(design)
    if (not attentions and not stateful) or not all(a.causal for a, _ in attentions):
        return None
    cache = 0.0
    attention = 0.0
    for a, layers in attentions:
        kept_positions = min(seq, a.window) if a.window is not None else seq
        cache += kv_cache_bytes(kept_positions, a.cache_numbers, layers, dtype_bytes)
        attention += layers * attention_flops(decode_keys(a, seq), a.flops_dim, a.heads)
    if not stateful:
        return PerStream(cache, matmul + attention)
    state = sum(state_bytes(state_numbers(m.node), m.layers, dtype_bytes) for m in stateful)
    step = sum(m.layers * decode_flops(m.node) for m in stateful)
    return PerStream(cache, matmul + attention + step, state)
