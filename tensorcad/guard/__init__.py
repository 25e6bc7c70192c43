"""The guard: the real training run's batches certified, and the packing path each layer really took.

- ``recording``: every attention call of a forward, recorded where the kernel is
  chosen (transformers' ``AttentionInterface``, a generated model's ``recording_attend``);
- ``path``: each call's path (``LayerPath``: the mask kind reaching the kernel,
  whether the documents stayed apart, the window it applied);
- ``audit``: the batch audit (``audit_batch``: positions, labels, padding, the
  settings that switch packing off), each a ``Finding``;
- ``verdicts``: the one-line verdicts; ``check``: ``packing_path``, ``check_batch``;
- ``replica`` (from ``tensorcad.runtime.building``, where ``tensorcad certify MODEL_DIR``
  builds it too): the same architecture and code path at a size that certifies in seconds;
- ``session``: ``Guard``, what a callback runs on the first and sampled batches.

Needs torch (and transformers for its models); the names load on first use.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    "AttentionCall": ".recording:AttentionCall",
    "recording": ".recording:recording",
    "LayerPath": ".path:LayerPath",
    "MASK_KINDS": ".path:MASK_KINDS",
    "Finding": ".audit:Finding",
    "audit_batch": ".audit:audit_batch",
    "CERTIFICATES": ".check:CERTIFICATES",
    "GuardError": ".check:GuardError",
    "GuardReport": ".check:GuardReport",
    "PathReport": ".check:PathReport",
    "check_batch": ".check:check_batch",
    "packing_path": ".check:packing_path",
    "replica": "tensorcad.runtime.building:replica",
    "Guard": ".session:Guard",
    "check_scoring": ".rl:check_scoring",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
