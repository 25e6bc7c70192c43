"""``data[boundaries]``: the document boundaries a model receives equal the packer's own document lengths.

A batch tells the model where documents begin in one or more forms:
``position_ids`` that restart (transformers' packed path), ``cu_seq_lens_q``
(FlashAttention's varlen), ``seq_idx`` (Mamba's), a ``documents`` tensor, or
EOS tokens from which a document mask is built (torchtitan's: a document ends
*at* each EOS). Each form present is read back to documents by
``tensorcad.packing``'s own converters and held, row by row, to the lengths the
packer says it packed (tokens past a row's lengths are padding). Three faults
are named when the boundaries differ:

- **merged**: the packer ends a document where the form does not (a truncated
  document lost its EOS, OLMo-core #843: the next document is read as its tail);
- **split**: the form ends a document inside one of the packer's (the EOS id is
  also a chat template's token, torchtitan #3130: one chat read as three);
- **padding**: the padding is read as documents (position_ids padded with
  zeros, LlamaFactory #10452 / VeOmni #746: one one-token document per pad).

A padding run read as one document, or as the last document's tail, is no
fault: no real token attends to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensorcad.errors import TensorcadError
from tensorcad.packing import (
    documents_of_cu_seqlens,
    documents_of_eos,
    documents_of_positions,
    documents_of_seq_idx,
    row_lengths,
)

FORMS = ("position_ids", "cu_seq_lens_q", "seq_idx", "documents", "eos")
SHOWN = 8  # findings a message lists before it counts the rest


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


@dataclass(frozen=True)
class Finding:
    """One place where a form's boundaries differ from the packer's."""

    form: str
    row: int
    kind: str  # merged | split | padding | unreadable
    position: int  # the token position in the row where the boundary is missing or extra
    message: str

    def to_json(self) -> dict:
        return {"form": self.form, "row": self.row, "kind": self.kind, "position": self.position,
                "message": self.message}


@dataclass(frozen=True)
class DataBoundariesResult:
    forms: tuple[str, ...]  # the forms the batch held, each checked
    rows: int
    documents: int  # the packer's documents in the batch
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        return bool(self.forms) and not self.findings

    @property
    def message(self) -> str:
        if not self.forms:
            return "the batch holds no form of boundaries (position_ids, cu_seq_lens_q, seq_idx, documents, EOS)"
        if self.passed:
            return (f"{', '.join(self.forms)}: the {self.documents:,} documents of {self.rows} rows, as the packer "
                    "packed them")
        listed = "; ".join(f.message for f in self.findings[:SHOWN])
        more = f"; and {len(self.findings) - SHOWN} more" if len(self.findings) > SHOWN else ""
        return f"{len(self.findings)} boundary faults: {listed}{more}"

    def to_json(self) -> dict:
        return {"passed": self.passed, "message": self.message, "forms": list(self.forms), "rows": self.rows,
                "documents": self.documents, "findings": [f.to_json() for f in self.findings]}


def provenance_lengths(docs: Any) -> list[list[int]]:
    """Each row's document lengths from a per-token document column (negative on padding, which ends the row)."""
    grid = np.atleast_2d(_numpy(docs))  # one row as a 1-D column
    out = []
    for r, row in enumerate(grid.tolist()):
        pad = next((t for t, d in enumerate(row) if d < 0), len(row))
        if any(d >= 0 for d in row[pad:]):
            raise TensorcadError(f"docs[{r}]", f"padding at {pad} is followed by a document: padding ends a row")
        out.append(row_lengths(np.asarray(row[:pad]))[0] if pad else [])
    return out


def _received(batch: Mapping, form: str, shape: tuple[int, int], eos_id: int | None, ids_key: str) -> np.ndarray:
    rows, seq = shape
    if form == "position_ids":
        return _numpy(documents_of_positions(_numpy(batch["position_ids"]).reshape(rows, seq)))
    if form == "cu_seq_lens_q":
        return _numpy(documents_of_cu_seqlens(_numpy(batch["cu_seq_lens_q"]).ravel(), seq, rows))
    if form == "seq_idx":
        return _numpy(documents_of_seq_idx(_numpy(batch["seq_idx"]).reshape(rows, seq)))
    if form == "documents":
        return _numpy(batch["documents"]).reshape(rows, seq)
    return _numpy(documents_of_eos(_numpy(batch[ids_key]).reshape(rows, seq), eos_id))


def _cuts(lengths: list[int]) -> set[int]:
    return set(np.cumsum(lengths, dtype=np.int64)[:-1].tolist())  # the positions where a next document starts


