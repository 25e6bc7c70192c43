"""The packing path each attention layer took, read off its recorded call and the batch's documents.

A call's mask is read the way its kernel reads it: a 4D tensor (boolean, or
additive with the dtype's minimum at dropped pairs), a BlockMask (its
``mask_mod`` evaluated by FlexAttention's own ``create_mask``), a generated
model's ``mask_mod``, ``cu_seq_lens_q`` (varlen kernels), or nothing — which SDPA
turns into ``is_causal`` (transformers' fast path, taken when the mask builder
found nothing to mask but causality) and eager into no mask at all. From the
pairs it keeps follow the two facts packing lives on: whether any query keeps a
key of another document, and how far back inside its own document a query
reaches (a sliding window shows as a reach shorter than the longest document).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .recording import AttentionCall

# The implementations whose treatment of a missing mask is known (eager and flex apply none, SDPA is_causal).
KNOWN = ("eager", "sdpa", "flex_attention", "paged|eager")
# What reached the kernel, in the words the verdicts use.
MASK_KINDS = ("none", "is_causal", "4D tensor", "BlockMask", "cu_seqlens", "mask_mod", "unread")


@dataclass(frozen=True)
class LayerPath:
    """One attention layer's path: its kernel, what mask reached it, whether documents stayed apart, its window."""

    layer: int
    kind: str  # "full" or "sliding" (the model's layer_types word, else from its window)
    implementation: str
    mask: str  # one of MASK_KINDS
    documents_apart: bool | None  # None: the mask could not be read
    window: int | None  # the window the layer is built with (None: none)
    reach: int | None  # the furthest a query reached back inside its document, itself counted
    longest: int  # the batch's longest document, which bounds what a reach can show

    @property
    def window_lost(self) -> bool:
        """The layer has a window the batch could show, and a query reached past it."""
        return (self.window is not None and self.reach is not None and self.window < self.longest
                and self.reach > self.window)

    def ran(self) -> str:
        """'layer 3 (sliding) ran sdpa with is_causal'."""
        return f"layer {self.layer} ({self.kind}) ran {self.implementation} with {self.mask}"

    def to_json(self) -> dict:
        return {"layer": self.layer, "kind": self.kind, "implementation": self.implementation, "mask": self.mask,
                "documentsApart": self.documents_apart, "window": self.window, "reach": self.reach,
                "longest": self.longest, "windowLost": self.window_lost}


def window_of(call: AttentionCall) -> int | None:
    for value in (call.keywords.get("sliding_window"), getattr(call.module, "sliding_window", None)):
        if isinstance(value, int) and value > 0:
            return value
    return None


def _kind(call: AttentionCall, window: int | None) -> str:
    config = getattr(call.module, "config", None)
    types = getattr(config, "layer_types", None)
    if isinstance(types, (list, tuple)) and 0 <= call.layer < len(types):
        return "sliding" if "sliding" in str(types[call.layer]) else "full"
    return "sliding" if window is not None else "full"


def _causal(queries: int, keys: int) -> torch.Tensor:
    offset = keys - queries  # queries are the last ``queries`` positions (a cache holds the rest)
    return torch.ones(queries, keys, dtype=torch.bool).tril(offset)


def _from_cu_seqlens(cu: torch.Tensor, total: int) -> torch.Tensor:
    documents = torch.zeros(total, dtype=torch.long)
    for i, start in enumerate(cu.tolist()[1:-1]):
        documents[int(start):] = i + 1
    return documents[:, None] == documents[None, :]


def kept_pairs(call: AttentionCall) -> tuple[str, torch.Tensor | None]:
    """What reached the kernel, and the (rows, queries, keys) pairs it keeps (None: not readable)."""
    mask, rows, queries, keys = call.mask, call.rows, call.queries, call.keys
    if call.implementation.startswith("generated:") or (callable(mask) and not hasattr(mask, "mask_mod")):
        from torch.nn.attention.flex_attention import create_mask

        return "mask_mod", create_mask(mask, rows, 1, queries, keys, device="cpu")[:, 0]
    if hasattr(mask, "mask_mod") and hasattr(mask, "kv_num_blocks"):  # a BlockMask
        from torch.nn.attention.flex_attention import create_mask

        return "BlockMask", create_mask(mask.mask_mod, rows, 1, queries, keys, device="cpu")[:, 0]
    if isinstance(mask, torch.Tensor):
        m = mask.detach().cpu()
        m = m if m.dim() == 3 else m[:, 0] if m.dim() == 4 else m.reshape(1, *m.shape[-2:])
        m = m[..., -queries:, :keys]
        kept = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
        return "4D tensor", kept.expand(rows, queries, keys)
    if mask is not None:
        return "unread", None
    cu = call.keywords.get("cu_seq_lens_q")
    if call.implementation.startswith("flash") and isinstance(cu, torch.Tensor):
        total = rows * queries
        kept = _from_cu_seqlens(cu.cpu(), total) & _causal(total, total)
        return "cu_seqlens", kept[None]
    if call.implementation == "sdpa":
        is_causal = call.keywords.get("is_causal")
        is_causal = getattr(call.module, "is_causal", True) if is_causal is None else is_causal
        if queries > 1 and is_causal:
            return "is_causal", _causal(queries, keys).expand(rows, queries, keys)
    if call.implementation not in KNOWN:
        return "none", None  # an implementation of its own, given no mask: what it reads is its own
    return "none", torch.ones(rows, queries, keys, dtype=torch.bool)


def _reach(kept: torch.Tensor, same: torch.Tensor) -> int | None:
    rows, queries, keys = kept.shape
    q = torch.arange(keys - queries, keys)[:, None]
    kv = torch.arange(keys)[None, :]
    back = (q - kv + 1).expand(rows, queries, keys)
    inside = kept & same & (back >= 1)
    return int(back[inside].max()) if bool(inside.any()) else None


def layer_path(call: AttentionCall, documents: torch.Tensor | None) -> LayerPath:
    """``call``'s path, held to ``documents`` (rows, tokens): each token's document in the batch."""
    mask, kept = kept_pairs(call)
    window = window_of(call)
    apart = reach = None
    longest = 0
    if kept is not None and documents is not None:
        docs = documents.cpu().reshape(-1, documents.shape[-1])
        if kept.shape[0] == 1 and docs.shape[0] > 1:  # a flattened varlen call: one row of every token
            docs = docs.reshape(1, -1)
        if docs.shape == (kept.shape[0], kept.shape[2]):
            same = docs[:, -kept.shape[1]:, None] == docs[:, None, :]
            apart = not bool((kept & ~same).any())
            reach = _reach(kept, same)
            longest = int(max(torch.unique_consecutive(row, return_counts=True)[1].max() for row in docs))
    return LayerPath(layer=call.layer, kind=_kind(call, window), implementation=call.implementation, mask=mask,
                     documents_apart=apart, window=window, reach=reach, longest=longest)


def paths_of(calls: list[AttentionCall], documents: torch.Tensor | None) -> list[LayerPath]:
    """Each recorded call's path, in the forward's order (a model called twice records each layer twice)."""
    return [layer_path(call, documents) for call in calls]


def summarize(paths: list[LayerPath]) -> list[str]:
    """The distinct paths taken, one line each: 'layers 0-1 (full) ran sdpa with is_causal'."""
    lines: dict[str, list[int]] = {}
    for p in paths:
        key = f"({p.kind}) ran {p.implementation} with {p.mask}"
        lines.setdefault(key, []).append(p.layer)
    return [f"layer{'s' if len(v) > 1 else ''} {', '.join(map(str, sorted(set(v))))} {k}" for k, v in lines.items()]
