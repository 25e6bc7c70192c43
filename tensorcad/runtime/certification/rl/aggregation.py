"""rl[aggregation]: the loss over packing, micro-batches and ranks is the declared mode on the one global batch.

The user's ``loss_fn(loss_mat, inputs, accumulation) -> loss`` is what their
loop does with one micro-batch: ``loss_mat`` each token's loss term (b, t),
``inputs`` the micro-batch's slice of the batch dict (its loss mask, its
``position_ids`` or ``documents``, per-row tensors), ``accumulation`` what the
loop knows (`Accumulation`: the micro-batch and rank, their numbers, the global
batch's loss tokens and sequences, as TRL's ``num_items_in_batch`` and verl's
global token count tell it). The loop's gradient is the micro-batches' added
and the ranks' averaged (DDP, FSDP), so the step's loss is

    sum over every part of loss_fn(...) / ranks.

Every mode is linear in ``loss_mat`` (`modes`), so it is the weight it gives
each token: the certificate draws ``loss_mat`` at random (float64, seeded),
reads the weight the step gives each token off its gradient, and holds it,
and the value, to the declared mode computed by hand on the one global batch.
A difference is explained by the first alternative that fits exactly: another
mode of the global batch; a mode with each pack row taken as one sequence; a
mode taken inside each micro-batch and averaged; Dr. GRPO's constant that
moves with a micro-batch (its padded width).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import torch

from tensorcad.errors import TensorcadError

from .batch import Part, RLBatch, deal, read_rl_batch
from .modes import MODES, describe, mode_of, weights

# The frameworks' own sequence means divide by n + 1e-8 (verl's agg_loss, OpenRLHF's aggregate_loss): 1e-8
# relative at a one-token sequence. Two modes differ by a ratio of distinct counts, far above 1e-6.
RTOL = 1e-6


@dataclass(frozen=True)
class Accumulation:
    """What the loop knows when it computes one micro-batch's loss."""

    rank: int
    micro_batch: int
    ranks: int
    micro_batches: int
    global_tokens: int  # loss tokens in the global batch (TRL's num_items_in_batch over the accumulation)
    global_sequences: int  # sequences with a loss token in the global batch
    sequences: int  # ... in this micro-batch
    width: int  # this micro-batch's padded width (columns)


LossFn = Callable[[torch.Tensor, dict, Accumulation], torch.Tensor]


@dataclass(frozen=True)
class Alternative:
    """A way of weighing the tokens the step may be doing instead of the declared one."""

    says: str  # "`token-mean` taken in each micro-batch alone, then averaged over the 4 parts"
    grid: torch.Tensor  # (B, T) weights


@dataclass(frozen=True)
class AggregationResult:
    mode: str
    constant: int | None
    ranks: int
    micro_batches: int
    value: float
    reference: float
    largest: float  # the largest weight gap, over the declared mode's largest weight
    matched: str | None  # the alternative the step is, where one fits
    where: str  # the first token weighed otherwise, told; "" when none
    parts: tuple[tuple[int, int, int], ...]  # (rank, micro-batch, sequences) of each part

    @property
    def passed(self) -> bool:
        return self.largest <= RTOL and abs(self.value - self.reference) <= RTOL * max(1.0, abs(self.reference))

    def message(self) -> str:
        how = (f"{self.ranks} rank{'s' if self.ranks != 1 else ''} x {self.micro_batches} "
               f"micro-batch{'es' if self.micro_batches != 1 else ''}")
        mode = describe(self.mode, self.constant)
        if self.passed:
            return (f"the loss over {how} weighs every loss token as {mode} of the one global batch weighs it "
                    f"({self.value:.6g} = {self.reference:.6g})")
        head = (f"the loss over {how} is not {mode} of the one global batch ({self.value:.6g}, "
                f"{mode}: {self.reference:.6g})")
        if self.matched:
            return f"{head}: it is {self.matched}; {self.where}"
        return f"{head}, nor any named mode: {self.where}"

    def to_json(self) -> dict:
        return {"passed": self.passed, "mode": self.mode, "constant": self.constant, "ranks": self.ranks,
                "micro_batches": self.micro_batches, "value": self.value, "reference": self.reference,
                "largest_weight_gap": self.largest, "matched": self.matched,
                "parts": [list(p) for p in self.parts], "message": self.message()}


