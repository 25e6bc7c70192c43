"""An RL batch as the rl certificates read it: its sequences, the tokens its loss counts, and its parts.

A batch is the dict an RL loop holds: packed rows (``position_ids`` that
restart, ``documents``, ``seq_idx`` or ``cu_seq_lens_q`` say where each
sequence begins; the step room reads them) or padded rows (one sequence a row:
``attention_mask`` or the loss mask ends it). The tokens the loss counts are
its loss mask: the first of ``loss_mask``, ``response_mask`` (verl),
``completion_mask`` (TRL), ``action_mask`` (OpenRLHF), ``attention_mask``; every
token when there is none. A sequence without a loss token (a padding run) is
no sequence of the loss.

`deal` cuts the batch into ``ranks x micro_batches`` parts as a loader deals
it: whole rows in order, rank r taking parts r*m..r*m+m-1; one packed row is cut
between whole sequences. Each part is trimmed to its own longest row (a
collator pads a micro-batch to its own longest): a normaliser read off a
part's width sees the width that part really has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from tensorcad.errors import TensorcadError

from ..forward.isolation import segments
from ..step.batch import documents_in

MASK_KEYS = ("loss_mask", "response_mask", "completion_mask", "action_mask", "attention_mask")
_FORMS = ("documents", "seq_idx", "cu_seq_lens_q", "position_ids")


@dataclass(frozen=True)
class Piece:
    """One sequence of the batch: where it lies and how many loss tokens it holds."""

    row: int
    document: int  # its number in its row
    first: int
    end: int
    count: int  # loss tokens


@dataclass(frozen=True)
class RLBatch:
    inputs: Mapping[str, Any]  # the batch as given
    documents: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) bool: the tokens the loss counts
    mask_key: str | None
    pieces: tuple[Piece, ...]  # every sequence, padding runs included (count 0)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.documents.shape)

    @property
    def sequences(self) -> tuple[Piece, ...]:
        """The sequences of the loss: those with a loss token."""
        return tuple(p for p in self.pieces if p.count)


@dataclass(frozen=True)
class Part:
    """One micro-batch of one rank: its rows and columns of the batch, its inputs cut and trimmed."""

    rank: int
    micro_batch: int
    rows: slice
    first: int
    end: int  # columns first..end of the batch (end: after trimming to its longest row)
    inputs: dict
    sequences: tuple[int, ...]  # indices into the batch's sequences

    @property
    def width(self) -> int:
        return self.end - self.first

    def name(self, ranks: int) -> str:
        return f"micro-batch {self.micro_batch}" + (f" of rank {self.rank}" if ranks > 1 else "")


def _grid(value: Any, key: str) -> torch.Tensor:
    value = torch.as_tensor(value)
    if value.dim() == 1:
        value = value[None]
    if value.dim() != 2:
        raise TensorcadError(f"batch.{key}", f"expected (B, T), got shape {tuple(value.shape)}")
    return value


def read_rl_batch(batch: Mapping[str, Any]) -> RLBatch:
    """The batch dict as an `RLBatch` (bad input: a TensorcadError naming the key)."""
    if isinstance(batch, RLBatch):
        return batch
    if not isinstance(batch, Mapping):
        raise TensorcadError("batch", f"expected a dict of tensors, got {type(batch).__name__}")
    mask_key = next((k for k in MASK_KEYS if k in batch), None)
    shape_key = next((k for k in ("input_ids", mask_key) + _FORMS if k and k in batch), None)
    if shape_key is None:
        raise TensorcadError("batch", "holds no input_ids, loss mask or position_ids: nothing says its shape")
    shape = _grid(batch[shape_key], shape_key).shape
    if mask_key is not None:
        mask = _grid(batch[mask_key], mask_key)
        if mask.shape != shape:
            raise TensorcadError(f"batch.{mask_key}", f"shape {tuple(mask.shape)} differs from {shape_key} "
                                                      f"{tuple(shape)}")
        mask = mask.bool().cpu()
    else:
        mask = torch.ones(shape, dtype=torch.bool)
    if any(k in batch for k in _FORMS):
        documents = documents_in(batch, shape, torch.device("cpu"))
    else:  # padded rows: one sequence a row
        documents = torch.zeros(shape, dtype=torch.long)
    pieces = tuple(Piece(row, doc, first, end, int(mask[row, first:end].sum()))
                   for row, doc, first, end in segments(documents))
    if not any(p.count for p in pieces):
        raise TensorcadError(f"batch.{mask_key or 'input_ids'}", "no token is a loss token")
    return RLBatch(dict(batch), documents, mask, mask_key, pieces)


def _cut(batch: RLBatch, rows: slice, first: int, end: int) -> tuple[dict, int]:
    """The inputs of rows ``rows``, columns ``first:end``, trimmed to the last loss token: (inputs, end)."""
    live = batch.mask[rows, first:end].any(dim=0).nonzero()
    end = first + (int(live[-1]) + 1 if len(live) else 1)
    B, T = batch.shape
    out = {}
    for key, value in batch.inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (B, T):
            cut = value[rows, first:end]
            if key in ("documents", "seq_idx"):
                cut = cut - cut[:, :1]
            out[key] = cut
        elif isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == B and B > 1:
            out[key] = value[rows]  # one value a row (a padded batch's advantages)
        elif key.startswith(("cu_seq_lens_", "max_length_")):
            from tensorcad.packing import flash_kwargs_of

            made = flash_kwargs_of(batch.documents[rows, first:end] - batch.documents[rows, first:first + 1])[key]
            out[key] = made.to(value.device) if isinstance(value, torch.Tensor) else made
        else:
            out[key] = value
    return out, end


def deal(batch: RLBatch, ranks: int = 1, micro_batches: int = 1) -> list[Part]:
    """``ranks x micro_batches`` parts, in order: whole rows, or one packed row cut between whole sequences."""
    for name, value in (("ranks", ranks), ("micro_batches", micro_batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TensorcadError(name, f"expected a positive integer, got {value!r}")
    parts = ranks * micro_batches
    B, T = batch.shape
    if B >= parts:
        bounds = [round(i * B / parts) for i in range(parts + 1)]
        spans = [(slice(a, b), 0, T) for a, b in zip(bounds, bounds[1:])]
    elif B == 1:
        starts = [p.first for p in batch.pieces]
        if len(starts) < parts:
            raise TensorcadError("micro_batches", f"one row of {len(starts)} sequences cannot be cut into {parts} "
                                                  "parts of whole sequences")
        cuts = [0]
        for i in range(1, parts):
            later = [s for s in starts if s > cuts[-1] and len(starts) - starts.index(s) >= parts - i]
            cuts.append(min(later, key=lambda s: (abs(s - i * T / parts), s)))
        spans = [(slice(0, 1), a, b) for a, b in zip(cuts, cuts[1:] + [T])]
    else:
        raise TensorcadError("micro_batches", f"{B} rows cannot be dealt into {ranks} rank(s) x {micro_batches} "
                                              "micro-batch(es)")
    index = {(p.row, p.first): i for i, p in enumerate(batch.sequences)}
    out = []
    for k, (rows, first, end) in enumerate(spans):
        inputs, trimmed = _cut(batch, rows, first, end)
        mine = tuple(i for (row, start), i in index.items() if rows.start <= row < rows.stop and first <= start < end)
        out.append(Part(k // micro_batches, k % micro_batches, rows, first, trimmed, inputs, mine))
    return out
