"""The context-parallel shard plan certificate: every token on one rank, nothing lost, labels shifted first.

Context parallelism with packed documents fails silently where no balance
figure looks: a document rounded down to a multiple of 2·cp loses its last
tokens (Transformer Engine), ``cu_seqlens`` left unpadded after padding put
boundaries where the tokens are not (Megatron), labels shifted after the split
are jumbled at every chunk's edge (BioNeMo), a token held twice is a key
counted twice. A *plan* says how a batch's rows go to N ranks:

- an **index map** (T'), (B, T'): the position each gathered slot holds, −1
  for padding; rank r takes slots r·T'/N .. (r+1)·T'/N − 1;
- a **PyTorch load balancer** (``_generate_indices()``): its indices into the
  row it was made for, the batch row, or for ``_PerDocumentHeadTailLoadBalancer``
  the row its ``seq_length_per_doc`` lays out (each document in order given
  that many slots, its tokens first, then padding), cut as
  ``_context_parallel_shard`` cuts it;
- a **callable** ``plan(batch, rank, world_size)`` returning the rank's shard:
  ``indices`` (its slots' offsets into the plan's row) and, where the plan has
  them, ``row`` (the plan's row: each slot's position, −1 padding; the batch
  row when absent), ``input_ids``, ``labels``, ``position_ids`` and
  ``cu_seqlens`` (the boundaries its attention reads, over the plan's rows
  flattened, as FlashAttention's varlen form); for a padded layout
  (Transformer Engine's THD) ``cu_seqlens_padded`` beside ``cu_seqlens`` (then
  the real lengths), and the other readers of the boundaries: ``seq_idx`` (a
  conv/SSM layer's document number) and ``loss_mask``.

This module reads a plan in any of the three forms (``plan_of``) and the batch
(``batch_of``); ``cp_certificate`` holds it to the batch and ``cp_faithful``
holds each rank's attention to the unsharded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tensorcad.errors import TensorcadError

IGNORE = -100  # the label a loss skips (Hugging Face's and PyTorch's ignore_index)


@dataclass(frozen=True)
class CpBatch:
    """The unsharded batch: (B, T) ids, documents, positions, and labels (unshifted) or None."""

    ids: torch.Tensor
    documents: torch.Tensor
    positions: torch.Tensor
    labels: torch.Tensor | None

    def targets(self) -> torch.Tensor:
        """What each position predicts: the next label of its document (the next token), else IGNORE."""
        following = self.ids if self.labels is None else self.labels
        out = torch.full_like(self.ids, IGNORE)
        same = self.documents[:, 1:] == self.documents[:, :-1]
        out[:, :-1] = torch.where(same, following[:, 1:], torch.full_like(following[:, 1:], IGNORE))
        return out

    def document_index(self) -> torch.Tensor:
        """Each position's document, numbered 0, 1, ... along its row (as ``segments`` numbers them)."""
        return document_index(self.documents)


def document_index(documents: torch.Tensor) -> torch.Tensor:
    """(B, T) documents numbered 0, 1, ... along each row, whatever ids the batch gave them."""
    starts = torch.ones_like(documents, dtype=torch.int64)
    starts[:, 1:] = (documents[:, 1:] != documents[:, :-1]).long()
    return torch.cumsum(starts, dim=1) - 1


def batch_of(batch: Any) -> CpBatch:
    """A CpBatch of (ids, documents[, positions]), or of a mapping with input_ids and documents or
    position_ids (a Hugging Face collator's, restarting at each document), and labels if any."""
    from tensorcad.packing import documents_of_positions, positions_of

    labels = None
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        documents, positions, labels = batch.get("documents"), batch.get("position_ids"), batch.get("labels")
        if documents is None and positions is not None:
            documents = documents_of_positions(torch.as_tensor(positions))
    elif isinstance(batch, (tuple, list)) and 2 <= len(batch) <= 3:
        ids, documents, *rest = batch
        positions = rest[0] if rest else None
    else:
        raise TensorcadError("batch", "a batch is (ids, documents[, positions]) or a mapping with input_ids and "
                             f"documents or position_ids (and labels), not {type(batch).__name__}"
                             + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""))
    if ids is None or documents is None:
        raise TensorcadError("batch", "needs input_ids and the documents (or position_ids) of each position")

    def grid(x):
        x = torch.as_tensor(x).long()
        return x.unsqueeze(0) if x.dim() == 1 else x

    ids, documents = grid(ids), grid(documents)
    positions = grid(positions_of(documents) if positions is None else positions)
    if labels is not None:
        labels = grid(labels)
    for name, x in (("documents", documents), ("positions", positions), ("labels", labels)):
        if x is not None and x.shape != ids.shape:
            raise TensorcadError(f"batch.{name}", f"shaped {tuple(x.shape)}, the ids {tuple(ids.shape)}")
    return CpBatch(ids, documents, positions, labels)


