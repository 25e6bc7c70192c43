"""The batch audit: what a batch (and the settings beside it) says about packing, before any kernel runs.

Each finding names the setting and says what to change, in one line:

- the documents every representation the batch carries names (``documents``,
  ``seq_idx``, ``cu_seq_lens_q``/``_k``, ``position_ids``) must agree: positions
  restart exactly where the others say a document begins;
- labels at boundaries: a document's first token is no target (its label -100,
  or ``shift_labels`` -100 at the last token before it), else the last token of
  each document learns to predict the next document;
- padding supervised: tokens a 2D ``attention_mask`` marks as padding carry labels;
- what switches transformers' packed detection off (``masking_utils`` reads
  documents from restarting ``position_ids`` only when no 2D ``attention_mask``
  and no cache exist): a 2D mask beside packed positions, ``use_cache`` on;
- what a kernel ignores: a flash-attention implementation given a mask reads
  the mask, not ``position_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the batch or its settings: the setting, and the line saying what to change."""

    setting: str  # "attention_mask", "use_cache", "position_ids", "labels", "attn_implementation", ...
    line: str
    switches_packing_off: bool = False  # the finding alone makes transformers attend across documents

    def to_json(self) -> dict:
        return {"setting": self.setting, "line": self.line, "switchesPackingOff": self.switches_packing_off}


def _rows(value: Any) -> torch.Tensor:
    value = torch.as_tensor(value).cpu()
    return value[None] if value.dim() == 1 else value


def _starts(documents: torch.Tensor) -> torch.Tensor:
    """True at each token that begins a document (every row's first token too)."""
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return starts


