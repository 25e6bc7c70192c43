"""The context-parallel shard plan certificate: a plan (``cp_plan``) held to the batch it splits.

Every position on exactly one rank (a token held twice is a key counted twice;
one held by none is never trained), no document's token dropped by rounding
(a 7-token document cut to a multiple of 2·cp) or padding, each rank's ids,
position ids and ``cu_seqlens`` those of its positions (unpadded ``cu_seqlens``
after padding put every boundary the padding moved in the wrong place), its
labels the unsharded targets (shifted within each document *before* the
split: shifted after it, every chunk's last label is another chunk's token),
padding never supervised; and each rank's attention over its shard with the
gathered keys equal to the unsharded attention at its positions
(``cp_faithful``). Every failure names the rank, row, document and position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tensorcad.errors import TensorcadError

from .plan import IGNORE, CpBatch, Plan, Shard, batch_of, document_index, plan_of
from ..outcome import Check, Skipped, failed, passed

SHOWN = 3  # instances a failure lists before counting the rest


def _listing(items: list[str], total: int | None = None) -> str:
    """The first SHOWN items, then how many more of ``total`` (default: of the items) there are."""
    total = len(items) if total is None else total
    shown = "; ".join(items[:SHOWN])
    return shown + (f" (and {total - SHOWN} more)" if total > SHOWN else "")


def _where(batch: CpBatch, b: int, p: int) -> str:
    d = int(batch.document_index()[b, p])
    return f"row {b}, position {p}, document {d} token {int(batch.positions[b, p])}"


def structural_failures(plan: Plan, batch: CpBatch, world_size: int) -> tuple[list[str], bool]:
    """What the plan loses, doubles, mislabels or misplaces, each naming rank, row and position; and
    whether its slots are sound enough (one size a rank, offsets inside its row) to attend over."""
    seq = batch.ids.shape[1]
    sizes = [s.indices.shape[1] for s in plan.shards]
    slots = plan.row.shape[1]
    if len(set(sizes)) != 1:
        return [f"the ranks hold different numbers of slots: {sizes}"], False
    held = sizes[0] * world_size
    failures = []
    if held != slots:
        failures.append(f"the ranks hold {held:,} slots ({world_size} x {sizes[0]:,}), "
                        f"the plan's row has {slots:,}")
    gathered = plan.gathered()
    if (gathered < 0).any() or (gathered >= slots).any():
        r, b, i = _first_rank_slot(plan, (gathered < 0) | (gathered >= slots))
        offset = int(plan.shards[r].indices[b, i])
        return failures + [f"rank {r} holds offset {offset} of row {b}, outside the plan's row of {slots:,}"], False
    if ((plan.row < -1) | (plan.row >= seq)).any():
        return failures + [f"the plan's row names positions outside the batch's {seq:,}"], False
    positions = plan.row.gather(1, gathered)  # (B, L): each gathered slot's position, -1 padding
    failures += _once_each(positions, batch, world_size, sizes[0])
    for r, shard in enumerate(plan.shards):
        mine = plan.row.gather(1, shard.indices)
        failures += _shard_failures(r, shard, mine, batch, plan.row)
    return failures, True


def _first_rank_slot(plan: Plan, bad: torch.Tensor) -> tuple[int, int, int]:
    b, j = (int(x) for x in bad.nonzero()[0])
    local = plan.shards[0].indices.shape[1]
    return j // local, b, j % local


def _once_each(positions: torch.Tensor, batch: CpBatch, n: int, local: int) -> list[str]:
    """Every position of every row on exactly one rank; a document's lost tokens named together."""
    rows, seq = batch.ids.shape
    failures, twice, doubled = [], [], 0
    for b in range(rows):
        real = positions[b] >= 0
        slot = torch.arange(positions.shape[1])[real]
        count = torch.bincount(positions[b][real], minlength=seq)
        repeated = torch.nonzero(count > 1).flatten().tolist()
        doubled += len(repeated)
        # only the positions the message shows are described: each is a pass over the row, and a plan that
        # doubles every token would otherwise cost one pass a token
        for p in repeated[:SHOWN - len(twice)]:
            ranks = sorted({int(s) // local for s in slot[positions[b][real] == p]})
            on = " and ".join(str(r) for r in ranks) if len(ranks) > 1 else f"{ranks[0]} (twice)"
            twice.append(f"{_where(batch, b, p)} is on ranks {on}")
        index = batch.document_index()[b]
        for d in torch.unique(index[count == 0]).tolist():
            lost = torch.nonzero((count == 0) & (index == d)).flatten()
            length = int((index == d).sum())
            kept = length - len(lost)
            first = int(torch.nonzero(index == d)[0])
            tokens = "1 token" if len(lost) == 1 else f"{len(lost)} tokens"
            message = (f"document {d} of row {b} ({length} tokens from position {first}) has {tokens} on no "
                       f"rank: position{'s' if len(lost) > 1 else ''} {_span(lost.tolist())}")
            if kept and kept == length // (2 * n) * (2 * n):  # what is left, a multiple of 2 x cp
                message += f" (its {length} tokens rounded down to {kept}, a multiple of 2 x {n} = {2 * n})"
            failures.append(message)
    if doubled:
        failures.insert(0, "a token on two ranks: " + _listing(twice, doubled))
    return failures


def _numbers(values: list[int]) -> str:
    """1, 2, 3, ... (n in all): a few numbers, then how many."""
    shown = ", ".join(str(v) for v in values[:SHOWN])
    return shown + (f", ... ({len(values)} in all)" if len(values) > SHOWN else "")


def _span(values: list[int]) -> str:
    if len(values) > 1 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return _numbers(values)


# The readers of the boundaries a shard may carry beside its ids, and what each must equal at a real slot.
READERS = ("input_ids", "position_ids", "seq_idx")


def _unpadded_reading(batch: CpBatch, offsets: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a reader of the *unpadded* boundaries computes at each slot offset of a padded row (Megatron-LM
    #5243, NeMo-RL #2529): the offset read against the row's real document starts, its place and number."""
    index = batch.document_index()
    starts = torch.ones_like(index, dtype=torch.bool)
    starts[:, 1:] = index[:, 1:] != index[:, :-1]
    positions, numbers = torch.empty_like(offsets), torch.empty_like(offsets)
    for b in range(offsets.shape[0]):
        begins = torch.nonzero(starts[b]).flatten()
        k = torch.searchsorted(begins, offsets[b], right=True) - 1  # >= 0: every row begins a document
        positions[b], numbers[b] = offsets[b] - begins[k], k
    return {"position_ids": positions, "seq_idx": numbers}


def _shard_failures(r: int, shard: Shard, mine: torch.Tensor, batch: CpBatch, row: torch.Tensor) -> list[str]:
    """Rank r's ids, labels, and every reader of the boundaries against those of the positions it holds."""
    failures = []
    real = mine >= 0
    at = mine.clamp(min=0)
    want_of = {"input_ids": batch.ids, "position_ids": batch.positions, "seq_idx": batch.document_index()}
    unpadded = _unpadded_reading(batch, shard.indices) if bool((row < 0).any()) else {}
    for name in READERS:
        got = getattr(shard, name)
        if got is None:
            continue
        want = want_of[name].gather(1, at)
        wrong = real & (got != want)
        if wrong.any():
            b, i = (int(x) for x in wrong.nonzero()[0])
            p = int(mine[b, i])
            message = (f"rank {r}'s {name} at its slot {i} ({_where(batch, b, p)}): {int(got[b, i])}, "
                       f"where the batch has {int(want[b, i])}")
            if name in unpadded and bool((got[wrong] == unpadded[name][wrong]).all()):
                message += (f" - the unpadded boundaries read over the padded layout: {name} must read "
                            "cu_seqlens_padded")
            failures.append(message + f"; {int(wrong.sum())} of its {int(real.sum())} slots differ")
    if shard.labels is not None:
        failures += _label_failures(r, shard, mine, batch)
    if shard.loss_mask is not None:
        failures += _loss_mask_failures(r, shard.loss_mask, mine, batch)
    if shard.cu_seqlens_padded is not None:
        failures += _cu_failures(r, shard.cu_seqlens_padded, row, batch, "cu_seqlens_padded")
        if shard.cu_seqlens is not None:
            failures += _real_cu_failures(r, shard.cu_seqlens, batch)
    elif shard.cu_seqlens is not None:
        failures += _cu_failures(r, shard.cu_seqlens, row, batch)
    return failures


def _loss_mask_failures(r: int, loss_mask: torch.Tensor, mine: torch.Tensor, batch: CpBatch) -> list[str]:
    """The loss mask: 1 exactly where the unsharded target is a token; padding and a document's end never."""
    real = mine >= 0
    want = real & (batch.targets().gather(1, mine.clamp(min=0)) != IGNORE)
    wrong = (loss_mask != 0) != want
    if not wrong.any():
        return []
    b, i = (int(x) for x in wrong.nonzero()[0])
    if not real[b, i]:
        where = f"its slot {i} of row {b}, padding,"
    else:
        where = f"its slot {i} ({_where(batch, b, int(mine[b, i]))})"
    return [f"rank {r}'s loss_mask at {where} is {int(loss_mask[b, i])}, where the unsharded targets give "
            f"{int(want[b, i])}; {int(wrong.sum())} of its {wrong.shape[1] * wrong.shape[0]} slots differ"]


def _real_cu_failures(r: int, cu: np.ndarray, batch: CpBatch) -> list[str]:
    """Beside cu_seqlens_padded, cu_seqlens counts each document's real tokens."""
    from tensorcad.packing import cu_seqlens_of

    want = [int(x) for x in cu_seqlens_of(batch.documents.numpy())]
    got = [int(x) for x in cu]
    if got == want:
        return []
    return [f"rank {r}'s cu_seqlens (the real lengths beside cu_seqlens_padded): {_numbers(got[1:])} where the "
            f"batch's documents end at {_numbers(want[1:])}"]


def padding_failures(row: torch.Tensor, batch: CpBatch, multiple: int) -> list[str]:
    """Each document's slots in the plan's row (its tokens, then the padding after them) a multiple of ``multiple``."""
    failures = []
    for b in range(row.shape[0]):
        index = torch.where(row[b] >= 0, batch.document_index()[b].gather(0, row[b].clamp(min=0)),
                            torch.full_like(row[b], -1))
        owner, current = [], -1
        for d in index.tolist():  # padding belongs to the document before it
            current = d if d >= 0 else current
            owner.append(current)
        owner = torch.tensor(owner)
        for d in torch.unique(owner[owner >= 0]).tolist():
            slots = int((owner == d).sum())
            tokens = int((index == d).sum())
            if slots % multiple:
                failures.append(f"document {d} of row {b} ({tokens} tokens) is given {slots} slots, not a "
                                f"multiple of {multiple}")
    return failures


def _label_failures(r: int, shard: Shard, mine: torch.Tensor, batch: CpBatch) -> list[str]:
    failures = []
    real = mine >= 0
    labels = shard.labels
    supervised = ~real & (labels != IGNORE)
    if supervised.any():
        b, i = (int(x) for x in supervised.nonzero()[0])
        failures.append(f"rank {r}'s labels supervise padding: its slot {i} of row {b} holds no token but "
                        f"label {int(labels[b, i])} (padding must be {IGNORE})")
    want = batch.targets().gather(1, mine.clamp(min=0))
    wrong = real & (labels != want)
    if wrong.any():
        b, i = (int(x) for x in wrong.nonzero()[0])
        p = int(mine[b, i])
        message = (f"rank {r}'s labels at its slot {i} ({_where(batch, b, p)}): {int(labels[b, i])}, where the "
                   f"unsharded target is {int(want[b, i])}")
        # Shifted after the split: a slot's label is its own next slot's token, not its position's next.
        local_ids = shard.input_ids if shard.input_ids is not None else batch.ids.gather(1, mine.clamp(min=0))
        shifted = torch.full_like(labels, IGNORE)
        shifted[:, :-1] = local_ids[:, 1:]
        if bool((labels[wrong] == shifted[wrong]).all()):
            message += (" - the token of its next slot: the labels were shifted after the split "
                        "(shift them within each document before it)")
        failures.append(message + f"; {int(wrong.sum())} of its {int(real.sum())} labels differ")
    return failures


def _cu_failures(r: int, cu: np.ndarray, row: torch.Tensor, batch: CpBatch, name: str = "cu_seqlens") -> list[str]:
    """The rank's cu_seqlens (over the plan's rows flattened) against the row's own boundaries: every
    document's first slot and each row's end; another boundary may only begin padding."""
    rows, slots = row.shape
    index = torch.where(row >= 0, batch.document_index().gather(1, row.clamp(min=0)), torch.full_like(row, -1))
    begins, padding_starts = [], []
    for b in range(rows):
        base = b * slots
        previous = None
        for j, d in enumerate(index[b].tolist()):
            if d >= 0 and d != previous:
                begins.append(base + j)
                previous = d
            elif d < 0 and (j == 0 or index[b, j - 1] >= 0):
                padding_starts.append(base + j)
        begins.append(base + slots)
    begins = list(dict.fromkeys(begins))  # a row's end is the next row's first document's start
    cu = [int(x) for x in cu]
    if not cu:
        return [f"rank {r}'s {name} are empty: the plan's rows hold {rows * slots:,} slots, their boundaries at "
                f"{_numbers(begins)}"]
    if cu[0] != 0:
        return [f"rank {r}'s {name} begin at {cu[0]}, not 0: the first row's first slot begins no sequence"]
    if cu[-1] != rows * slots:
        return [(f"rank {r}'s {name} end at {cu[-1]}, but the plan's rows hold {rows * slots:,} slots: "
                 f"boundaries at {_numbers(cu[1:])} where the row's are at {_numbers(begins[1:])} (cu_seqlens of "
                 "the unpadded documents after padding miss every boundary the padding moved)")]
    missing = [c for c in begins if c not in set(cu)]
    extra = [c for c in cu if c not in set(begins) and c not in set(padding_starts)]
    failures = []
    for c in missing[:SHOWN]:
        b, j = divmod(c, slots)
        if j == 0:
            failures.append(f"rank {r}'s {name} have no boundary at {c}, where row {b} begins: a "
                            f"document runs on from row {b - 1} into row {b}")
            continue
        p = int(row[b, j])
        failures.append(f"rank {r}'s {name} have no boundary at {c}, where {_where(batch, b, p)} begins: "
                        f"its attention crosses from document {int(index[b, j]) - 1} into document "
                        f"{int(index[b, j])}")
    for c in extra[:SHOWN]:
        b, j = divmod(c, slots)
        p = int(row[b, j])
        if p < 0:
            failures.append(f"rank {r}'s {name} put a boundary at {c}, inside padding of row {b}")
            continue
        failures.append(f"rank {r}'s {name} put a boundary at {c}, inside document {int(index[b, j])} "
                        f"({_where(batch, b, p)} is not its first token)")
    return failures


@dataclass(frozen=True)
class CpPlanResult:
    """``check_cp_plan``'s verdict: the structural failures, then the ranks' attention against the unsharded."""

    form: str
    world_size: int
    slots: int  # the plan's row, a row
    padding: int  # of them, padding
    failures: tuple[str, ...]
    differences: tuple[Any, ...]  # cp_faithful.RankDifference, beyond the tolerance
    largest: float  # the largest difference of any rank's attention from the unsharded
    tolerance: float
    multiple: int | None = None  # the padding multiple the plan was held to (None: not asked)
    padded_documents: int = 0  # documents given padding slots, over every row

    @property
    def passed(self) -> bool:
        return not self.failures and not self.differences

    def message(self) -> str:
        if self.passed:
            multiple = (f" ({self.padded_documents} documents padded to a multiple of {self.multiple})"
                        if self.multiple else "")
            return (f"{self.form} over {self.world_size} ranks: every position on one rank, {self.padding:,} "
                    f"padding slots of {self.slots:,} a row{multiple}, each rank's attention equal to the unsharded "
                    f"(largest difference {self.largest:.3g}, tolerance {self.tolerance:g})")
        lines = list(self.failures)
        worst = sorted(self.differences, key=lambda d: -d.largest)
        lines += [d.message(self.tolerance) for d in worst[:SHOWN]]
        if len(worst) > SHOWN:
            lines.append(f"(and {len(worst) - SHOWN} more documents on ranks that differ)")
        return f"{self.form} over {self.world_size} ranks:\n" + "\n".join(lines)

    def to_json(self) -> dict:
        return {"passed": self.passed, "form": self.form, "worldSize": self.world_size, "slots": self.slots,
                "padding": self.padding, "multiple": self.multiple, "paddedDocuments": self.padded_documents,
                "failures": list(self.failures),
                "differences": [d.to_json() for d in self.differences], "largest": self.largest,
                "tolerance": self.tolerance, "message": self.message()}


def check_cp_plan(plan: Any, batch: Any, world_size: int, *, causal: bool = True, window: int | None = None,
                  atol: float | None = None, seed: int = 0, pad_multiple: int | None = None) -> CpPlanResult:
    """Hold ``plan`` (an index map, a PyTorch load balancer or a callable) to ``batch`` over
    ``world_size`` ranks: the structural checks, then each rank's attention (a document mask, causal
    and windowed as asked) against the unsharded (``cp_faithful``). ``pad_multiple``: every document's
    slots (its tokens, then its padding) must be a multiple of it (2 x cp for Transformer Engine's THD)."""
    from tensorcad.errors import check_integer

    from .faithful import check_cp_faithful

    world_size = check_integer(world_size, "world_size", 1, 1 << 16)
    if pad_multiple is not None:
        pad_multiple = check_integer(pad_multiple, "pad_multiple", 1, 1 << 20)
    read = batch_of(batch)
    try:
        shaped = plan_of(plan, read, world_size, batch)
    except TensorcadError as error:  # a plan that cannot be read fails, naming what of it is wrong
        return CpPlanResult(type(plan).__name__, world_size, 0, 0, (str(error),), (), 0.0, 0.0)
    failures, sound = structural_failures(shaped, read, world_size)
    if sound and pad_multiple is not None:
        failures += padding_failures(shaped.row, read, pad_multiple)
    differences, largest, tolerance = (check_cp_faithful(shaped, read, causal=causal, window=window, atol=atol,
                                                         seed=seed) if sound else ([], 0.0, 0.0))
    padding = int((shaped.row < 0).sum()) // len(shaped.row)
    return CpPlanResult(shaped.form, world_size, shaped.row.shape[1], padding, tuple(failures),
                        tuple(differences), largest, tolerance, pad_multiple, _padded_documents(shaped.row))


def _padded_documents(row: torch.Tensor) -> int:
    """Runs of padding in the plan's rows: under a THD layout, one for each document padded."""
    pad = row < 0
    starts = pad.clone()
    starts[:, 1:] &= ~pad[:, :-1]
    return int(starts.sum())


CHECK_RANKS = 2  # the registry's check splits the subject's batch over this many ranks


def cp_plan_check(s: Any) -> Check:
    """The registry's ``cp-plan``: the analysis's shardings of the subject's batch, each certified.

    Each sharding the analysis counts (``cp_layout``), over two ranks, held by
    ``check_cp_plan`` with the design's own kind of mask (its documents, causal
    or not, its window), read from the mask's ranges (``design.block_ranges``).
    """
    from tensorcad.analysis.context_parallel.ranks import SHARDINGS
    from tensorcad.design.block_ranges import block_ranges
    from tensorcad.runtime.building.cp_layouts import cp_layout
    from tensorcad.runtime.building.cp_masks import cp_block_mask, document_mask

    ranges = [r for r in (block_ranges(a) for a, _ in s.design.attentions()) if r is not None and r.documents]
    if not ranges:
        raise Skipped(f"{s.design.name} has no document mask decided from its ranges to shard")
    found = ranges[0]
    if len(found.behind) > 1 or len(found.ahead) > 1:
        raise Skipped("the mask keeps other distances on other heads: PyTorch's CP balancers need one mask")
    behind, ahead = found.behind[0], found.ahead[0]
    causal = ahead == 0
    if not causal and ahead != behind:
        raise Skipped("a one-sided window that keeps keys ahead is not a document mask this check draws")
    window = None if behind is None else behind + 1
    documents = s.batch[1]
    rows, seq = documents.shape
    index = document_index(documents)
    whole = cp_block_mask(document_mask(index, causal=causal, window=window), torch.arange(seq), 0, 1, rows, 1)
    counts = (whole.kv_num_blocks + whole.full_kv_num_blocks)[:, 0]
    results, lines = {}, []
    for shard in SHARDINGS:
        try:
            layout = cp_layout(documents.numpy(), shard, CHECK_RANKS, counts)
        except TensorcadError as refused:
            lines.append(f"{shard}: not laid out here ({refused.message})")
            continue
        result = check_cp_plan(layout, s.batch, CHECK_RANKS, causal=causal, window=window, seed=s.settings.seed)
        results[shard] = result.to_json()
        lines.append(f"{shard}: {result.message()}")
    if any(not r["passed"] for r in results.values()):
        return failed("cp-plan", "a sharding the analysis counts loses or leaks\n" + "\n".join(lines), results)
    return passed("cp-plan", "; ".join(lines), results)
