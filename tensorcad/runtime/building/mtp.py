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

The code is the generated modules' own (``codegen.runtime.mtp``), loaded once as a module: what a design with
``mtp`` generates is what this runs and the certificates hold.
"""

from __future__ import annotations

import functools
import types

from .generated import load_module

ROLLS = ("documents", "plain")


@functools.cache
def runtime() -> types.ModuleType:
    """The generated MTP runtime as a module (with the imports it reads)."""
    from tensorcad.codegen.runtime.mtp import MTP_RUNTIME

    return load_module("import copy\n\nimport torch\nimport torch.nn as nn\n" + MTP_RUNTIME, "mtp runtime")


def __getattr__(name: str):
    if name in ("IGNORE", "MultiTokenPrediction", "roll_within_documents", "with_mtp"):
        return getattr(runtime(), name)
    raise AttributeError(name)


def with_mtp(model, depth: int, *, roll: str = "documents", **names: str):
    """``model`` (a generated Model) with ``depth`` DeepSeek-V3 MTP modules sharing its embedding and head."""
    return runtime().with_mtp(model, depth, roll=roll, **names)


__all__ = ("IGNORE", "ROLLS", "MultiTokenPrediction", "roll_within_documents", "with_mtp")