def _fraction(w: float) -> str:
    f = Fraction(w).limit_denominator(1_000_000)
    # a fraction only where it is the weight to float64's rounding: 1/53 + 1e-8 is no 1/53
    return str(f) if abs(float(f) - w) <= 1e-12 * abs(w) else f"{w:.6g}"


def grid_of(batch: RLBatch, per_sequence: Sequence[Fraction | float], indices: Sequence[int] | None = None,
            pieces=None) -> torch.Tensor:
    """(B, T) weights: each sequence's weight on its loss tokens."""
    pieces = batch.sequences if pieces is None else pieces
    grid = torch.zeros(batch.shape, dtype=torch.float64)
    for w, i in zip(per_sequence, range(len(pieces)) if indices is None else indices):
        p = pieces[i]
        grid[p.row, p.first:p.end] = float(w) * batch.mask[p.row, p.first:p.end].double()
    return grid


def _rows_as_sequences(batch: RLBatch) -> list:
    """Each row as one sequence (what a loop that ignores the boundaries sees)."""
    from .batch import Piece

    B, T = batch.shape
    return [Piece(r, 0, 0, T, int(batch.mask[r].sum())) for r in range(B) if int(batch.mask[r].sum())]


def alternatives(batch: RLBatch, parts: list[Part], ranks: int, micro_batches: int,
                 constant: int | None) -> list[Alternative]:
    """Every way of weighing the tokens the explanation tries, in the order it tries them."""
    out = []
    P = len(parts)
    rows = _rows_as_sequences(batch)
    packed = len(rows) < len(batch.sequences)
    for mode in MODES:
        if mode == "seq-mean-token-sum-norm" and constant is None:
            continue
        counts = [p.count for p in batch.sequences]
        out.append(Alternative(f"{describe(mode, constant)} of the global batch",
                               grid_of(batch, weights(mode, counts, constant))))
    if packed:
        for mode in MODES[1:3]:
            out.append(Alternative(f"{describe(mode, constant)} with each pack row taken as one sequence "
                                   f"({len(rows)} rows, not {len(batch.sequences)} sequences: a loop that ignores "
                                   "the boundaries)", grid_of(batch, weights(mode, [p.count for p in rows]),
                                                              pieces=rows)))
    if P > 1:
        for mode in MODES:
            if mode == "seq-mean-token-sum-norm" and constant is None:
                continue
            grid = torch.zeros(batch.shape, dtype=torch.float64)
            for part in parts:
                counts = [batch.sequences[i].count for i in part.sequences]
                if any(counts):
                    local = [w / P for w in weights(mode, counts, constant)]
                    grid += grid_of(batch, local, part.sequences)
            out.append(Alternative(f"{describe(mode, constant)} taken in each micro-batch alone, then averaged over "
                                   f"the {P} parts ({ranks} rank(s) x {micro_batches} micro-batch(es)): a part's "
                                   "own count is not the global batch's", grid))
    return out


def _first_difference(batch: RLBatch, measured: torch.Tensor, expected: torch.Tensor, mode: str,
                      constant: int | None) -> str:
    for i, p in enumerate(batch.sequences):
        m = measured[p.row, p.first:p.end][batch.mask[p.row, p.first:p.end]]
        e = expected[p.row, p.first:p.end][batch.mask[p.row, p.first:p.end]]
        gap = (m - e).abs()
        if float(gap.max()) > RTOL * float(expected.abs().max()):
            k = int(gap.argmax())
            return (f"a token of sequence {i} (row {p.row}, tokens {p.first}..{p.end - 1}, {p.count} loss "
                    f"tokens) weighs {_fraction(float(m[k]))} where {describe(mode, constant)} weighs it "
                    f"{_fraction(float(e[k]))}")
    outside = (measured * ~batch.mask).abs()
    r, t = divmod(int(outside.argmax()), batch.shape[1])
    return f"token {t} of row {r}, outside the loss mask, weighs {_fraction(float(outside[r, t]))}"


