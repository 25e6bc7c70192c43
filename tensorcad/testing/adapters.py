"""The adapters, under the name DESIGN.md documents (`from tensorcad.testing.adapters import hf_causal_lm`).

They live in ``tensorcad.hf`` (``tensorcad/hf/adapters.py``), beside the rest of
what tensorcad knows of Hugging Face, so that ``tensorcad certify`` adapts a
model without pytest; the harness shows them here and in ``harness``.
"""

from tensorcad.hf import PACKINGS, adapt, call, document_mask, hf_causal_lm, is_encoder, is_hf_model, unwrapped

__all__ = ["PACKINGS", "adapt", "call", "document_mask", "hf_causal_lm", "is_encoder", "is_hf_model", "unwrapped"]
