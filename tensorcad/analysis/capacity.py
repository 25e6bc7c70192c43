"""The routed tokens a capacity factor drops, one document a row and under a packing (issue 44).

An expert of a ``moe`` node with a capacity factor takes at most
``C = ceil(capacity x n x top_k / experts)`` of the ``n`` tokens of its group (a
row, or every row of the micro-batch) and drops the rest (Switch Transformers,
section 2.2; Megatron-LM's moe_expert_capacity_factor). How many it drops
depends on the router, which a design does not know before training; the
figure here is for a *balanced* router, the state the load-balancing loss
drives it to: each token sends its top_k to a uniformly random set of distinct
experts (a softmax or sigmoid router over i.i.d. scores does exactly this).
Then an expert's load in a group of ``n`` routed tokens is Binomial(n, top_k /
experts), whatever the other experts receive, and by linearity of expectation
the group drops ``experts x E[(load - C)+]`` of its ``n x top_k`` routings, a
closed form (the binomial's partial expectation). The drop policy decides
*which* routings go (the later positions, or the lowest scores), never how
many.

Packing enters through ``n``. One document a row, or rows packed back to
back, every row routes all of its ``seq`` tokens; a packing that pads routes
only the real tokens of each row (padding masked out of the router, as
transformers and torchtitan now do), so a row's capacity shrinks with it and
the expectation is the closed form averaged over the rows the seeded sampler
draws (``analysis.rows.packed_rows``, the rows every other packed figure reads),
with its standard error. Small groups lose more: a binomial's excess over a
capacity proportional to its mean falls as 1/sqrt(n), which is why packing
short documents into full rows drops fewer tokens than padding each alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..design.model import Design, Node
from ..errors import TensorcadError
from ..packing import Packing
from .rows import packed_rows


def capacity_of(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Routings an expert takes from a group of ``tokens`` routed tokens: ceil(factor x tokens x top_k / experts)."""
    return math.ceil(factor * tokens * top_k / experts)


def expected_dropped(tokens, experts: int, top_k: int, factor: float) -> np.ndarray:
    """Expected routings a group of ``tokens`` routed tokens drops under a balanced router (array or scalar).

    With L ~ Binomial(n, p), p = top_k / experts and C the capacity,
    E[(L - C)+] = E[L; L > C] - C P(L > C) = n p P(Binomial(n - 1, p) >= C) - C P(L > C)
    (the partial expectation of a binomial), times the experts.
    """
    n = np.asarray(tokens, dtype=np.int64)
    p = top_k / experts
    capacity = np.ceil(factor * n * top_k / experts)
    over = n * p * stats.binom.sf(capacity - 1, np.maximum(n - 1, 0), p) - capacity * stats.binom.sf(capacity, n, p)
    return experts * np.maximum(over, 0.0)  # no token (n = 0, capacity 0): 0 - 0; the floor takes rounding's -0


@dataclass(frozen=True)
class CapacityDrops:
    """One capacity-bound ``moe`` node: the share of its routings dropped, one document a row and packed."""

    node: str
    layers: int
    factor: float
    scope: str
    unpacked: float  # share of routings dropped, every row routing its seq tokens
    packed: float | None  # under the operating point's packing (real tokens routed); None unpacked
    packed_error: float = 0.0  # the sampler's standard error of `packed`; 0 where every row is full (exact)
    micro_batch: int = 1  # rows a group holds under scope 'batch'

    def to_json(self) -> dict:
        out = {"node": self.node, "layers": self.layers, "capacity": self.factor, "scope": self.scope,
               "microBatch": self.micro_batch, "droppedUnpacked": self.unpacked}
        if self.packed is not None:
            out["droppedPacked"] = self.packed
            out["droppedPackedError"] = self.packed_error
        return out


def dropped_share(group_tokens: np.ndarray, experts: int, top_k: int, factor: float) -> tuple[float, float]:
    """(share of all routings dropped, its standard error) over sampled groups of the given routed tokens.

    The share is a ratio of sums (drops over routings); its error is the ratio estimator's
    (Cochran 1977, 6.9), zero when every group holds the same tokens (the closed form is then exact).
    """
    n = np.asarray(group_tokens, dtype=np.float64)
    if n.sum() <= 0:
        return 0.0, 0.0
    drops = expected_dropped(n.astype(np.int64), experts, top_k, factor)
    share = float(drops.sum() / (n.sum() * top_k))
    if len(n) < 2:  # one group: no spread to estimate (equal groups give residuals of 0, an error of 0)
        return share, 0.0
    residual = drops - share * n * top_k
    error = float(np.sqrt(np.var(residual, ddof=1) / len(n)) / (n.mean() * top_k))
    return share, error


def capacity_drops(design: Design, seq: int, packing: Packing | None = None, seed: int = 0, rows: int = 1024,
                   micro_batch: int = 1) -> tuple[CapacityDrops, ...]:
    """Every capacity-bound ``moe`` node of the design: the share of its routings dropped at ``seq`` tokens a row.

    ``micro_batch``: rows a group holds where the node's capacity_scope is 'batch' (a 'row' scope
    groups each row alone). Under ``packing`` the groups are the sampler's rows, their real tokens routed.
    """
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or not 1 <= micro_batch <= rows:
        raise TensorcadError("micro_batch", f"expected a whole number of rows in 1..{rows}, got {micro_batch!r}")
    counted: dict[str, tuple[Node, int]] = {}
    for node, times in design.walk():
        if node.kind == "moe" and node.params.get("capacity") is not None:
            seen = counted.get(node.id)
            counted[node.id] = (node, times + (seen[1] if seen else 0))
    out = []
    for node, layers in counted.values():
        p = node.params
        group = micro_batch if p["capacity_scope"] == "batch" else 1
        unpacked = float(expected_dropped(group * seq, p["experts"], p["top_k"], p["capacity"]) /
                         (group * seq * p["top_k"]))
        packed = error = None
        if packing is not None:
            boundaries = packed_rows(seq, packing, seed, rows).boundaries
            padding = boundaries.padding if boundaries.padding is not None else np.zeros(boundaries.rows)
            real = seq - np.asarray(padding, dtype=np.int64)
            real = real[: len(real) // group * group].reshape(-1, group).sum(axis=1) if group > 1 else real
            packed, error = dropped_share(real, p["experts"], p["top_k"], p["capacity"])
        out.append(CapacityDrops(node.id, layers, float(p["capacity"]), p["capacity_scope"], unpacked, packed,
                                 error or 0.0, group))
    return tuple(out)


__all__ = ("CapacityDrops", "capacity_drops", "capacity_of", "dropped_share", "expected_dropped")
