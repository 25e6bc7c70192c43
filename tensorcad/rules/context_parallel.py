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
    from tensorcad.analysis.context_parallel.ranks import SHARDINGS, ContextParallel
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


def _least(design: Design, op, context, cp) -> str:
    """Which sharding trains with the least predicted compute a token for this packing, said in words."""
    found = _alternatives(design, op, context)
    what = f"{op.packing.mean:g}-token documents" if op.packing is not None else "one document a row"
    if not found:
        return f"no other sharding splits {op.seq:,} tokens over {op.cp.size} ranks"
    flops, ratio, shard = found[0]
    if flops >= cp.train_per_token:
        return f"{op.cp.shard} is already the sharding with the least predicted compute for {what}"
    return (f"the least predicted compute for {what}: {shard} (slowest rank {ratio:.2f}x the mean, "
            f"training compute a token cut by {1 - flops / cp.train_per_token:.1%})")


@rule("cp-imbalance", "warn", f"context parallelism whose slowest rank computes more than {WARN_RATIO:.2f}x "
      "the mean rank's attention blocks, or whose ranks together compute more than the row itself "
      "(per-document chunks cutting blocks, padding), or that PyTorch will run otherwise than asked "
      "(its default balancer becoming none, per-document documents 2·cp does not divide, PTRR given "
      "several masks); names the sharding that would train faster")
def cp_imbalance(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.cp is None:
        return
    cp = context.report().cp
    if cp is None:
        return
    for case in cp.pytorch:  # what PyTorch will do, said before launch
        yield Diagnostic("cp-imbalance", "warn", f"{case.message}; {_least(design, op, context, cp)}", "cp")
    # The step's attention over the row's own: imbalance times what the ranks add together.
    added = cp.slowest_over_balanced / cp.max_over_mean
    if cp.max_over_mean <= WARN_RATIO and added <= WARN_RATIO:
        return
    if any(case.case == "default-balancer-none" for case in cp.pytorch):
        return  # said above: the imbalance is the fallback's
    what = (f"{op.packing.mean:g}-token documents" if op.packing is not None else "one document a row")
    message = f"{op.cp.shard} sharding over {op.cp.size} ranks ({what} at {op.seq:,} tokens): "
    if cp.max_over_mean > WARN_RATIO:
        message += f"the slowest rank computes {cp.max_over_mean:.2f}x the mean rank's attention blocks"
    else:
        message += (f"the ranks together compute {added:.2f}x the row's own attention blocks "
                    f"(chunks of documents cut {op.block}-token blocks, and padding)")
    better = [a for a in _alternatives(design, op, context) if a[0] < cp.train_per_token]
    if better:
        flops, ratio, shard = better[0]
        message += (f"; {shard} sharding would bring the slowest rank to {ratio:.2f}x the mean and cut the "
                    f"training compute a token by {1 - flops / cp.train_per_token:.1%}")
    else:
        message += "; no other sharding does better for this packing"
    yield Diagnostic("cp-imbalance", "warn", message, "cp")