def _row_findings(form: str, r: int, due: list[int], got: list[int], ids: np.ndarray | None,
                  eos_id: int | None) -> list[Finding]:
    filled = sum(due)
    due_cuts, got_cuts = _cuts(due), _cuts(got)
    starts = np.r_[0, np.cumsum(due)].tolist()
    findings = []
    for c in sorted(due_cuts - got_cuts):  # each before `filled`: the last document's end is no cut
        d = starts.index(c) - 1  # the document that ends at c
        why = ""
        if form == "eos" and ids is not None:  # an EOS there would have cut it: the document lost its own
            why = f" (it ends with token {int(ids[c - 1])}, not the EOS {eos_id}: truncated past its EOS?)"
        findings.append(Finding(form, r, "merged", c, f"{form}: row {r}'s document {d} (length {due[d]}) runs "
                                                      f"on into document {d + 1} at position {c}{why}"))
    extra = sorted(got_cuts - due_cuts)
    inside = [c for c in extra if c < filled]  # a cut is never at 0; one at `filled` is the padding's own
    by_document: dict[int, list[int]] = {}
    for c in inside:  # c is no start of the packer's: the document it falls in is the last start before it
        by_document.setdefault(int(np.searchsorted(starts, c)) - 1, []).append(c)
    for d, cs in by_document.items():
        pieces = np.diff([starts[d], *cs, starts[d + 1]]).tolist()
        at = ", ".join(str(c - starts[d]) for c in cs)
        why = ""
        if form == "eos" and ids is not None:  # each cut the EOS form makes follows an EOS
            why = f": token {eos_id}, the EOS id, occurs inside it (offsets {', '.join(str(c - 1 - starts[d]) for c in cs)})"
        findings.append(Finding(form, r, "split", cs[0], f"{form}: row {r}'s document {d} (length {due[d]}) is read "
                                                         f"as {len(pieces)} documents {pieces}, cut at offsets {at}{why}"))
    padding = [c for c in extra if c > filled]
    if padding:
        pad, read_as = sum(got) - filled, len(padding) + (filled in got_cuts)
        findings.append(Finding(form, r, "padding", padding[0], f"{form}: row {r}'s {pad} tokens of padding (from "
                                                                f"position {filled}) are read as {read_as} documents"))
    return findings


def check_data_boundaries(batch: Mapping, lengths: Any, *, eos_id: int | None = None, forms: Any = None,
                          ids_key: str = "input_ids") -> DataBoundariesResult:
    """Every form of boundaries in ``batch`` held to ``lengths``, the packer's document lengths in each row.

    ``lengths``: a list of rows, each a list of document lengths (TRL's
    ``seq_lengths``; ``provenance_lengths`` of the document column); a row's
    tokens past their sum are padding. ``eos_id``: read the EOS-derived form
    from ``batch[ids_key]`` too. ``forms``: the forms to check (default: every
    one the batch holds).
    """
    if not isinstance(batch, Mapping):
        raise TensorcadError("batch", f"expected a mapping of the model's inputs, got {type(batch).__name__}")
    if ids_key not in batch:
        raise TensorcadError(f"batch.{ids_key}", f"the batch has no {ids_key!r} (its shape is the rows')")
    ids = _numpy(batch[ids_key])
    if ids.ndim == 0:
        raise TensorcadError(f"batch.{ids_key}", "expected token ids of shape (..., tokens), got one number")
    rows, seq = int(np.prod(ids.shape[:-1])), ids.shape[-1]  # every dimension but the last is rows
    ids = ids.reshape(rows, seq)
    if not isinstance(lengths, (list, tuple)) or len(lengths) != rows:
        raise TensorcadError("lengths", f"expected a list of {rows} rows of document lengths, got {lengths!r:.80}")
    due = []
    for r, row in enumerate(lengths):
        row = [int(n) for n in _numpy(row).ravel().tolist()]
        if any(n < 1 for n in row) or sum(row) > seq:
            raise TensorcadError(f"lengths[{r}]", f"documents of at least one token, at most {seq} in all, got {row}")
        due.append(row)
    present = [f for f in FORMS if (f == "eos" and eos_id is not None) or (f != "eos" and f in batch)]
    if forms is not None:
        unknown = [f for f in forms if f not in FORMS]
        if unknown:
            raise TensorcadError("forms", f"unknown forms {unknown}; the forms are {', '.join(FORMS)}")
        missing = [f for f in forms if f not in present]
        if missing:
            raise TensorcadError("forms", f"the batch holds no {', '.join(missing)}")
        present = list(forms)
    findings: list[Finding] = []
    for form in present:
        try:
            received = _received(batch, form, (rows, seq), eos_id, ids_key)
        except TensorcadError as unreadable:  # a form that is not a packing of whole documents is the finding
            findings.append(Finding(form, -1, "unreadable", -1, f"{form}: {unreadable}"))
            continue
        for r, got in enumerate(row_lengths(received)):
            findings += _row_findings(form, r, due[r], got, ids[r], eos_id)
    return DataBoundariesResult(tuple(present), rows, sum(len(row) for row in due), tuple(findings))


__all__ = ["FORMS", "DataBoundariesResult", "Finding", "check_data_boundaries", "provenance_lengths"]
