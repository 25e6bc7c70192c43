"""Packed training rows: the one place that draws them.

The engine's sampler, the runtime's made-up packing and the test harness all
draw from here, so they agree on what a packing is: a stream cut into rows
(``stream``), or rows a bin-packing strategy filled (``strategies``).
"""

from __future__ import annotations

import numpy as np

from tensorcad.errors import TensorcadError, check_integer

from .boundaries import RowBoundaries
from .settings import MAX_ROWS, MAX_SEQ, Packing
from .strategies import draw_packed
from .stream import Stream

# Materialising more than this many tokens a call is a mistake, not a
# workload: 2**28 int64 tokens is 2 GiB for each of documents and positions.
MAX_DRAWN_TOKENS = 2**28


def draw_boundaries(
    rows: int, seq: int, mean: float | None = None, spread: float = 1.0, seed: int = 0, *,
    packing: Packing | None = None,
) -> RowBoundaries:
    """The boundaries of the rows ``draw`` would return, without the (rows, seq) arrays."""
    if packing is None or (packing.lengths is None and packing.strategy == "stream"):
        if packing is not None:
            mean, spread = packing.mean, packing.spread
        return Stream.build(rows, seq, mean, spread, seed).boundaries()
    return draw_packed(packing, rows, seq, seed).boundaries


def draw(
    rows: int, seq: int, mean: float | None = None, spread: float = 1.0, seed: int = 0, *,
    packing: Packing | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(documents, positions)``, both int64 (rows, seq), for a seeded packing.

    ``documents`` starts at 0 in each row and rises by one at each boundary;
    ``positions`` is ``positions_of(documents)``. Same arguments, same arrays.
    ``packing`` (instead of mean and spread) draws any packing: empirical
    lengths, any strategy; a row's padding is then a document of its own.
    """
    rows = check_integer(rows, "rows", 1, MAX_ROWS)
    seq = check_integer(seq, "seq", 1, MAX_SEQ)
    if rows * seq > MAX_DRAWN_TOKENS:
        raise TensorcadError(
            "rows",
            f"{rows} x {seq} tokens is more than {MAX_DRAWN_TOKENS} to materialise; "
            "use draw_boundaries",
        )
    boundaries = draw_boundaries(rows, seq, mean, spread, seed, packing=packing)
    # Equal to positions_of(documents), built from the boundaries directly.
    return boundaries.documents(), boundaries.positions()
