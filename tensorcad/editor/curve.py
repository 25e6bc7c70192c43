"""The chart: keys a query and blocks per kept score against the mean document length.

The seed's tables (``packed-sequences.md``: 512 keys a query for 1,024-token
documents; 1.19x, 1.37x, 1.74x ... as documents shrink) sample one curve:
the packed analysis of the current design at the current spread and
strategy, as the mean document length runs from a few blocks to the whole
row. Each point is ``analyze(design, op with that mean)``'s packed FLOPs, the
figures ``tensorcad analyze --pack MEAN --pack-spread C --json`` prints
(``report.packed_flops``: the same computation without the rest of the report);
the browser only draws them. The current operating point is analysed the same way and
marked.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.analysis.report import Flops
from tensorcad.design.masks import reads_documents
from tensorcad.design.model import Design
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing

SMALLEST = 64  # tokens: half a block, where the block ratio is already past 4x
# Each point is a whole packed analysis; past this row length the dozen-odd of them take
# tens of seconds an edit, so the chart is not drawn (the readout still is).
MAX_SEQ = 1 << 17


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="chart")


def means(seq: int) -> list[int]:
    """Powers of two from ``SMALLEST`` up to the row: the seed's tables, extended both ways."""
    out, m = [], SMALLEST
    while m <= seq:
        out.append(m)
        m *= 2
    return out or [seq]


def _point(packed: Flops, mean: float) -> dict:
    figures = packed.to_json()  # the very figures `analyze --json` prints as flops.packed
    return {"mean": mean, "keysPerQuery": figures["keysPerQuery"], "blockRatio": figures["blockRatio"]}


def _empty(reason: str) -> dict:
    return {"points": [], "current": None, "spread": None, "strategy": None, "lengths": False, "skipped": [],
            "reason": reason}


def curve(design: Design, op: OperatingPoint, packed: Callable[[OperatingPoint], Flops | None]) -> dict:
    """The chart's points; ``packed`` is ``report.packed_flops`` of ``design`` at an operating point."""
    if not any(reads_documents(a) for a, _ in design.attentions()):
        return _empty("no mask here reads the documents: packing changes nothing")
    if op.seq > MAX_SEQ:
        return _empty(f"the chart is drawn for rows of up to {MAX_SEQ:,} tokens: each point is a whole "
                      "packed analysis")
    packing = op.packing
    # Keys a query and the block ratio depend on the row, the mask and the packing only: the
    # cluster, price, budget and cp are dropped, so editing them reuses the points analysed before.
    op = OperatingPoint(seq=op.seq, packing=packing, train_dtype=op.train_dtype, serve_dtype=op.serve_dtype,
                        seed=op.seed, block=op.block, count=op.count)
    spread = 1.0 if packing is None else packing.spread
    strategy = "stream" if packing is None else packing.strategy
    def point(mean: int) -> dict:
        try:
            return _point(packed(replace(op, packing=Packing(float(mean), spread, strategy=strategy))), float(mean))
        except TensorcadError as e:  # past the analysis budget at this mean: said, not drawn
            return {"mean": mean, "error": str(e)}

    # The points are independent analyses whose numpy and scipy work releases the GIL: on two cores
    # the chart of a new design takes about half the time it would one point after another.
    drawn = list(_pool().map(point, means(op.seq)))
    points = [p for p in drawn if "error" not in p]
    skipped = [p for p in drawn if "error" in p]
    current = None
    if packing is not None:
        figures = packed(op)
        if figures is not None:
            current = _point(figures, packing.mean)
    return {"points": points, "current": current, "spread": spread, "strategy": strategy,
            "lengths": packing is not None and packing.lengths is not None, "skipped": skipped, "reason": None}
