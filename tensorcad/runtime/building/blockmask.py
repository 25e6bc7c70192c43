"""The engine's block and kept-score figures, held to PyTorch on the same rows.

Two oracles, neither of them the engine:

- **Blocks.** FlexAttention's own ``create_block_mask``, given the model's own
  mask_mod over the rows ``packing.draw`` makes (the rows the engine counts:
  same seed, same row count), says per row and query block how many key
  blocks a kernel computes whole (``full_kv_num_blocks``) and how many it
  computes and masks (``kv_num_blocks``). The engine's ``count_row_blocks``
  must give the same numbers on every row, and the engine's ``block_counts``
  over those rows the same total; the analysis's own figure (its 1,024 rows)
  is reported beside them.
- **Kept scores.** The mask_mod evaluated at every (query, key) of every row,
  counted one by one, must equal the engine's exact per-row count, and lie
  within the sampler's stated error of the analysis's ``keys_per_query``
  (0.5% for fixed lengths, 3% for spread-out ones).

The model's masks are taken from the model itself: each mask_mod handed to
``attend`` in a forward pass (``Model.recording_attend``), rebuilt over new
rows by the factory the module's own ``MASKS`` table names for it, so what is
compared is what the model runs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from tensorcad.design.masks import BLOCK  # noqa: F401 - FlexAttention's default block, asked of blockmask by name
from tensorcad.design.model import Attention
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, draw

ROWS = 256
KEPT_TOLERANCE = 0.005  # the sampler's stated error against closed forms (docs/analysis.md)
BLOCK_TOLERANCE = 0.001  # engine's total over the same rows against create_block_mask's

MaskFor = Callable[[torch.Tensor, torch.Tensor], Callable]  # (documents, positions) -> mask_mod


# -- the model's own masks -----------------------------------------------------------


@dataclass(frozen=True)
class ModelMask:
    """One distinct mask a generated model runs, read from its own MASKS table."""

    name: str  # the mask_mod's name: what it keeps
    attentions: tuple[str, ...]  # the design paths of the attentions that run it
    make: MaskFor  # (documents, positions) -> the same mask_mod over those rows


def _maker(name: str, entry: dict) -> MaskFor:
    if entry.get("factory") is None:
        mask_mod = entry["mask_mod"]
        return lambda documents, positions: mask_mod
    factory, reads = entry["factory"], tuple(entry.get("reads", ()))
    unknown = [r for r in reads if r not in ("documents", "positions")]
    if unknown:
        raise TensorcadError("model", f"mask {name!r} reads {unknown[0]!r}, which is neither the "
                                      "documents nor the positions input")

    def make(documents: torch.Tensor, positions: torch.Tensor) -> Callable:
        given = {"documents": documents, "positions": positions}
        return factory(*(given[r] for r in reads))

    return make


def model_masks(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> list[ModelMask]:
    """Every distinct mask the model hands to ``attend`` in one forward pass, in call order.

    The module states its masks (``Model.masks``: name -> mask_mod or factory, the
    inputs it reads, its attentions) and records its attend calls
    (``Model.recording_attend``); a mask it runs that its table does not state is
    an error, so what is compared is what the model runs.
    """
    table = getattr(type(model), "masks", None)
    recording = getattr(type(model), "recording_attend", None)
    if table is None or recording is None:
        if table is not None or getattr(type(model), "runtime_paths", None) is not None:
            raise TensorcadError("model", f"{type(model).__name__} states masks but records no attend calls")
        return []  # a module with no attention states no masks
    with torch.no_grad(), recording() as calls:
        model(**inputs)
    masks: list[ModelMask] = []
    for call in calls:
        mask_mod = call.get("mask_mod")
        if mask_mod is None or any(m.name == mask_mod.__name__ for m in masks):
            continue
        entry = table.get(mask_mod.__name__)
        if entry is None:
            raise TensorcadError("model", f"attend ran the mask {mask_mod.__name__!r}, which the "
                                          f"module's MASKS table does not state")
        masks.append(ModelMask(mask_mod.__name__, tuple(entry.get("attentions", ())),
                               _maker(mask_mod.__name__, entry)))
    return masks


# -- the rows ------------------------------------------------------------------------


def rows_for(seq: int, packing: Packing | None, seed: int, rows: int = ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The engine's rows: ``packing.draw`` with its seed, or one document a row without packing."""
    if packing is None:
        return np.zeros((1, seq), dtype=np.int64), np.arange(seq, dtype=np.int64)[None, :]
    return draw(rows, seq, seed=seed, packing=packing)  # any lengths, any strategy


