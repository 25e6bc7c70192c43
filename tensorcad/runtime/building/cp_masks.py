"""Each context-parallel rank's block mask, by the very code every generated module carries.

The runtime builds a rank's BlockMask (its queries against the gathered keys of
a layout, ``cp_layout``) with the generated runtime's own ``cp_block_mask``:
the attention runtime's text (``codegen.runtime.prelude``) loaded once as a module of
its own, so what the runtime runs and certifies is what a generated model runs.
``document_mask`` is a document mask marked as the generated factories mark
theirs (``reads``, ``uses_batch``, ``uses_head``, ``ranges``): what the plan
certificate and the multi-process run attend with when no design is given.
"""

from __future__ import annotations

import functools
import types

import torch

from .generated import load_module


@functools.cache
def runtime() -> types.ModuleType:
    """The generated attention runtime (``IMPORTS`` + ``ATTENTION_RUNTIME``) as a module."""
    from tensorcad.codegen.runtime.prelude import ATTENTION_RUNTIME, IMPORTS

    return load_module(IMPORTS + ATTENTION_RUNTIME, "attention runtime")


def cp_block_mask(mask_mod, layout, rank: int, world_size: int, B: int, H: int, device=None):
    """Rank ``rank``'s BlockMask over the layout: its L/N queries against the L gathered keys."""
    return runtime().cp_block_mask(mask_mod, layout, rank, world_size, B, H, device)


def cp_mask_mod(mask_mod, layout, rank: int, world_size: int):
    """``mask_mod`` read through the layout, as rank ``rank``'s queries see the gathered keys."""
    layout = torch.as_tensor(layout, dtype=torch.int64)
    return runtime().cp_mask_mod(mask_mod, layout.unsqueeze(0) if layout.dim() == 1 else layout,
                                 rank, world_size)


def runtime_paths() -> dict:
    """The path each piece of the loaded runtime last ran (``cp_block_mask``: from_ranges or not)."""
    return runtime().RUNTIME_PATHS


def document_mask(documents: torch.Tensor, *, causal: bool = True, window: int | None = None):
    """``doc(b, q) == doc(b, kv)``, and ``q >= kv`` and ``q - kv < window`` as asked, over (B, T) ids.

    A causal window keeps the distances 0 .. window − 1; without causality the
    window is ``abs(q - kv) < window``.
    """
    if window is not None and window < 1:
        raise ValueError(f"a window keeps at least the query itself: window >= 1, not {window}")

    def document_causal(b, h, q_idx, kv_idx):
        keep = documents[b, q_idx] == documents[b, kv_idx]
        if causal:
            keep = keep & (q_idx >= kv_idx)
        if window is not None:
            keep = keep & ((q_idx - kv_idx).abs() < window)
        return keep

    behind = None if window is None else window - 1
    document_causal.reads = (documents,)
    document_causal.uses_head = False
    document_causal.ranges = {"documents": documents, "behind": behind, "ahead": 0 if causal else behind}
    return document_causal
