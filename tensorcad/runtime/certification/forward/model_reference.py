"""Faithful's reference is the model, not the wrapper: transformers' own forward on each document alone.

A wrapper around a Hugging Face model (``hf_causal_lm``, a user's
``model_fn``) is what the user trains, but "as if alone" means as *the model*
computes a document alone (DESIGN.md, "the user's own call"). Comparing the
wrapper with itself run alone misses what the wrapper loses on one document as
on many: a 4D block-diagonal mask (or a ``BlockMask``) replaces the mask
transformers builds, so Mistral's, Gemma 3's or Llama 4's sliding window (or
chunk) is dropped in both runs, and the two agree. Comparing the wrapper's
outputs with the model's raises a false alarm on a wrapper that transforms
them (log-softmax, a temperature).

So when ``model_fn`` is, or holds, exactly one Hugging Face model and no
``alone_fn`` is given, both sides are read from that model: the packed run is
``model_fn`` itself (the user's call), its outputs read by a forward hook on
the model (its ``logits``, or ``last_hidden_state``; a row flattened by the
wrapper, as ``flash_kwargs`` does, shaped back to (B, T, ...)); each document
alone is transformers' own forward on its ids, nothing packed
(``model(input_ids=...)``, no cache). Where the hook does not see exactly one
call of the model for the packed batch (a compiled model, a wrapper that calls
it per row), the wrapper is compared with itself alone, and the result says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .calls import outputs_of, run_model

SELF = "the model_fn itself on each document alone"


def hf_model_behind(model_fn: Any) -> Any | None:
    """The one Hugging Face model ``model_fn`` is or holds (closure, ``.model``); None when none, or several."""
    from tensorcad.hf import is_hf_model, reachable_hf_models

    found = [model_fn] if is_hf_model(model_fn) else reachable_hf_models(model_fn)
    return found[0] if len(found) == 1 else None


class _NotReadable(Exception):
    """The hook did not see one call of the model for one packed batch."""


@dataclass(frozen=True)
class ModelReference:
    """The packed run read at the model's own outputs, and the model's own forward on a document alone."""

    model: Any
    model_fn: Callable[..., Any]

    @property
    def name(self) -> str:
        from tensorcad.hf import unwrapped

        return type(unwrapped(self.model)).__name__

    def describe(self) -> str:
        return f"transformers' own forward of {self.name} on each document alone (its outputs read on both sides)"

    def packed(self, ids: torch.Tensor, documents: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """``model_fn`` on the packed batch; what the model itself returned, (B, T, ...)."""
        seen: list[Any] = []
        handle = self.model.register_forward_hook(lambda module, args, out: seen.append(out))
        try:
            run_model(self.model_fn, (ids, documents, positions))  # the user's call, its errors in one line
        finally:
            handle.remove()
        if len(seen) != 1:
            raise _NotReadable(f"the hook on {self.name} saw {len(seen)} calls for one packed batch")
        out = outputs_of(seen[0], "model")
        B, T = ids.shape
        if out.shape[:2] != (B, T):
            if out.dim() < 2 or out.shape[0] * out.shape[1] != B * T:
                raise _NotReadable(f"{self.name} returned outputs shaped {tuple(out.shape)} for a batch {(B, T)}")
            out = out.reshape(B, T, *out.shape[2:])
        return out

    def alone(self, ids: torch.Tensor, documents: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """Transformers' own forward on the row(s) ``ids``, nothing packed (its own positions, mask, window)."""
        from tensorcad.hf import call_kwargs

        return outputs_of(self.model(input_ids=ids, **call_kwargs(self.model, "trainer")), "model")


def reference_of(model_fn: Callable[..., Any], alone_fn: Callable[..., Any] | None, ids: torch.Tensor,
                 documents: torch.Tensor, positions: torch.Tensor | None
                 ) -> tuple[torch.Tensor | None, Callable[..., Any] | None, str]:
    """(the packed outputs as the reference reads them, how a document runs alone, what it is compared with).

    The packed outputs are None where the caller runs ``model_fn`` itself (no model behind it, an
    ``alone_fn`` of the user's, or a model the hook cannot read)."""
    model = hf_model_behind(model_fn) if alone_fn is None else None
    if model is None:
        return None, alone_fn, "the given alone_fn on each document alone" if alone_fn is not None else SELF
    reference = ModelReference(model, model_fn)
    try:
        packed = reference.packed(ids, documents, positions)
    except _NotReadable as why:
        return None, None, f"{SELF} ({why}, so the model's own outputs could not be read)"
    return packed, reference.alone, reference.describe()
