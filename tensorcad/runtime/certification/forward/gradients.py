"""Gradient isolation: the loss on one document has exactly zero gradient on every other document.

A forward pass can keep documents apart while its backward mixes them: a
custom ``autograd.Function`` whose backward is written by hand, a fused
kernel's backward with a bug of its own. Training then leaks even though every
forward check passes. Here the model runs once in train mode with the output of
its token embedding (the module that reads ``ids``) made a leaf that keeps its
gradient; for each document (or a seeded sample), a loss on that document's
outputs alone is taken back through the same graph, and the gradient on every
other document's embeddings must be exactly zero: a masked score contributes an
exact zero in the backward as in the forward.

The loss is the document's outputs weighted by fixed random numbers (seeded),
so no symmetry of the outputs can cancel a gradient. A document whose own
embeddings get no gradient at all fails too (the check would pass vacuously).
On CPU FlexAttention has no backward: a model with a ``form`` switch (a
generated model) is checked in its eager form there, and the result says so.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from tensorcad.errors import TensorcadError

from .isolation import _check_inputs, pick, segments
from .calls import run_model


@dataclass(frozen=True)
class GradientLeak:
    """The loss on document ``document`` of row ``row`` has gradient on ``leaked_document`` of ``leaked_row``."""

    row: int
    document: int
    leaked_row: int
    leaked_document: int
    largest: float  # the largest absolute gradient on the other document's embeddings
    first_position: int

    def message(self) -> str:
        where = "the same row" if self.leaked_row == self.row else f"row {self.leaked_row}"
        return (f"the loss on document {self.document} of row {self.row} has gradient up to "
                f"{self.largest:.3g} on the embeddings of document {self.leaked_document} of {where}, "
                f"first at token {self.first_position} of the row")

    def to_json(self) -> dict:
        return {"row": self.row, "document": self.document, "leakedRow": self.leaked_row,
                "leakedDocument": self.leaked_document, "largest": self.largest,
                "firstPosition": self.first_position}


@dataclass(frozen=True)
class GradientResult:
    leaks: tuple[GradientLeak, ...]
    losses: int  # documents whose loss was taken back (one backward each)
    documents: int
    still: tuple[tuple[int, int], ...]  # (row, document) whose own embeddings got no gradient
    embedding: str  # the module whose output was held as the leaf
    note: str = ""  # e.g. which form was checked and why
    backwards: int = 0  # backward passes through the model (after its one forward)
    method: str = "one backward a document"  # how the losses were taken back (`weighted_gradients`)

    @property
    def passed(self) -> bool:
        return not self.leaks and not self.still and self.losses > 0

    def worst(self) -> GradientLeak | None:
        return max(self.leaks, key=lambda leak: (leak.largest != leak.largest, leak.largest), default=None)

    def message(self) -> str:
        note = f" ({self.note})" if self.note else ""
        if self.losses == 0:
            return "no document's loss was taken back" + note
        worst = self.worst()
        if worst is not None:
            more = len(self.leaks) - 1
            return worst.message() + (f" ({more} more leak{'s' if more != 1 else ''})" if more else "") + note
        if self.still:
            row, document = self.still[0]
            return (f"the loss on document {document} of row {row} has no gradient on its own embeddings "
                    f"({self.embedding}): the check would pass vacuously" + note)
        return (f"gradients isolated: {self.losses} documents' losses each exactly zero on every other "
                f"document's embeddings ({self.embedding}){note}")

    def to_json(self) -> dict:
        worst = self.worst()
        return {"passed": self.passed, "losses": self.losses, "documents": self.documents,
                "leaks": len(self.leaks), "embedding": self.embedding, "note": self.note,
                "backwards": self.backwards, "method": self.method,
                "worst": worst.to_json() if worst else None, "message": self.message()}


def modules_of(model_fn: Any) -> list[nn.Module]:
    """The nn.Modules a model_fn runs: itself, what it wraps (``module``, ``model``), what its closure
    holds and the globals its code names (a test's wrapper around a model defined beside it)."""
    found: list[nn.Module] = []

    def add(value: Any) -> None:
        if isinstance(value, nn.Module) and all(value is not m for m in found):
            found.append(value)

    add(model_fn)
    for name in ("module", "model", "__self__", "__wrapped__"):
        add(getattr(model_fn, name, None))
    try:
        names = inspect.getclosurevars(model_fn)  # what the function's code reads from its closure and globals
    except TypeError:  # not a Python function (a module, a callable object)
        return found
    for value in (*names.nonlocals.values(), *names.globals.values()):
        add(value)
    return found


class _EmbeddingLeaf:
    """Holds the output of the embedding that reads ``ids`` as a leaf tensor that keeps its gradient."""

    def __init__(self, roots: list[nn.Module], ids: torch.Tensor, embedding: nn.Module | None):
        self.ids = ids
        self.leaf: torch.Tensor | None = None
        self.name = ""
        if embedding is not None:
            candidates = [("embedding", embedding)]
        else:
            candidates = [(n, m) for root in roots for n, m in root.named_modules() if isinstance(m, nn.Embedding)]
        self.handles = [m.register_forward_hook(self._hook(name)) for name, m in candidates]
        self.explicit = embedding is not None

    def _hook(self, name: str):
        def hook(module, args, output):
            if self.leaf is not None or not isinstance(output, torch.Tensor):
                return None
            if not self.explicit and not (args and self.reads_ids(args[0])):
                return None  # an embedding of something else (learned positions)
            self.leaf = output.detach().requires_grad_(True)
            self.name = name or type(module).__name__
            return self.leaf

        return hook

    def reads_ids(self, tensor: Any) -> bool:
        """Whether an embedding's input is the batch's ids: as they are, or flattened to one row (varlen
        attention takes the batch as one row of documents; position i of it is row i // T, column i % T)."""
        return (isinstance(tensor, torch.Tensor) and tuple(tensor.shape) in (tuple(self.ids.shape), (1, self.ids.numel()))
                and torch.equal(tensor.reshape(self.ids.shape), self.ids))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@contextmanager
def held_embeddings(model_fn: Any, ids: torch.Tensor, embedding: nn.Module | None):
    """(the embedding leaf, a note) with the model in train mode (the eager form of a flex model on CPU),
    every module's mode, the form and the hooks restored after."""
    roots = modules_of(model_fn)
    if embedding is None and not roots:
        raise TensorcadError("model_fn", "no nn.Module found in model_fn (itself, .module, .model or its "
                                         "closure): pass embedding= the module whose output is the input embeddings")
    note = ""
    original_form = getattr(model_fn, "form", None)
    if original_form == "flex" and ids.device.type == "cpu":
        model_fn.form = "eager"
        note = "the eager form: FlexAttention has no backward on CPU"
    modes = [(m, m.training) for m in roots]
    for m, _ in modes:
        m.train()
    leaf = _EmbeddingLeaf(roots, ids, embedding)
    try:
        yield leaf, note
    finally:
        leaf.remove()
        for m, mode in modes:
            m.train(mode)
        if note:
            model_fn.form = original_form


def _train_outputs(model_fn, ids, documents, positions, leaf: _EmbeddingLeaf) -> torch.Tensor:
    """The model's outputs in the forward that makes ``leaf``; refused in one line when no embedding read ids."""
    out = run_model(model_fn, (ids, documents, positions))
    if leaf.leaf is None:
        raise TensorcadError("embedding", "no embedding module read the ids in the forward pass: pass "
                                          "embedding= the module whose output is the input embeddings")
    if out.shape[:2] != ids.shape:
        raise TensorcadError("model_fn", f"outputs shaped {tuple(out.shape)} do not start with "
                                         f"(B, T) = {tuple(ids.shape)}")
    return out


def check_gradient_isolation(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    embedding: nn.Module | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> GradientResult:
    """One forward in train mode, one backward per document: no gradient may cross a document."""
    _check_inputs(ids, documents, positions, vocab=2)
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    leaks: list[GradientLeak] = []
    still: list[tuple[int, int]] = []
    with held_embeddings(model_fn, ids, embedding) as (leaf, note):
        with torch.enable_grad():
            out = _train_outputs(model_fn, ids, documents, positions, leaf)
            generator = torch.Generator().manual_seed(seed)
            weights = torch.randn(out.shape, generator=generator, dtype=torch.float32).to(out.device, out.dtype)
            doc_of = documents.cpu()
            for n, index in enumerate(chosen):
                row, document, first, end = pieces[index]
                loss = (out[row, first:end] * weights[row, first:end]).sum()
                (grad,) = torch.autograd.grad(loss, leaf.leaf, retain_graph=n < len(chosen) - 1,
                                              allow_unused=True)
                if grad is None:
                    still.append((row, document))
                    continue
                touched = (grad != 0).reshape(*ids.shape, -1).any(dim=-1).cpu()  # NaN != 0 counts
                inside = torch.zeros(ids.shape, dtype=torch.bool)
                inside[row, first:end] = True
                if not bool(touched[inside].any()):
                    still.append((row, document))
                outside = touched & ~inside
                if bool(outside.any()):
                    size = grad.abs().reshape(*ids.shape, -1).amax(dim=-1).cpu()
                    leaks.extend(_leaks(outside, size, doc_of, row, document))
    return GradientResult(tuple(leaks), len(chosen), len(pieces), tuple(still), leaf.name, note, len(chosen))


def _leaks(outside, size, doc_of, row, document) -> list[GradientLeak]:
    found = []
    for leaked_row in torch.nonzero(outside.any(dim=1)).flatten().tolist():
        where = torch.nonzero(outside[leaked_row]).flatten()
        docs = doc_of[leaked_row, where]
        for leaked in torch.unique(docs).tolist():
            at = where[docs == leaked]
            largest = float(size[leaked_row, at].max())
            found.append(GradientLeak(row, document, leaked_row, int(leaked), largest, int(at[0])))
    return found
