"""The subject of a user's own model: a model_fn, its batch and the settings, as the certificates read it.

A design's `Subject` builds the generated model; a user's model arrives built
(a factory named ``"pkg.module:factory"``, imported here by name so a child
process can make it again). `ModelSubject` answers what the certificates ask
of either: ``model()``, ``batch``, ``vocab``, ``settings`` and ``alone`` (how
a document runs alone; None: the model itself on a one-document row).

The batch is drawn by `tensorcad.packing.draw` at the settings' seq, pack and
spread (ids uniform over the model's vocabulary, seeded), or is the user's, or
comes from the user's collator: each row's documents handed to it as examples
``{"input_ids": [...]}`` (Hugging Face's collator convention), and the
documents read back from the ``position_ids`` it returns (and its ``labels``,
which the training step's certificates audit).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building.settings import Settings
from tensorcad.runtime.building.subject import drawn_batch


def import_factory(name: str, path: str = "tensorcad.model") -> Callable[..., Any]:
    """The callable ``"pkg.module:factory"`` names (``pkg.module:Class.method`` too)."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise TensorcadError(path, f"expected 'pkg.module:factory', got {name!r}")
    module_name, attr = name.split(":")
    try:
        value: Any = _imported(module_name)
    except ImportError as error:
        raise TensorcadError(path, f"cannot import {module_name!r} ({error})") from None
    for part in attr.split("."):
        if not hasattr(value, part):
            raise TensorcadError(path, f"{module_name!r} has no {attr!r}")
        value = getattr(value, part)
    if not callable(value):
        raise TensorcadError(path, f"{name!r} is not callable")
    return value


def _imported(module_name: str) -> Any:
    """The module, imported as pytest imports a project's own: from the current folder too (as ``python -m``)."""
    import os
    import sys

    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        here = os.getcwd()
        top = module_name.split(".")[0]
        if error.name != top or here in sys.path or "" in sys.path:
            raise
    sys.path.insert(0, here)  # kept: a child process (pytest's, MCP's) imports the factory again by name
    return importlib.import_module(module_name)


def vocab_of_model(model_fn: Any) -> int | None:
    """The model's vocabulary, from its config (``vocab_size`` or ``vocab``) or its own attribute."""
    for holder in (model_fn, getattr(model_fn, "model", None), getattr(model_fn, "module", None)):
        if holder is None:
            continue
        for source in (getattr(holder, "config", None), holder):
            for name in ("vocab_size", "vocab"):
                value = getattr(source, name, None)
                if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                    return value
    return _embedding_rows(model_fn)


def _embedding_rows(model_fn: Any) -> int | None:
    """A hand-written model's vocabulary: the rows of its first token embedding (``nn.Embedding``), the table
    its ids index; a collected model needed an undocumented ``.vocab`` where it had one (issue 42)."""
    modules = getattr(model_fn, "modules", None)
    if not callable(modules):
        return None
    import torch

    for module in modules():
        if isinstance(module, torch.nn.Embedding) and module.num_embeddings > 1:
            return int(module.num_embeddings)
    return None


def _collated_rows(collator: Callable[..., Any], batch: tuple[Any, Any, Any]) -> list[Any]:
    """What ``collator`` returns for each row's documents, handed to it as examples."""
    from ..forward.isolation import segments

    ids, documents, _ = batch
    pieces = segments(documents)
    return [collator([{"input_ids": ids[row, first:end].tolist()} for r, _, first, end in pieces if r == row])
            for row in range(ids.shape[0])]


def collated_batch(collator: Callable[..., Any], batch: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """The batch's documents handed to ``collator`` row by row as examples; what it packs, read back."""
    import torch

    rows_ids, rows_pos = [], []
    for out in _collated_rows(collator, batch):
        try:
            row_ids, row_pos = out["input_ids"], out["position_ids"]
        except (KeyError, TypeError):
            raise TensorcadError("tensorcad.collator", "the collator's batch holds no input_ids and position_ids "
                                 "(DataCollatorWithFlattening's keys)") from None
        rows_ids.append(torch.as_tensor(row_ids).reshape(-1))
        rows_pos.append(torch.as_tensor(row_pos).reshape(-1))
    if len({t.shape[0] for t in rows_ids}) != 1:
        raise TensorcadError("tensorcad.collator", "the collator packed rows of different lengths")
    ids, positions = torch.stack(rows_ids).long(), torch.stack(rows_pos).long()
    # A document begins wherever the position restarts at 0 (the collator's own convention).
    documents = torch.cumsum((positions == 0).long(), dim=1) - 1
    return ids, documents.clamp(min=0), positions


def collated_labels(collator: Callable[..., Any], batch: tuple[Any, Any, Any]) -> Any:
    """The labels ``collator`` writes for the batch's rows (B, T), or None where it writes none."""
    import torch

    outs = _collated_rows(collator, batch)
    if not all(isinstance(out, Mapping) and "labels" in out for out in outs):
        return None
    return torch.stack([torch.as_tensor(out["labels"]).reshape(-1) for out in outs]).long()


@dataclass
class ModelSubject:
    """A user's model under check: what the certificates read (as they read a design's `Subject`)."""

    model_fn: Any
    settings: Settings = field(default_factory=Settings)
    given_batch: tuple[Any, Any, Any] | None = None  # the user's own batch; None: drawn (or collated)
    collator: Callable[..., Any] | None = None
    alone: Callable[..., Any] | None = None  # how a document runs alone; None: model_fn on one document
    name: str = "model"
    design: Any = None  # none: a user's model has no design
    verdicts: dict[str, bool] = field(default_factory=dict)  # check -> passed, as they ran (the causes read them)
    call: str = "trainer"  # how the user's loop calls a Hugging Face model (tensorcad.hf.calls)

    @property
    def call_line(self) -> str:
        """Which call the certificates ran, as every report names it."""
        from tensorcad.hf import call_line, is_hf_model

        model = getattr(self.model_fn, "model", None)
        if is_hf_model(model):
            return call_line(model, self.call)
        return "the model_fn as given: model_fn(ids, documents, positions)"

    def model(self, form: str | None = None) -> Any:
        if form is not None and hasattr(self.model_fn, "form"):
            self.model_fn.form = form
        return self.model_fn

    @functools.cached_property
    def vocab(self) -> int:
        vocab = vocab_of_model(self.model_fn)
        if vocab is None and self.given_batch is not None:
            vocab = max(2, int(self.given_batch[0].max()) + 1)
        if vocab is None:
            raise TensorcadError(self.name, "the model names no vocabulary (config.vocab_size, .vocab or an "
                                            "nn.Embedding): give it one, or the batch (tensorcad_batch)")
        return vocab

    @functools.cached_property
    def batch(self) -> tuple[Any, Any, Any]:
        if self.given_batch is not None:
            return tuple(self.given_batch)
        drawn = drawn_batch(self.settings, self.vocab)
        return collated_batch(self.collator, drawn) if self.collator is not None else drawn

    @functools.cached_property
    def labels(self) -> Any:
        """The labels the user's collator writes for the batch; None without one (or where it writes none)."""
        if self.collator is None or self.given_batch is not None:
            return None
        return collated_labels(self.collator, drawn_batch(self.settings, self.vocab))