def _moving_constant(batch: RLBatch, parts: list[Part], measured: torch.Tensor, constant: int | None) -> str | None:
    """Dr. GRPO's constant read off each part, where each weighs its tokens alike: 'C = 12 in micro-batch 0...'."""
    S = len(batch.sequences)
    seen = []
    for part in parts:
        region = measured[part.rows, part.first:part.end][batch.mask[part.rows, part.first:part.end]]
        # no tokens, unequal weights, or none (a loss that reaches nothing): no constant
        if not len(region) or float(region.min()) <= 0 or float(region.max() - region.min()) > RTOL * float(
                region.max()):
            return None
        c = 1.0 / (S * float(region.mean()))
        if abs(c - round(c)) > 1e-6 * c:
            return None
        seen.append((part, round(c)))
    values = {c for _, c in seen}
    if constant is not None and values == {constant}:
        return None
    widths = all(c == part.width for part, c in seen)
    told = ", ".join(f"{c} in {part.name(parts[-1].rank + 1)}" for part, c in seen)
    return (f"`seq-mean-token-sum-norm` with C = {told}" + (f", not the constant {constant}" if constant else "")
            + (": each is its micro-batch's padded width (verl #5625, Dr. GRPO's constant taken from "
               "loss_mask.shape[-1])" if widths else ""))


def check_aggregation(loss_fn: LossFn, batch: Mapping[str, Any], mode: str, *, micro_batches: int = 1,
                      ranks: int = 1, constant: int | None = None, seed: int = 0,
                      loss_mat: torch.Tensor | None = None) -> AggregationResult:
    """``loss_fn`` over ``ranks`` x ``micro_batches`` parts of ``batch`` against ``mode`` on the global batch.

    ``loss_mat``: the per-token losses to run it on (B, T); drawn at random (seeded) when None.
    """
    mode = mode_of(mode)
    if not callable(loss_fn):
        raise TensorcadError("loss_fn", f"expected a callable (loss_mat, inputs, accumulation) -> loss, got "
                                        f"{type(loss_fn).__name__}")
    rl = read_rl_batch(batch)
    parts = deal(rl, ranks, micro_batches)
    counts = [p.count for p in rl.sequences]
    expected = grid_of(rl, weights(mode, counts, constant))
    if loss_mat is None:
        generator = torch.Generator().manual_seed(seed)
        values = torch.rand(rl.shape, generator=generator, dtype=torch.float64) + 0.5
    else:
        values = torch.as_tensor(loss_mat).detach().double().cpu()
        if tuple(values.shape) != rl.shape:
            raise TensorcadError("loss_mat", f"shape {tuple(values.shape)} differs from the batch's {rl.shape}")
    values = values.clone().requires_grad_()
    total = torch.zeros((), dtype=torch.float64)
    with torch.enable_grad():
        for part in parts:
            info = Accumulation(part.rank, part.micro_batch, ranks, micro_batches, sum(counts), len(counts),
                                len(part.sequences), part.width)
            loss = loss_fn(values[part.rows, part.first:part.end], part.inputs, info)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TensorcadError("loss_fn", f"expected a scalar tensor from {part.name(ranks)}, got "
                                                f"{type(loss).__name__}")
            total = total + loss.reshape(()).double()
        total = total / ranks
        # a loss that reaches no drawn value (a constant, a detached term) weighs every token 0
        (measured,) = torch.autograd.grad(total, values, allow_unused=True) if total.requires_grad else (None,)
    measured = torch.zeros_like(values) if measured is None else measured.detach()
    reference = float((expected * values.detach()).sum())
    scale = float(expected.abs().max())
    largest = float((measured - expected).abs().max()) / scale
    matched, where = None, ""
    if largest > RTOL:
        where = _first_difference(rl, measured, expected, mode, constant)
        fits = [a for a in alternatives(rl, parts, ranks, micro_batches, constant)
                if float((measured - a.grid).abs().max()) <= RTOL * scale]
        matched = fits[0].says if fits else _moving_constant(rl, parts, measured, constant)
        if len(fits) > 1:  # the batch cannot tell them apart; name both
            matched += " (on this batch, equally " + "; ".join(a.says for a in fits[1:]) + ")"
    return AggregationResult(mode, constant, ranks, micro_batches, float(total.detach()), reference, largest,
                             matched, where, tuple((p.rank, p.micro_batch, len(p.sequences)) for p in parts))
