"""Building a model: a design scaled down and built, the subject every check reads, and what PyTorch says of it.

- ``scaling``: ``scale``, a design shrunk to a few million parameters with its
  structure kept (no torch);
- ``generated``: ``build`` and ``load_module``, the generated module run as a
  module of its own;
- ``settings``: ``Settings`` and ``DEFAULTS``, the one set every certifier
  starts from (no torch);
- ``subject``: ``Subject``, a design scaled, built once a process, seeded,
  with its batch and operating point;
- ``export``: ``torch.export`` of each form; ``profile``: FLOPs counted by
  ``FlopCounterMode``; ``blockmask``: FlexAttention's ``create_block_mask``
  on the engine's rows, against the engine's block and kept-score figures;
- ``cp_layouts``: ``cp_layout``, the analysis's shardings as layouts (which position each
  gathered slot holds); ``cp_masks``: each rank's block mask by the generated
  runtime's own ``cp_block_mask``, and a document mask marked like generated ones;
- ``replicas``: ``replica``, a transformers model's architecture and code path at a
  size that certifies in seconds (the guard's, and ``certify MODEL_DIR --replica``'s).

Imports nothing of ``certification`` or ``training``, the rooms above it.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    "scale": ".scaling:scale",
    "build": ".generated:build",
    "load_module": ".generated:load_module",
    "FORMS": ".generated:FORMS",
    "Settings": ".settings:Settings",
    "DEFAULTS": ".settings:DEFAULTS",
    "FORM_NAMES": ".settings:FORM_NAMES",
    "MARKER_KEYS": ".settings:MARKER_KEYS",
    "Subject": ".subject:Subject",
    "DesignModel": ".subject:DesignModel",
    "build_model": ".subject:build_model",
    "clear_models": ".subject:clear_models",
    "draw_batch": ".subject:draw_batch",
    "drawn_batch": ".subject:drawn_batch",
    "scaled_design": ".subject:scaled_design",
    "vocab_of": ".subject:vocab_of",
    "ExportResult": ".export:ExportResult",
    "export_form": ".export:export_form",
    "export_model": ".export:export_model",
    "FlopProfile": ".profile:FlopProfile",
    "count_flops": ".profile:count_flops",
    "profile": ".profile:profile",
    "BlockAgreement": ".blockmask:BlockAgreement",
    "KeptAgreement": ".blockmask:KeptAgreement",
    "compare_blocks": ".blockmask:compare_blocks",
    "compare_kept": ".blockmask:compare_kept",
    "model_masks": ".blockmask:model_masks",
    "cp_layout": ".cp_layouts:cp_layout",
    "cp_block_mask": ".cp_masks:cp_block_mask",
    "cp_mask_mod": ".cp_masks:cp_mask_mod",
    "document_mask": ".cp_masks:document_mask",
    "replica": ".replicas:replica",
    "replica_config": ".replicas:replica_config",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