def _dense_keep(mask_mod: Callable, rows: int, heads: int, seq: int) -> torch.Tensor:
    """mask_mod at every (row, head, query, key): (rows, heads, seq, seq) booleans."""
    b = torch.arange(rows).view(rows, 1, 1, 1)
    h = torch.arange(heads).view(1, heads, 1, 1)
    q = torch.arange(seq).view(1, 1, seq, 1)
    kv = torch.arange(seq).view(1, 1, 1, seq)
    return mask_mod(b, h, q, kv).expand(rows, heads, seq, seq)


# -- blocks --------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockAgreement:
    rows: int
    heads: int  # 1 when the mask never reads h
    seq: int
    block: int
    torch_full: int  # full blocks over all rows (and heads), create_block_mask
    torch_partial: int
    engine_full: int  # count_row_blocks on the same rows
    engine_partial: int
    mismatched_rows: tuple[int, ...]  # rows whose per-query-block counts differ
    engine_total_computed: float  # block_counts over the same rows: scores in computed blocks a row
    analysis_computed: float  # block_counts as the analysis runs it (its own rows)
    seconds: float
    stderr: float = 0.0  # relative standard error of the rows' mean computed blocks (their own noise)

    @property
    def torch_computed(self) -> float:
        """Scores in computed blocks a row (and head), by create_block_mask."""
        return (self.torch_full + self.torch_partial) * self.block * self.block / (self.rows * self.heads)

    @property
    def total_difference(self) -> float:
        return relative_difference(self.engine_total_computed, self.torch_computed)

    @property
    def analysis_difference(self) -> float:
        return relative_difference(self.analysis_computed, self.torch_computed)

    @property
    def tolerance(self) -> float:
        """What the engine's figure may differ by: 0.1%, or three standard errors of these rows' mean.

        block_counts corrects its rows toward the mean over every window of the stream
        (a control variate), so over the same rows it is an estimate, not their raw count;
        the row-by-row comparison above is the exact one.
        """
        return max(BLOCK_TOLERANCE, 3 * self.stderr)

    @property
    def passed(self) -> bool:
        return (not self.mismatched_rows and self.torch_full == self.engine_full
                and self.torch_partial == self.engine_partial
                and self.total_difference <= self.tolerance)

    def to_json(self) -> dict:
        return {
            "rows": self.rows, "heads": self.heads, "seq": self.seq, "block": self.block,
            "torch": {"full": self.torch_full, "partial": self.torch_partial,
                      "computedPerRow": self.torch_computed},
            "engine": {"full": self.engine_full, "partial": self.engine_partial,
                       "computedPerRow": self.engine_total_computed},
            "mismatchedRows": list(self.mismatched_rows[:10]),
            "totalDifference": self.total_difference, "tolerance": self.tolerance,
            "stderr": self.stderr,
            "analysisComputedPerRow": self.analysis_computed,
            "analysisDifference": self.analysis_difference,
            "seconds": round(self.seconds, 3),
        }


def relative_difference(figure: float, reference: float) -> float:
    """|figure - reference| / reference; a mask that keeps nothing agrees only with nothing."""
    if reference == 0:
        return 0.0 if figure == 0 else math.inf
    return abs(figure - reference) / reference


MASK_ELEMENTS = 1 << 26  # scores create_block_mask may hold at once: 64M, half a GiB in int64


