"""A training batch as the step certificates read it: tokens, documents, positions, labels, and the shift.

A batch is the dict a training loop hands its model: Hugging Face's keys
(``input_ids``, ``labels`` or ``shift_labels``, ``position_ids``, and
``seq_idx`` or ``cu_seq_lens_q`` where the collator gives them), or a
generated model's (``documents`` beside them). Where documents begin is read
from ``documents``, else ``seq_idx``, else ``cu_seq_lens_q``, else the
restarting ``position_ids`` (what ``DataCollatorWithFlattening`` writes).

Labels come in two conventions, and a label is a crossing in each at a
different place:

- ``inside``: the loss shifts them (transformers' ``ForCausalLMLoss``): the
  output at position t is trained on ``labels[t + 1]``, so the label at a
  document's first token is predicted by the previous document's last;
- ``shifted``: already shifted (``shift_labels``, torchtitan's
  ``tokens[1:]``): the output at t is trained on ``labels[t]``, so the label
  at a document's last token is the next document's first.

Either way `StepBatch.targets` is the target of each output position, and a
target at a document's last position reaches outside it. The convention is
the loss's own (a Hugging Face model's loss shifts), declared, or detected
from the labels (equal to ``input_ids``: inside; to ``input_ids[t + 1]``:
shifted); a contradiction is kept for the labels certificate to name.

A padded layout (Transformer Engine's THD: ``cu_seqlens_padded`` beside the real
``cu_seqlens``, one row) is read from the padded boundaries: each document's padding
belongs to it, after its tokens, and `StepBatch.padding` marks those slots, where
nothing may be trained and no target may point.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch

from tensorcad.errors import TensorcadError, shown

from ..forward.isolation import segments

IGNORE_INDEX = -100  # what a collator writes where there is nothing to predict (PyTorch's ignore_index)
SHIFTS = ("inside", "shifted")
# Keys a model takes that hold one value a token, (B, T): sliced with the batch when it is split.
_FLAT_KEYS = ("input_ids", "labels", "shift_labels", "position_ids", "documents", "attention_mask", "mm_token_type_ids")


@dataclass(frozen=True)
class StepBatch:
    """One packed batch: what the model is called with, where its documents are, what it is trained on."""

    ids: torch.Tensor  # (B, T)
    documents: torch.Tensor  # (B, T), numbered from 0 in each row
    positions: torch.Tensor  # (B, T), restarting at each document
    labels: torch.Tensor  # (B, T), as the batch writes them (IGNORE_INDEX where none)
    shift: str  # "inside" or "shifted"
    inputs: Mapping[str, Any] = field(default_factory=dict)  # the batch as given (a Hugging Face model's kwargs)
    how: str = ""  # how the shift was known: the loss's, declared, or detected
    conflict: str | None = None  # the labels contradict the loss's shift: the labels certificate fails
    padding: torch.Tensor | None = None  # (B, T) bool: the padded layout's padding slots (None: no padding)

    @property
    def targets(self) -> torch.Tensor:
        """(B, T): the token the output at each position is trained to predict; IGNORE_INDEX where none."""
        if self.shift == "shifted":
            return self.labels
        ignore = torch.full_like(self.labels[:, :1], IGNORE_INDEX)
        return torch.cat([self.labels[:, 1:], ignore], dim=1)

    @property
    def supervised(self) -> int:
        return int((self.targets != IGNORE_INDEX).sum())

    def pieces(self) -> list[tuple[int, int, int, int]]:
        """(row, document, first, end) of every document piece, in row order."""
        return segments(self.documents)


# The dtypes a key may hold: labels are cross_entropy's targets (int64 only: int8..int32 and uint8 raised inside
# torch, and uint8 cannot hold -100); ids are an embedding's indices (int32 or int64).
_DTYPES = {"labels": (torch.int64,), "shift_labels": (torch.int64,), "input_ids": (torch.int64, torch.int32)}


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as a tensor, or one line naming ``batch.<name>`` (None, a string, a ragged list)."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TensorcadError(f"batch.{name}", f"expected a tensor of integers, got {shown(value, 60)}")
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise TensorcadError(f"batch.{name}", f"expected a tensor of integers, got {type(value).__name__} "
                                              f"{shown(value, 60)} ({shown(str(error), 80)})") from None


def _tensor(value: Any, name: str) -> torch.Tensor:
    value = _as_tensor(value, name)
    if value.dim() == 1:
        value = value[None]
    wanted = _DTYPES.get(name)
    integers = not (value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool)
    if value.dim() != 2 or not integers:
        raise TensorcadError(f"batch.{name}", f"expected (B, T) integers, got {value.dtype} {tuple(value.shape)}")
    if wanted is not None and value.dtype not in wanted:
        kinds = " or ".join(str(d).removeprefix("torch.") for d in wanted)
        raise TensorcadError(f"batch.{name}", f"expected (B, T) integers of {kinds} (what the model's "
                                              f"{'embedding' if name == 'input_ids' else 'cross-entropy'} takes), "
                                              f"got {value.dtype}")
    return value


def text_positions(value: Any) -> torch.Tensor:
    """A batch's position_ids as (B, T): a vision-language row's 4 rows give their first, the text positions that
    transformers reads packing from (its three mRoPE rows are each sample's rotary index, no boundary)."""
    value = _as_tensor(value, "position_ids")
    if value.dim() == 3:
        if value.shape[0] == 4:
            return _tensor(value[0], "position_ids")
        raise TensorcadError("batch.position_ids", f"{value.shape[0]} rows of positions {tuple(value.shape)}: a "
                                                   "vision-language row packs with 4 (the text positions, then "
                                                   "mRoPE's 3 axes per sample: tensorcad.hf.vision_rows)")
    return _tensor(value, "position_ids")


def _rows(value: Any) -> torch.Tensor:
    """A form's documents (checked where they were made) as (B, T)."""
    value = torch.as_tensor(value)
    return value[None] if value.dim() == 1 else value


def _documents(batch: Mapping[str, Any], shape: torch.Size, device: torch.device) -> torch.Tensor:
    from tensorcad.packing import documents_of_cu_seqlens, documents_of_positions, documents_of_seq_idx

    if "documents" in batch:
        documents = _tensor(batch["documents"], "documents")
    elif "cu_seqlens_padded" in batch:
        documents = _rows(documents_of_cu_seqlens(torch.as_tensor(batch["cu_seqlens_padded"]).cpu(), shape[1],
                                                  shape[0]))
    elif "seq_idx" in batch:
        documents = _rows(documents_of_seq_idx(torch.as_tensor(batch["seq_idx"]).cpu()))
    elif "cu_seq_lens_q" in batch:
        documents = _rows(_cu_documents(batch, "cu_seq_lens_q", shape))
    elif "position_ids" in batch:
        documents = _rows(documents_of_positions(text_positions(batch["position_ids"]).cpu()))
    else:
        raise TensorcadError("batch", "holds no documents, seq_idx, cu_seq_lens_q or position_ids: nothing says "
                                      "where its documents begin")
    if documents.shape != shape:
        raise TensorcadError("batch.documents", f"shape {tuple(documents.shape)} differs from input_ids "
                                                f"{tuple(shape)}")
    return documents.to(device=device, dtype=torch.long)


def documents_in(batch: Mapping[str, Any], shape: torch.Size, device: torch.device) -> torch.Tensor:
    """(B, T) documents of a batch dict, from whichever form it holds (the RL room reads its batches so too)."""
    return _documents(batch, shape, device)


def _cu_documents(batch: Mapping[str, Any], key: str, shape: torch.Size) -> torch.Tensor:
    from tensorcad.packing import documents_of_cu_seqlens

    cu = _as_tensor(batch[key], key).cpu()
    try:
        return documents_of_cu_seqlens(cu, shape[1], shape[0])
    except TensorcadError as error:
        raise TensorcadError(f"batch.{key}", f"{error.path}: {error.message}") from None


def _agreeing_boundaries(batch: Mapping[str, Any], shape: torch.Size) -> None:
    """cu_seq_lens_k says the same documents as cu_seq_lens_q: packed self-attention has one set of documents, and
    a flash kernel reading keys by the one and queries by the other was certified by neither (the certificates
    read cu_seq_lens_q). position_ids may disagree: positions that do not restart are a fault the certificates
    catch, not a batch they cannot read."""
    if "cu_seq_lens_k" not in batch:
        return
    if "cu_seq_lens_q" not in batch:
        raise TensorcadError("batch.cu_seq_lens_k", "given without cu_seq_lens_q")
    _cu_documents(batch, "cu_seq_lens_q", shape)
    given = _as_tensor(batch["cu_seq_lens_k"], "cu_seq_lens_k").cpu()
    wanted = _as_tensor(batch["cu_seq_lens_q"], "cu_seq_lens_q").cpu()
    if given.shape != wanted.shape or given.dtype.is_complex or not bool((given.long() == wanted.long()).all()):
        raise TensorcadError("batch.cu_seq_lens_k", f"{shown(given.tolist(), 60)} differs from cu_seq_lens_q "
                                                    f"{shown(wanted.tolist(), 60)}: packed self-attention has one "
                                                    "set of documents")


def _looks(ids: torch.Tensor, labels: torch.Tensor) -> set[str]:
    """The conventions the labels are consistent with: equal to the ids (inside), or to the next ids (shifted)."""
    supervised = labels != IGNORE_INDEX
    found = set()
    if bool((labels[supervised] == ids[supervised]).all()):
        found.add("inside")
    ahead = supervised[:, :-1]
    if not bool(supervised[:, -1].any()) and bool((labels[:, :-1][ahead] == ids[:, 1:][ahead]).all()):
        found.add("shifted")
    return found


_LOOKS = {"inside": "labels equal input_ids at every supervised position (the loss shifts them)",
          "shifted": "labels[t] equals input_ids[t + 1] at every supervised position (already shifted)"}


def _convention(ids, labels, *, declared: str | None, shift_labels: bool, loss_shifts: bool) -> tuple[str, str, str | None]:
    """(shift, how it is known, a contradiction or None)."""
    if declared is not None and declared not in SHIFTS:
        raise TensorcadError("shift", f"unknown shift {declared!r} (shifts: {', '.join(SHIFTS)})")
    looks = _looks(ids, labels)
    if shift_labels:
        conflict = None if declared != "inside" else ("declared shift='inside', but the batch holds shift_labels, "
                                                      "which the loss reads as already shifted")
        return "shifted", "the batch's shift_labels (already shifted)", conflict
    if loss_shifts:
        how = "the model's own loss shifts the labels (transformers' ForCausalLMLoss)"
        if declared == "shifted":
            return "inside", how, ("declared already shifted, but the model's own loss shifts them again: pass "
                                   "them as shift_labels")
        if looks == {"shifted"}:
            return "inside", how, (f"the {_LOOKS['shifted']}, but the model's own loss shifts them again, so every "
                                   "target is two tokens ahead: pass labels equal to input_ids, or shift_labels")
        return "inside", how, None
    if declared is not None:
        other = "shifted" if declared == "inside" else "inside"
        conflict = None if looks != {other} else f"declared shift={declared!r}, but the {_LOOKS[other]}"
        return declared, f"declared shift={declared!r}", conflict
    if len(looks) == 1:
        (shift,) = looks
        return shift, f"detected: {_LOOKS[shift]}", None
    why = "both" if looks else "neither"
    raise TensorcadError("shift", f"the labels fit {why} of labels == input_ids and labels[t] == input_ids[t + 1]: "
                                  "declare shift='inside' (the loss shifts them) or shift='shifted'")


def read_batch(batch: Mapping[str, Any], *, shift: str | None = None, loss_shifts: bool = False,
               vocab: int | None = None) -> StepBatch:
    """The batch dict as a `StepBatch`; ``loss_shifts``: the loss shifts labels itself (a Hugging Face model's).

    ``vocab``: the model's vocabulary, when known: labels must lie in it (or be -100), never only at the loss.
    """
    from .limits import check_ids, check_labels

    if isinstance(batch, StepBatch):
        return batch
    if not isinstance(batch, Mapping):
        raise TensorcadError("batch", f"expected a dict of tensors (input_ids, labels, ...), got {type(batch).__name__}")
    if "input_ids" not in batch:
        raise TensorcadError("batch.input_ids", "the batch holds no input_ids")
    ids = _tensor(batch["input_ids"], "input_ids")
    key = "shift_labels" if "shift_labels" in batch else "labels"
    if key not in batch:
        raise TensorcadError("batch.labels", "the batch holds no labels (nor shift_labels): nothing is trained")
    labels = _tensor(batch[key], key).to(ids.device)
    if labels.shape != ids.shape:
        raise TensorcadError(f"batch.{key}", f"shape {tuple(labels.shape)} differs from input_ids {tuple(ids.shape)}")
    check_ids(ids, None)
    check_labels(labels, key, vocab, IGNORE_INDEX)
    if not bool((labels != IGNORE_INDEX).any()):
        raise TensorcadError(f"batch.{key}", f"every label is {IGNORE_INDEX}: nothing is trained")
    documents = _documents(batch, ids.shape, ids.device)
    _agreeing_boundaries(batch, ids.shape)
    if bool((documents[:, 1:] < documents[:, :-1]).any()):
        raise TensorcadError("batch.documents", "document ids must never fall along a row")
    if "position_ids" in batch:
        positions = text_positions(batch["position_ids"]).to(ids.device)
    else:
        from tensorcad.packing import positions_of

        positions = positions_of(documents)
    shift, how, conflict = _convention(ids, labels, declared=shift, shift_labels=key == "shift_labels",
                                       loss_shifts=loss_shifts)
    return StepBatch(ids, documents, positions, labels, shift, dict(batch), how, conflict, _padding(batch, ids.shape))


def _padding(batch: Mapping[str, Any], shape: torch.Size) -> torch.Tensor | None:
    """The padding slots of a padded layout (``cu_seqlens`` beside ``cu_seqlens_padded``), as (B, T) bools."""
    if "cu_seqlens_padded" not in batch:
        return None
    from tensorcad.packing import padded_layout_of

    if "cu_seqlens" not in batch:
        raise TensorcadError("batch.cu_seqlens", "cu_seqlens_padded needs cu_seqlens beside it: the real lengths")
    layout = padded_layout_of(torch.as_tensor(batch["cu_seqlens"]).cpu(),
                              torch.as_tensor(batch["cu_seqlens_padded"]).cpu())
    if layout.numel() != shape[0] * shape[1]:
        raise TensorcadError("batch.cu_seqlens_padded", f"lays out {layout.numel()} slots, the batch holds "
                                                        f"{shape[0]} x {shape[1]}")
    return (layout < 0).reshape(shape)


# --- micro-batches ---------------------------------------------------------------------------


def _cut(batch: StepBatch, rows: slice, first: int, end: int, images: Any = None) -> StepBatch:
    """Rows ``rows``, positions ``first:end`` of the batch, as a batch of its own (documents from 0 again).

    ``images(first, end)``: a vision-language row's images of the samples in the cut (their pixel_values and
    image_grid_thw), which replace the batch's; its 4-row position_ids are cut along the row."""
    from tensorcad.packing import flash_kwargs_of, seq_idx_of

    documents = batch.documents[rows, first:end]
    documents = documents - documents[:, :1]
    inputs = {}
    for key, value in batch.inputs.items():
        if key == "documents":
            inputs[key] = documents
        elif key in _FLAT_KEYS and isinstance(value, torch.Tensor) and value.shape == batch.ids.shape:
            inputs[key] = value[rows, first:end]
        elif (key == "attention_mask" and isinstance(value, torch.Tensor) and value.dim() == 4
              and value.shape[0] == batch.ids.shape[0] and value.shape[-2:] == (batch.ids.shape[1],) * 2):
            inputs[key] = value[rows, :, first:end, first:end]  # a 4D mask: its queries and keys cut alike
        elif key == "position_ids" and isinstance(value, torch.Tensor) and value.dim() == 3:
            inputs[key] = value[:, rows, first:end]  # each of a vision-language row's 4 rows of positions
        elif key == "seq_idx":
            inputs[key] = seq_idx_of(documents.cpu()).to(torch.as_tensor(value).device)
        elif key.startswith(("cu_seq_lens_", "max_length_")):
            made = flash_kwargs_of(documents.cpu())[key]  # where the batch's own were
            inputs[key] = made.to(value.device) if isinstance(value, torch.Tensor) else made
        else:
            inputs[key] = value
    if images is not None:
        inputs = {k: v for k, v in inputs.items() if k not in ("pixel_values", "image_grid_thw")}
        inputs.update(images(first, end))
    cut = lambda t: t[rows, first:end]  # noqa: E731
    padding = None if batch.padding is None else cut(batch.padding)
    if padding is not None:  # the cut's own boundaries: every document's real tokens, then its padding
        from tensorcad.packing import cu_seqlens_of

        real = torch.where(padding, torch.full_like(documents, -1), documents)
        kept = real[real >= 0]
        inputs["cu_seqlens"] = cu_seqlens_of(kept[None].cpu()) if len(kept) else torch.zeros(1, dtype=torch.int32)
        inputs["cu_seqlens_padded"] = cu_seqlens_of(documents.cpu())
    return replace(batch, ids=cut(batch.ids), documents=documents, positions=cut(batch.positions),
                   labels=cut(batch.labels), inputs=inputs, padding=padding)


def split_batch(batch: StepBatch, parts: int, images: Any = None) -> list[StepBatch]:
    """``parts`` micro-batches: whole rows when there are that many, else a row cut between whole documents.

    Rows go to micro-batches in order, as a data loader deals them. A batch of
    fewer rows (a collator's one flattened row) is cut at document boundaries
    into runs of about equal tokens, each a row of its own (``images``: `_cut`'s).
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 2:
        raise TensorcadError("micro_batches", f"expected at least 2 micro-batches, got {parts!r}")
    rows, seq = batch.ids.shape
    if rows >= parts:
        bounds = [round(i * rows / parts) for i in range(parts + 1)]
        return [_cut(batch, slice(a, b), 0, seq) for a, b in zip(bounds, bounds[1:])]
    if rows != 1:
        raise TensorcadError("micro_batches", f"{rows} rows cannot be dealt into {parts} micro-batches")
    starts = [first for _, _, first, _ in batch.pieces()]
    if len(starts) < parts:
        raise TensorcadError("micro_batches", f"one row of {len(starts)} documents cannot be cut into {parts} "
                                              "micro-batches of whole documents")
    cuts = [0]
    for i in range(1, parts):
        wanted = i * seq / parts
        later = [s for s in starts if s > cuts[-1] and len(starts) - starts.index(s) >= parts - i]
        cuts.append(min(later, key=lambda s: (abs(s - wanted), s)))
    cuts.append(seq)
    return [_cut(batch, slice(0, 1), a, b, images) for a, b in zip(cuts, cuts[1:])]