def representations(batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The documents (rows, tokens) each representation in ``batch`` names, by its key."""
    from tensorcad.packing import (
        documents_of_cu_seqlens,
        documents_of_positions,
        documents_of_seq_idx,
    )

    ids = batch.get("input_ids")
    shape = _rows(ids).shape if ids is not None else None
    found: dict[str, torch.Tensor] = {}
    if "documents" in batch:
        found["documents"] = _rows(batch["documents"]).long()
    if batch.get("seq_idx") is not None:
        found["seq_idx"] = _rows(documents_of_seq_idx(torch.as_tensor(batch["seq_idx"]).cpu())).long()
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if batch.get(key) is not None and shape is not None:
            found[key] = _rows(documents_of_cu_seqlens(torch.as_tensor(batch[key]).cpu(), shape[1], shape[0])).long()
    if batch.get("position_ids") is not None:
        found["position_ids"] = _rows(documents_of_positions(_rows(batch["position_ids"]))).long()
    return found


def documents_of(batch: Mapping[str, Any]) -> torch.Tensor | None:
    """The batch's documents, from the representation that states them most directly (None: none does)."""
    found = representations(batch)
    for key in ("documents", "seq_idx", "cu_seq_lens_q", "cu_seq_lens_k", "position_ids"):
        if key in found:
            return found[key]
    return None


def _where(mask: torch.Tensor) -> str:
    row, token = (int(i) for i in torch.nonzero(mask)[0])
    return f"row {row}, token {token}"


def _positions(found: dict[str, torch.Tensor]) -> list[Finding]:
    if "position_ids" not in found:
        return []
    positions = found["position_ids"]
    for key in ("documents", "seq_idx", "cu_seq_lens_q", "cu_seq_lens_k"):
        other = found.get(key)
        if other is None or other.shape != positions.shape:
            continue
        missed = _starts(other) & ~_starts(positions)
        if bool(missed.any()):
            return [Finding("position_ids", f"position_ids do not restart where {key} says a document begins "
                                            f"({int(missed.sum())} documents, first at {_where(missed)}): pass each "
                                            "token's position in its own document (the collator's position_ids)",
                            switches_packing_off=True)]
        extra = _starts(positions) & ~_starts(other)
        if bool(extra.any()):
            return [Finding("position_ids", f"position_ids restart where {key} names no new document "
                                            f"(first at {_where(extra)}): the two disagree on the documents")]
    return []


def _labels(batch: Mapping[str, Any], documents: torch.Tensor | None) -> list[Finding]:
    if documents is None:
        return []
    first = _starts(documents)
    first[:, 0] = False  # a row's first token has no token before it in the row
    if batch.get("shift_labels") is not None:
        shifted = _rows(batch["shift_labels"])
        if shifted.shape == documents.shape:
            last = torch.zeros_like(first)
            last[:, :-1] = first[:, 1:]
            crossing = last & (shifted != IGNORE_INDEX)
            if bool(crossing.any()):
                return [Finding("shift_labels", f"shift_labels at {int(crossing.sum())} documents' last tokens "
                                                f"name the next document's first token (first at {_where(crossing)}): "
                                                "set them to -100")]
        return []
    if batch.get("labels") is None:
        return []
    labels = _rows(batch["labels"])
    if labels.shape != documents.shape:
        return []
    crossing = first & (labels != IGNORE_INDEX)
    if bool(crossing.any()):
        return [Finding("labels", f"labels are not -100 at {int(crossing.sum())} documents' first tokens (first at "
                                  f"{_where(crossing)}): each document's last token learns to predict the next "
                                  "document; set labels to -100 there (DataCollatorWithFlattening does)")]
    return []


def _padding(batch: Mapping[str, Any]) -> list[Finding]:
    mask, labels = batch.get("attention_mask"), batch.get("labels")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or labels is None:
        return []
    labels = _rows(labels)
    if labels.shape != mask.shape:
        return []
    supervised = (mask.cpu() == 0) & (labels != IGNORE_INDEX)
    if bool(supervised.any()):
        return [Finding("labels", f"{int(supervised.sum())} padding tokens (attention_mask 0) are supervised "
                                  f"(first at {_where(supervised)}): set their labels to -100")]
    return []


def _use_cache(model: Any, batch: Mapping[str, Any]) -> bool:
    if batch.get("past_key_values") is not None or batch.get("cache") is not None:
        return True
    use_cache = batch.get("use_cache")
    if use_cache is None:
        use_cache = getattr(getattr(model, "config", None), "use_cache", False)
    return bool(use_cache)


def _settings(model: Any, batch: Mapping[str, Any], found: dict[str, torch.Tensor]) -> list[Finding]:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "model_type"):
        return []  # not a transformers model: its settings are its own
    positions = found.get("position_ids")
    packed = positions is not None and bool(_starts(positions)[:, 1:].any())
    mask = batch.get("attention_mask")
    implementation = str(getattr(config, "_attn_implementation", "") or "")
    findings = []
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and packed:
        kind = "an all-ones" if bool((mask == 1).all()) else "a 2D"
        findings.append(Finding("attention_mask", f"{kind} attention_mask was passed beside position_ids; drop it "
                                                  "(transformers reads packed documents from position_ids only "
                                                  "when no 2D attention_mask is given)", switches_packing_off=True))
    elif isinstance(mask, torch.Tensor) and mask.dim() == 4:
        findings.append(Finding("attention_mask", "a 4D attention_mask was passed: transformers uses it as it is, "
                                                  "for every layer, windows included; it must hold each layer's "
                                                  "own mask (or pass restarting position_ids and no mask)"))
    if mask is None and packed and _use_cache(model, batch):
        findings.append(Finding("use_cache", "use_cache is on (a cache is built, and with a cache transformers "
                                             "ignores the restarting position_ids); pass use_cache=False or set "
                                             "model.config.use_cache = False", switches_packing_off=True))
    if implementation.startswith("flash") and mask is not None and packed:
        findings.append(Finding("attn_implementation", f"{implementation} reads the attention_mask and ignores "
                                                       "position_ids when a mask is given; drop the mask",
                                switches_packing_off=True))
    return findings


def audit_batch(model: Any, batch: Mapping[str, Any]) -> list[Finding]:
    """Every finding on ``batch`` as ``model`` receives it (its keywords to the forward), one line each."""
    found = representations(batch)
    documents = documents_of(batch)
    return _positions(found) + _labels(batch, documents) + _padding(batch) + _settings(model, batch, found)
