"""Shared by the analysis tests: attentions built as the loader builds them, and brute-force counts.

Nothing here calls the code under test to produce an expected figure.
"""

from __future__ import annotations

import numpy as np

from tensorcad.design.expr import Compare, Env, Param, Scope, Var, all_of, evaluate, parse
from tensorcad.design.expr.nodes import Binary, Call
from tensorcad.design.model import Attention, Wire


def attention(mask: str | None = None, causal: bool = True, window: int | None = None,
              heads: int = 4, roles: dict[str, str] | None = None) -> Attention:
    """An attention as the loader builds it: keep = causal AND window AND mask."""
    roles = roles or {}
    numbers = {"heads": heads, "kv_heads": heads, "head_dim": 64}
    if window is not None:
        numbers["window"] = window
    parsed = parse(mask, Scope("mask", numbers, frozenset(roles))) if mask else None
    near = None
    if window is not None:
        distance = Binary("-", Var("q"), Var("kv"))
        if not causal:
            distance = Call("abs", (distance,))
        near = Compare("<", distance, Param("window", window))
    keep = all_of(Compare(">=", Var("q"), Var("kv")) if causal else None, near, parsed)
    wires = {port: Wire(port, port, True, role, (port,), f"inputs.{port}")
             for port, role in roles.items()}
    return Attention("test.attention", heads, heads, 64, causal, window, parsed, None, keep,
                     wires, {})


def dense_keys(att: Attention, documents: np.ndarray, positions: np.ndarray) -> float:
    """Mean keys per query by evaluating every (row, head, query, key)."""
    rows, seq = documents.shape
    total = 0
    q = np.arange(seq)[:, None]
    kv = np.arange(seq)[None, :]
    tensors = {p: (documents if w.role == "documents" else positions) for p, w in att.tensors.items()}
    for b in range(rows):
        for h in range(att.heads):
            kept = evaluate(att.keep, Env(b=b, h=h, q=q, kv=kv, tensors=tensors))
            total += int(np.broadcast_to(kept, (seq, seq)).sum())
    return total / (rows * att.heads * seq)


def every_window_causal_keys(lengths: np.ndarray, seq: int, chunk: int = 1 << 20) -> float:
    """Document-causal keys per query over every window of a circular stream, window by window.

    For each start s, the window's pieces are the rest of the document at s,
    the whole documents after it, and the start of the document at
    s + seq - 1; each keeps n(n + 1)/2 scores. Summed with prefix sums, in
    chunks of starts; independent of ``Stream.causal_keys_every_window``,
    which sums over documents instead.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    laps = seq // total + 2  # enough copies that every window lies inside them
    tiled = np.tile(lengths, laps)
    ends = np.cumsum(tiled)
    begins = ends - tiled
    whole = np.concatenate([[0.0], np.cumsum(tiled * (tiled + 1.0) / 2)])
    kept = 0.0
    for first_start in range(0, total, chunk):
        s = np.arange(first_start, min(first_start + chunk, total), dtype=np.int64)
        i = np.searchsorted(ends, s, side="right")
        j = np.searchsorted(ends, s + seq - 1, side="right")
        head = np.where(i == j, seq, ends[i] - s).astype(np.float64)
        tail = np.where(i == j, 0, s + seq - begins[j]).astype(np.float64)
        middle = np.where(j > i + 1, whole[np.maximum(j, i + 1)] - whole[i + 1], 0.0)
        kept += float((head * (head + 1) / 2 + tail * (tail + 1) / 2 + middle).sum())
    return kept / (total * seq)
