"""A two-layer design the certificates' tests share (test_model_certificates, test_step_certificates): kept here,
on sys.path beside tests/conftest.py, so a test file imports it whichever files pytest collected with it."""

from __future__ import annotations

import tensorcad
from tensorcad.runtime.building.settings import Settings


def design(mask: str | None, documents: bool = True):
    """A two-layer design small enough that scaling leaves it as it is (about 80k parameters)."""
    attention = {"heads": 4, "head_dim": 16, "causal": True, "rope": {"theta": 10000}}
    if mask is not None:
        attention["mask"] = mask
    inputs = {"ids": {"role": "tokens"}, **({"documents": {"role": "documents"}} if documents else {})}
    return tensorcad.load({
        "name": "tiny", "context": 256, "inputs": inputs,
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 64, "dim": 64}},
            {"id": "layers", "kind": "stack", "in": {"x": "embed", **({"doc": "documents"} if documents else {})},
             "params": {"repeat": 2, "block": {"kind": "transformer_block", "params": {
                 "dim": 64, "norm": "rmsnorm", "mlp": {"hidden": 128, "activation": "swiglu"},
                 "attention": attention}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 64}},
        ],
        "output": "head",
    })


SETTINGS = Settings(seq=96, pack=16.0, sample=4)
