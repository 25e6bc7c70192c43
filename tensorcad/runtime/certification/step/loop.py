"""The user's training step: how a batch becomes a loss, and how one document runs by itself.

The loss is made the way people train:

- a Hugging Face model's own loss: ``model(**batch).loss`` with what the
  loop's ``call`` adds (`tensorcad.hf.calls`: ``trainer`` passes
  ``use_cache=False`` as transformers' Trainer does; ``plain`` nothing, the
  config's own ``use_cache``), the batch's ``labels`` (or ``shift_labels``)
  passed as they are, and ``num_items_in_batch`` when the loop accumulates as
  `Trainer` does;
- the model's logits and the user's loss: ``loss(logits, labels)`` (and
  ``num_items_in_batch=``), labels as the batch writes them;
- for a ``model_fn(ids, documents, positions)`` given no loss (a generated
  model, a hand-written one): next-token cross-entropy over the targets the
  batch's convention names, a mean over every supervised token.

A document alone is the model on its tokens only: a Hugging Face model's own
forward (``model(input_ids=ids)``, nothing packed), else ``alone`` or the
model_fn on a one-document row with positions from 0. Its loss is
cross-entropy against the targets it holds: the packed row's targets at its
positions, less its last (which, alone, has nothing after it to predict).

The certificates run the model in train mode (as training does) or eval mode
(eval parity) and leave it as it was; a generated model runs its eager form on
CPU, where FlexAttention has no backward. Dropout would draw different masks in
the packed and the lone runs, so a model that drops out in train mode is
refused, naming the module.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tensorcad.errors import TensorcadError

from ..forward.gradients import modules_of
from ..forward.calls import outputs_of
from .batch import IGNORE_INDEX, StepBatch

# Relative tolerances by dtype. A loss is a mean of cross-entropies each within twice
# the logits' rounding (faithful: float32 1e-5) of the lone run's, so it is held to
# rtol x (1 + |loss|) (measured: gaps under 5e-7 on losses near 4.9). A gradient sums
# many more terms, in two orders, with cancellation in the attention's backward: held
# per parameter to rtol x its norm (measured: under 7e-7 for HF Llama and Qwen2 and a
# generated model, once 7.4e-5 on a first layer's query weights under a loaded CPU).
# The bugs the certificates are for move the loss by 1e-3 and gradients by 1e-2 or more.
LOSS_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}
GRADIENT_RTOL = {torch.float64: 1e-8, torch.float32: 1e-3, torch.bfloat16: 1e-1, torch.float16: 1e-2}


def loss_tolerance(dtype: torch.dtype, magnitude: float, atol: float | None = None,
                   rtol: float | None = None) -> float:
    """What two computations of one loss of size ``magnitude`` may differ by, in ``dtype``."""
    rtol = LOSS_RTOL.get(dtype, 1e-5) if rtol is None else float(rtol)
    return (rtol if atol is None else float(atol)) + rtol * abs(magnitude)


def widened(logits: torch.Tensor) -> torch.Tensor:
    """Logits to take a cross-entropy of: float32 at least, float64 kept (its tolerance is float64's)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """Cross-entropy of each output against its target (IGNORE_INDEX: none): the mean, or the sum over N."""
    flat = widened(logits.reshape(-1, logits.shape[-1]))
    if num_items_in_batch is None:
        return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX)
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum") / num_items_in_batch


