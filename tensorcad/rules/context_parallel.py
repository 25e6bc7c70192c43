"""cp-imbalance: context parallelism whose slowest rank waits the rest, and the sharding that would not."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from ..design.model import Design
from ..errors import TensorcadError
from .registry import Diagnostic, rule

WARN_RATIO = 1.10  # slowest rank's attention over the mean rank's


def _alternatives(design: Design, op, context):
    """(train FLOPs a token, max/mean, sharding) for every other sharding this row admits."""
    from ..analysis.context_parallel import SHARDINGS, ContextParallel
    from ..analysis.report import analyze

    found = []
    for shard in SHARDINGS:
        if shard == op.cp.shard:
            continue
        try:
            other = analyze(design, replace(op, cp=ContextParallel(op.cp.size, shard))).cp
        except TensorcadError:
            continue  # this row does not split that way, or the mask is not counted under it
        found.append((other.train_per_token, other.max_over_mean, shard))
    return sorted(found)


@rule("cp-imbalance", "warn", f"context parallelism whose slowest rank computes more than {WARN_RATIO:.2f}x "
      "the mean rank's attention blocks; names the sharding that would train faster for this packing")
def cp_imbalance(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.cp is None:
        return
    cp = context.report().cp
    if cp is None or cp.max_over_mean <= WARN_RATIO:
        return
    what = (f"{op.packing.mean:g}-token documents" if op.packing is not None else "one document a row")
    message = (f"{op.cp.shard} sharding over {op.cp.size} ranks: the slowest rank computes "
               f"{cp.max_over_mean:.2f}x the mean rank's attention blocks ({what} at {op.seq:,} tokens)")
    better = [a for a in _alternatives(design, op, context) if a[0] < cp.train_per_token]
    if better:
        flops, ratio, shard = better[0]
        message += (f"; {shard} would give {ratio:.2f} and {cp.train_per_token / flops:.2f}x less "
                    "training compute a token")
    else:
        message += "; no other sharding does better for this packing"
    yield Diagnostic("cp-imbalance", "warn", message, "cp")