@dataclass(frozen=True)
class Shard:
    """One rank's part: ``indices`` (B, S) into the plan's row, and what the plan says the rank holds."""

    indices: torch.Tensor
    input_ids: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    cu_seqlens: np.ndarray | None = None
    cu_seqlens_padded: np.ndarray | None = None  # given: the padded boundaries, and cu_seqlens the real lengths
    seq_idx: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None


@dataclass(frozen=True)
class Plan:
    """A plan read: its form, its row (B, T') of positions (−1 padding), and each rank's shard."""

    form: str
    row: torch.Tensor
    shards: tuple[Shard, ...]

    def gathered(self) -> torch.Tensor:
        """(B, N·S) offsets into the row of every slot, rank after rank (the all-gather's order)."""
        return torch.cat([s.indices for s in self.shards], dim=1)


def _rows(x: Any, rows: int, name: str) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x.cpu() if isinstance(x, torch.Tensor) else x)).long()
    if x.dim() == 1:
        x = x.unsqueeze(0)
    if x.dim() != 2 or x.shape[0] not in (1, rows):
        raise TensorcadError(name, f"expected (S,) or ({rows}, S), got {tuple(x.shape)}")
    return x.expand(rows, -1)


def _listed_row(lengths_per_row, batch: CpBatch) -> torch.Tensor:
    """The row a per-document balancer lays out: document i of each row given lengths[i] slots."""
    rows = []
    listed = list(lengths_per_row)
    for b in range(batch.ids.shape[0]):
        lengths = [int(n) for n in listed[b if len(listed) > 1 else 0]]
        index = batch.document_index()[b]
        starts = torch.searchsorted(index, torch.arange(int(index[-1]) + 1))
        counts = torch.bincount(index)
        slots = []
        for d, n in enumerate(lengths):
            have = int(counts[d]) if d < len(counts) else 0
            start = int(starts[d]) if d < len(starts) else 0
            slots += list(range(start, start + min(have, n))) + [-1] * max(0, n - have)
        rows.append(torch.tensor(slots, dtype=torch.int64))
    if len({len(r) for r in rows}) != 1:
        raise TensorcadError("plan", "the balancer lays out rows of different lengths")
    return torch.stack(rows)


def plan_of(plan: Any, batch: CpBatch, world_size: int, given: Any) -> Plan:
    """Read any of the three forms of a plan (the module docstring); ``given`` is the batch as the
    caller passed it, handed to a callable plan."""
    rows, seq = batch.ids.shape
    if isinstance(plan, (torch.Tensor, np.ndarray, list, tuple)):
        row = _rows(plan, rows, "plan")
        return Plan("an index map", row, _cut(torch.arange(row.shape[1]).expand(rows, -1), world_size))
    if hasattr(plan, "_generate_indices"):
        indices = _rows(plan._generate_indices(), rows, "plan")
        lengths = getattr(plan, "seq_length_per_doc", None)
        row = _listed_row(lengths, batch) if lengths is not None else torch.arange(seq).expand(rows, -1)
        return Plan(f"PyTorch's {type(plan).__name__}", row, _cut(indices, world_size))
    if callable(plan):
        shards, row = [], None
        for rank in range(world_size):
            part = plan(given, rank, world_size)
            if not isinstance(part, Mapping) or "indices" not in part:
                raise TypeError(f"plan(batch, {rank}, {world_size}) returns a mapping with 'indices' "
                                f"(its slots' offsets into the plan's row), not {type(part).__name__}")
            if "row" in part:
                mine = _rows(part["row"], rows, f"rank {rank}'s row")
                if row is not None and not torch.equal(row, mine):
                    raise TensorcadError("plan", f"rank {rank} describes another row than rank 0")
                row = mine
            cu, cu_padded = (_boundaries(part.get(k)) for k in ("cu_seqlens", "cu_seqlens_padded"))
            read = {k: None if part.get(k) is None else _rows(part[k], rows, f"rank {rank}'s {k}")
                    for k in ("input_ids", "labels", "position_ids", "seq_idx", "loss_mask")}
            shards.append(Shard(_rows(part["indices"], rows, f"rank {rank}'s indices"), read["input_ids"],
                                read["labels"], read["position_ids"], cu, cu_padded, read["seq_idx"],
                                read["loss_mask"]))
        return Plan("a callable", torch.arange(seq).expand(rows, -1) if row is None else row, tuple(shards))
    raise TypeError(f"a plan is an index map, a PyTorch load balancer or a callable, not {type(plan).__name__}")


def _boundaries(cu: Any) -> np.ndarray | None:
    return None if cu is None else np.asarray(cu.cpu() if isinstance(cu, torch.Tensor) else cu, np.int64)


def _cut(indices: torch.Tensor, world_size: int) -> tuple[Shard, ...]:
    """Each rank's contiguous slice of the indices, as ``_context_parallel_shard`` cuts them."""
    if indices.shape[1] % world_size:
        raise TensorcadError("plan", f"{world_size} ranks do not divide the plan's {indices.shape[1]:,} slots")
    return tuple(Shard(part) for part in indices.chunk(world_size, dim=1))