@dataclass(frozen=True)
class TrainingStep:
    """A model and how its loop turns a batch into a loss."""

    model: Any  # a transformers PreTrainedModel, or a model_fn(ids, documents, positions)
    loss: Callable[..., Any] | None = None  # (logits, labels[, num_items_in_batch=]) -> loss; None: the default
    alone: Callable[..., Any] | None = None  # (ids, documents, positions) -> one document's outputs
    call: str = "trainer"  # how the loop calls a Hugging Face model (tensorcad.hf.calls)

    @property
    def hf(self) -> bool:
        from tensorcad.hf import is_hf_model

        return is_hf_model(self.model)

    @property
    def own_loss(self) -> bool:
        """The Hugging Face model computes the loss itself (it shifts the labels)."""
        return self.loss is None and self.hf

    def _hf_inputs(self, batch: StepBatch, labels: bool) -> dict[str, Any]:
        inputs = {k: v for k, v in batch.inputs.items() if k != "documents"}
        if not labels:
            inputs = {k: v for k, v in inputs.items() if k not in ("labels", "shift_labels")}
        from tensorcad.hf import call_kwargs

        # The user's call, not a corrected one: with a cache, transformers reads no packing from position_ids.
        return {**call_kwargs(self.model, self.call), **inputs}

    def logits(self, batch: StepBatch) -> torch.Tensor:
        """The packed batch's outputs (B, T, V)."""
        if self.hf:
            return self.model(**self._hf_inputs(batch, labels=False)).logits
        return outputs_of(self.model(batch.ids, batch.documents, batch.positions))

    def loss_and_logits(self, batch: StepBatch, num_items_in_batch: int | None = None) -> tuple[torch.Tensor, Any]:
        """The packed batch's loss as the loop computes it, and the logits it was computed from.

        ``num_items_in_batch``: the Trainer's count of the whole batch's targets, passed on.
        """
        loss, logits, _ = self.packed_parts(batch, num_items_in_batch)
        return loss, logits

    def packed_parts(self, batch: StepBatch, num_items_in_batch: int | None = None) -> tuple[torch.Tensor, Any, Any]:
        """(loss, logits, router): the loss less a router's auxiliary term, which ``router`` holds (`RouterAux`,
        None for a model whose loss adds none): cross-entropy is what the documents alone are compared by."""
        extra = {} if num_items_in_batch is None else {"num_items_in_batch": torch.tensor(num_items_in_batch)}
        if self.own_loss:
            from .router import router_aux

            out = self.model(**self._hf_inputs(batch, labels=True), **extra)
            if getattr(out, "loss", None) is None:
                raise TensorcadError("loss", f"{type(self.model).__name__} returned no loss for the batch's labels")
            router = router_aux(self.model, out)
            loss = out.loss if router is None else out.loss - router.term
            return loss, getattr(out, "logits", None), router
        logits = self.logits(batch)
        if self.loss is not None:
            return self.loss(logits, batch.labels, **extra), logits, None
        return token_cross_entropy(logits, batch.targets, extra.get("num_items_in_batch")), logits, None

    def packed_loss(self, batch: StepBatch, num_items_in_batch: int | None = None) -> torch.Tensor:
        return self.loss_and_logits(batch, num_items_in_batch)[0]

    def alone_logits(self, ids: torch.Tensor, sample: dict[str, Any] | None = None) -> torch.Tensor:
        """One document's outputs (1, L, V), run by itself; ``sample``: a vision-language sample's own inputs
        (its images with it), which a Hugging Face model is given instead of the ids alone."""
        if self.hf:
            return self.model(**(sample or {"input_ids": ids}), use_cache=False).logits
        documents = torch.zeros_like(ids)
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        return outputs_of((self.alone or self.model)(ids, documents, positions))

    def padded_logits(self, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Documents one a row, right-padded (``real``: True on their tokens), as an unpacked loop runs them."""
        return self.padded_parts(ids, real)[0]

    def padded_parts(self, ids: torch.Tensor, real: torch.Tensor,
                     images: dict[str, Any] | None = None) -> tuple[torch.Tensor, Any]:
        """(logits, router) of the documents padded one a row: the router's auxiliary loss transformers pools
        over their tokens, the padding masked (`RouterAux`; None where the model adds none). ``images``: a
        vision-language batch's images and token types, laid out for the padded rows (`padded_images`)."""
        if self.hf:
            from .router import router_aux

            out = self.model(input_ids=ids, attention_mask=real.long(), use_cache=False, **(images or {}))
            return out.logits, router_aux(self.model, out, real)
        documents = (~real).long()  # the padding a document of its own: the model keeps it apart
        from tensorcad.packing import positions_of

        return outputs_of(self.model(ids, documents, positions_of(documents))), None

    def modules(self) -> list[nn.Module]:
        roots = [self.model] if self.hf else modules_of(self.model)
        if self.alone is not None:
            roots += [m for m in modules_of(self.alone) if all(m is not r for r in roots)]
        return roots

    def named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        seen: set[int] = set()
        found = []
        for root in self.modules():
            for name, p in root.named_parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    found.append((name, p))
        if not found:
            raise TensorcadError("model", "no trainable parameters found in the model (itself, .module, .model or "
                                          "its closure): the step has nothing to train")
        return found

    @contextlib.contextmanager
    def mode(self, train: bool) -> Iterator[str]:
        """The model in train (or eval) mode, in a form that has a backward; yields a note of the form."""
        roots = self.modules()
        modes = [(m, m.training) for m in roots]
        form = getattr(self.model, "form", None)
        note = ""
        if form == "flex" and not self.hf and _device(roots).type == "cpu":
            self.model.form = "eager"
            note = "the eager form: FlexAttention has no backward on CPU"
        try:
            for m in roots:
                m.train(train)
            if train:
                _refuse_dropout(roots)
            yield note
        finally:
            for m, was in modes:
                m.train(was)
            if note:
                self.model.form = form


def _device(roots: list[nn.Module]) -> torch.device:
    for root in roots:
        for p in root.parameters():
            return p.device
    return torch.device("cpu")


def _refuse_dropout(roots: list[nn.Module]) -> None:
    for root in roots:
        for name, m in root.named_modules():
            if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
                raise TensorcadError("model", f"{name or type(m).__name__} drops out {m.p:g} of its inputs in train "
                                              "mode: the packed step and the documents alone would draw different "
                                              "masks; set p=0 for the certificate")
        for key, rate in _dropout_rates(getattr(root, "config", None)):
            what = "scores" if key == "attention_dropout" else "values"
            raise TensorcadError("model", f"config.{key} is {rate:g}: the packed step and the documents alone would "
                                          f"drop different {what}; set it to 0 for the certificate")


# A config's rates of the dropouts its forward applies with torch.nn.functional (no module to find): Seed-OSS's
# residual_dropout, GPT-2's resid_pdrop. A classifier's or a summary head's is no part of a causal LM's step.
_DROPOUT_KEYS = ("dropout", "pdrop", "dropout_prob", "dropout_rate")


def _dropout_rates(config: Any) -> list[tuple[str, float]]:
    if config is None:
        return []
    rates = []
    for key in sorted(dir(config)):
        if not key.endswith(_DROPOUT_KEYS) or key.startswith(("_", "classifier", "summary")):
            continue
        try:
            value = getattr(config, key)
        except Exception:  # a property that cannot be read here is no rate
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            rates.append((key, float(value)))
    return rates


def step_of(model: Any, loss: Callable[..., Any] | None = None, alone: Callable[..., Any] | None = None,
            call: str = "trainer") -> TrainingStep:
    """The `TrainingStep` of a model (a Hugging Face model, or a model_fn), the loss and the call its loop uses."""
    from tensorcad.hf import check_call

    check_call(call)
    if loss is not None and not callable(loss):
        raise TensorcadError("loss", f"expected a callable (logits, labels) -> loss, got {type(loss).__name__}")
    if not callable(model):
        raise TensorcadError("model", f"expected a model or a model_fn, got {type(model).__name__}")
    return TrainingStep(model, loss, alone, call)


@dataclass(frozen=True)
class DocumentLosses:
    """Each document piece's token losses, run alone, over one batch or every micro-batch of one."""

    tokens: tuple[torch.Tensor, ...]  # each piece's supervised targets' cross-entropies (1D, maybe empty)
    rows: tuple[int, ...]  # the row of each piece, counted over every micro-batch
    pieces: tuple[tuple[int, int, int, int], ...]  # (row over every micro-batch, document, first, end)
    where: tuple[tuple[int, torch.Tensor], ...]  # (row, the output positions) of each piece's targets

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(int(t.numel()) for t in self.tokens)


def document_losses(step: TrainingStep, batches: list[StepBatch]) -> DocumentLosses:
    """Every document of every batch run alone; its targets' cross-entropies (a graph, when grad is on)."""
    tokens, rows, pieces, where = [], [], [], []
    offset = 0
    for batch in batches:
        targets = batch.targets
        samples = vision_samples(step, batch)
        for row, document, first, end in batch.pieces():
            logits = step.alone_logits(batch.ids[row:row + 1, first:end], samples.get((row, first)))
            if logits.shape[:2] != (1, end - first):
                raise TensorcadError("alone", f"outputs shaped {tuple(logits.shape)} for a document of "
                                              f"{end - first} tokens")
            mine = targets[row, first:end - 1]
            kept = mine != IGNORE_INDEX
            tokens.append(F.cross_entropy(widened(logits[0, :end - first - 1][kept]), mine[kept], reduction="none"))
            rows.append(offset + row)
            pieces.append((offset + row, document, first, end))
            where.append((offset + row, targets_at(first, kept)))
        offset += batch.ids.shape[0]
    return DocumentLosses(tuple(tokens), tuple(rows), tuple(pieces), tuple(where))


def vision_samples(step: TrainingStep, batch: StepBatch) -> dict[tuple[int, int], dict[str, Any]]:
    """(row, first) -> a vision-language sample's own inputs (its tokens, images and grids), for a Hugging Face
    model's batch that carries images or mRoPE positions; empty for any other batch."""
    inputs = batch.inputs
    position_ids = inputs.get("position_ids")
    vision = inputs.get("pixel_values") is not None or (isinstance(position_ids, torch.Tensor)
                                                         and position_ids.dim() == 3)
    if not (step.hf and vision):
        return {}
    if batch.ids.shape[0] != 1:
        raise TensorcadError("batch.input_ids", "a vision-language batch is one packed row (its images in sample "
                                                "order): tensorcad.hf.vision_rows packs one")
    from tensorcad.hf.vision import samples_of

    return {(0, s["first"]): s["inputs"] for s in samples_of(step.model, inputs, batch.documents)}


def padded_images(step: TrainingStep, batch: StepBatch, real: torch.Tensor) -> dict[str, Any]:
    """A vision-language batch's images for its documents padded one a row: the same images in the same order
    (each sample's placeholders now in its own row), the token types padded as the ids are; {} for another batch."""
    if not vision_samples(step, batch):
        return {}
    inputs = batch.inputs
    images = {key: inputs[key] for key in ("pixel_values", "image_grid_thw") if inputs.get(key) is not None}
    if "mm_token_type_ids" in inputs:
        types = torch.zeros(real.shape, dtype=inputs["mm_token_type_ids"].dtype, device=real.device)
        for i, (row, _, first, end) in enumerate(batch.pieces()):
            types[i, :end - first] = inputs["mm_token_type_ids"][row, first:end]
        images["mm_token_type_ids"] = types
    return images


def padded_rows(step: TrainingStep, batch: StepBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, real): every document of ``batch`` one a row, right-padded with the model's pad id, as a loop that
    does not pack runs them; ``real`` is True on their tokens."""
    pieces = batch.pieces()
    longest = max(end - first for _, _, first, end in pieces)
    pad = getattr(getattr(step.model, "config", None), "pad_token_id", None)
    pad = pad if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 0
    ids = torch.full((len(pieces), longest), pad, dtype=batch.ids.dtype, device=batch.ids.device)
    real = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    for i, (row, _, first, end) in enumerate(pieces):
        ids[i, :end - first] = batch.ids[row, first:end]
        real[i, :end - first] = True
    return ids, real


def targets_at(first: int, kept: torch.Tensor) -> torch.Tensor:
    """The output positions, in the row, of a document's targets (``kept`` over its outputs from ``first``)."""
    return first + torch.nonzero(kept.cpu()).flatten()
