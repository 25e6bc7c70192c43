"""Labels within documents: every supervised target is predicted from a position of its own document.

The forward certificates say what the model computes; none looks at what it
is trained on. With the shift done inside the loss, the output at a document's
last token is trained on the label at the next position, the first token of
the next document, unless the collator writes -100 there
(``DataCollatorWithFlattening`` does; hand-written packers often do not). With
labels already shifted, the label at a document's last position is the next
document's first token. Either way a target sits at a document's last output
position, and the loss then trains a document on its neighbour: the loss still
falls, and no test of the forward pass sees it.

The audit reads the batch alone (`step_batch.StepBatch.targets`, in the
convention the loss uses): every supervised target at a document's last
position is a crossing, named by row, document and position with what the
collator must write. Labels that contradict the loss's own shift (labels
already shifted handed to a loss that shifts them again) fail too. In a padded
layout (``cu_seqlens_padded``), an output at padding trained, or a document's last
real token trained on the padding after it, is named too: the loss mask must read
the padded boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .batch import IGNORE_INDEX, StepBatch
from .mtp import check_heads


@dataclass(frozen=True)
class Crossing:
    """The output at ``position``, the last of document ``document`` of row ``row``, has a target."""

    row: int
    document: int
    position: int
    label_position: int  # where that label sits in the batch's labels
    label: int
    shift: str
    next_document: int | None  # the document after it, None where the row ends

    def message(self) -> str:
        if self.shift == "inside":
            return (f"row {self.row}: the label at position {self.label_position} ({self.label}, the first of "
                    f"document {self.next_document}) is predicted from position {self.position}, the last of "
                    f"document {self.document}: the collator must write {IGNORE_INDEX} at every document's first "
                    "label (DataCollatorWithFlattening does)")
        after = (f"document {self.next_document} begins at {self.position + 1}" if self.next_document is not None
                 else "the row ends there")
        return (f"row {self.row}: the label at position {self.position}, the last of document {self.document}, is "
                f"{self.label}, a target past the document's end ({after}): the collator must write "
                f"{IGNORE_INDEX} at every document's last label")

    def to_json(self) -> dict:
        return {"row": self.row, "document": self.document, "position": self.position,
                "labelPosition": self.label_position, "label": self.label, "nextDocument": self.next_document}


@dataclass(frozen=True)
class LabelsResult:
    crossings: tuple[Crossing, ...]  # in row order: the first is the first crossing of the batch
    supervised: int  # targets in the batch
    documents: int  # document pieces
    shift: str
    how: str  # how the shift was known
    conflict: str | None = None  # the labels contradict the loss's shift
    padded: tuple[str, ...] = ()  # targets at or onto a padded layout's padding, each named
    heads: tuple[str, ...] = ()  # multi-token prediction heads trained across a boundary (step.mtp), each named
    depth: int = 0  # the MTP heads held (0: none)

    @property
    def passed(self) -> bool:
        return not self.crossings and self.conflict is None and not self.padded and not self.heads

    def message(self) -> str:
        if self.conflict is not None:
            return self.conflict
        if self.heads:
            more = len(self.heads) - 1
            return self.heads[0] + (f" ({more} more target{'s' if more != 1 else ''} of MTP heads)" if more else "")
        if self.padded:
            more = len(self.padded) - 1
            return self.padded[0] + (f" ({more} more target{'s' if more != 1 else ''} on padding)" if more else "")
        if self.crossings:
            more = len(self.crossings) - 1
            return self.crossings[0].message() + (f" ({more} more crossing{'s' if more != 1 else ''})" if more else "")
        heads = f"; the {self.depth} MTP heads' targets each within its document" if self.depth else ""
        return (f"labels within documents: {self.supervised} targets over {self.documents} documents, each predicted "
                f"from a position of its own document (labels {self.shift}: {self.how}){heads}")

    def to_json(self) -> dict:
        first = self.crossings[0].to_json() if self.crossings else None
        out = {"passed": self.passed, "crossings": len(self.crossings), "first": first,
               "supervised": self.supervised, "documents": self.documents, "shift": self.shift, "how": self.how,
               "conflict": self.conflict, "message": self.message()}
        if self.padded:
            out["padded"] = len(self.padded)
        if self.depth:
            out["depth"], out["heads"] = self.depth, len(self.heads)
        return out


def check_labels(batch: StepBatch, heads: torch.Tensor | None = None) -> LabelsResult:
    """Every supervised target of ``batch`` predicted from a position of its own document; ``heads``
    (depth, B, T): the targets a model's MTP heads are trained on (`step.mtp`), each held the same way."""
    targets = batch.targets.cpu()
    documents = batch.documents.cpu()
    last = torch.ones_like(documents, dtype=torch.bool)  # a document's last position in its row
    last[:, :-1] = documents[:, 1:] != documents[:, :-1]
    crossings = []
    seq = documents.shape[1]
    for row, t in torch.nonzero(last & (targets != IGNORE_INDEX)).tolist():
        nxt = int(documents[row, t + 1]) if t + 1 < seq else None
        where = t + 1 if batch.shift == "inside" else t
        crossings.append(Crossing(row, int(documents[row, t]), t, where, int(batch.labels[row, where]),
                                  batch.shift, nxt))
    return LabelsResult(tuple(crossings), batch.supervised, len(batch.pieces()), batch.shift, batch.how,
                        batch.conflict, _on_padding(batch, targets, documents),
                        () if heads is None else check_heads(batch, heads), 0 if heads is None else heads.shape[0])


def _on_padding(batch: StepBatch, targets: torch.Tensor, documents: torch.Tensor) -> tuple[str, ...]:
    """Targets a padded layout's padding takes part in: an output at padding trained, or trained on padding."""
    if batch.padding is None:
        return ()
    padding = batch.padding.cpu()
    supervised = targets != IGNORE_INDEX
    onto = torch.zeros_like(padding)  # the output at t is trained on the token at t + 1, padding
    onto[:, :-1] = padding[:, 1:] & ~padding[:, :-1]
    found = []
    for row, t in torch.nonzero(supervised & (padding | onto)).tolist():
        d = int(documents[row, t])
        what = (f"the output at position {t}, padding after document {d}, is trained" if padding[row, t] else
                f"the output at position {t}, the last real token of document {d}, is trained on the padding "
                "after it")
        found.append(f"row {row}: {what} (target {int(targets[row, t])}): the labels must read the padded layout "
                     f"(cu_seqlens_padded), {IGNORE_INDEX} at every padding slot and every document's last real "
                     "token")
    return tuple(found)