def compare_blocks(attention: Attention, mask_for: MaskFor, seq: int, packing: Packing | None,
                   seed: int = 0, rows: int = ROWS, block: int = BLOCK) -> BlockAgreement:
    """create_block_mask's per-row counts against the engine's, on the engine's rows."""
    from torch.nn.attention.flex_attention import create_block_mask

    from tensorcad.analysis.blocks import block_counts
    from tensorcad.analysis.tiles import count_row_blocks

    start = time.perf_counter()
    documents, positions = rows_for(seq, packing, seed, rows)
    n = documents.shape[0]
    mask_mod = mask_for(torch.from_numpy(documents), torch.from_numpy(positions))
    heads = attention.heads if getattr(mask_mod, "uses_head", True) else 1
    # create_block_mask materialises every score of the rows it is given (and sums them
    # in int64): hand it as many rows at a time as fit in MASK_ELEMENTS.
    step = max(1, MASK_ELEMENTS // (heads * seq * seq))
    partial, full = [], []
    for lo in range(0, n, step):
        rows_here = mask_for(torch.from_numpy(documents[lo:lo + step]), torch.from_numpy(positions[lo:lo + step]))
        block_mask = create_block_mask(rows_here, min(step, n - lo), heads, seq, seq, device="cpu",
                                       BLOCK_SIZE=block)
        counts = block_mask.kv_num_blocks.to(torch.int64).numpy()  # (rows, heads, query blocks)
        partial.append(counts)
        full.append(block_mask.full_kv_num_blocks.to(torch.int64).numpy()
                    if block_mask.full_kv_num_blocks is not None else np.zeros_like(counts))
    partial, full = np.concatenate(partial), np.concatenate(full)

    engine = count_row_blocks(attention, documents, positions, block=block)
    # The engine counts one head when the mask never reads h; every head is the same then.
    e_full = np.broadcast_to(engine.full, full.shape)
    e_partial = np.broadcast_to(engine.partial, partial.shape)
    differs = ((e_full != full) | (e_partial != partial)).reshape(n, -1).any(axis=1)

    pack_rows = rows if packing is not None else 1
    same_rows = block_counts(attention, seq, packing, seed=seed, block=block, rows=pack_rows)
    analysis = block_counts(attention, seq, packing, seed=seed, block=block)
    return BlockAgreement(
        rows=n, heads=heads, seq=seq, block=block,
        torch_full=int(full.sum()), torch_partial=int(partial.sum()),
        engine_full=int(e_full.sum()), engine_partial=int(e_partial.sum()),
        mismatched_rows=tuple(int(r) for r in np.flatnonzero(differs)),
        engine_total_computed=same_rows.computed, analysis_computed=analysis.computed,
        seconds=time.perf_counter() - start, stderr=_relative_stderr((full + partial).reshape(n, -1).sum(axis=1)),
    )


def _relative_stderr(per_row: np.ndarray) -> float:
    if len(per_row) < 2 or per_row.mean() == 0:
        return 0.0
    mean = per_row.mean()
    return float(per_row.std(ddof=1) / np.sqrt(len(per_row)) / mean) if mean else 0.0


# -- kept scores ---------------------------------------------------------------------


@dataclass(frozen=True)
class KeptAgreement:
    rows: int
    seq: int
    counted: float  # keys kept per query, every score of every row evaluated
    engine_exact: float  # the engine's exact count on the same rows (count_row_blocks.kept)
    mismatched_rows: tuple[int, ...]
    analysis: float  # the analysis's keys_per_query (sampled over its own rows)
    tolerance: float
    seconds: float

    @property
    def difference(self) -> float:
        return relative_difference(self.analysis, self.counted)

    @property
    def passed(self) -> bool:
        return not self.mismatched_rows and self.difference <= self.tolerance

    def to_json(self) -> dict:
        return {"rows": self.rows, "seq": self.seq, "countedPerQuery": self.counted,
                "engineExactPerQuery": self.engine_exact, "mismatchedRows": list(self.mismatched_rows[:10]),
                "analysisPerQuery": self.analysis, "difference": self.difference,
                "tolerance": self.tolerance, "seconds": round(self.seconds, 3)}


def compare_kept(attention: Attention, mask_for: MaskFor, seq: int, packing: Packing | None,
                 seed: int = 0, rows: int = ROWS) -> KeptAgreement:
    """Scores kept, counted one by one on the engine's rows, against the engine's figures."""
    from tensorcad.analysis.attention import keys_per_query
    from tensorcad.analysis.tiles import count_row_blocks

    start = time.perf_counter()
    documents, positions = rows_for(seq, packing, seed, rows)
    n = documents.shape[0]
    per_row = np.zeros(n)
    for first in range(0, n, 32):  # 32 rows at a time bounds the dense booleans
        last = min(first + 32, n)
        sub = mask_for(torch.from_numpy(documents[first:last]), torch.from_numpy(positions[first:last]))
        heads = attention.heads if getattr(sub, "uses_head", True) else 1
        keep = _dense_keep(sub, last - first, heads, seq)
        per_row[first:last] = keep.sum(dim=(1, 2, 3)).double().numpy() / heads
    engine = count_row_blocks(attention, documents, positions).kept
    mismatched = tuple(int(r) for r in np.flatnonzero(np.abs(engine - per_row) > 1e-9 * np.maximum(per_row, 1)))
    # The analysis counts its own 1,024 rows, these are 256 of them: beyond the
    # sampler's stated error, allow three standard errors of these rows' own mean.
    tolerance = max(KEPT_TOLERANCE, 3 * _relative_stderr(per_row))
    return KeptAgreement(
        rows=n, seq=seq, counted=float(per_row.mean()) / seq, engine_exact=float(engine.mean()) / seq,
        mismatched_rows=mismatched, analysis=keys_per_query(attention, seq, packing, seed=seed).mean,
        tolerance=tolerance, seconds=time.perf_counter() - start,
    )
