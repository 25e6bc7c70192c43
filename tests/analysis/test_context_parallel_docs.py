"""The table in docs/context-parallel.md is the engine's output: regenerated here and compared.

Run ``python tests/analysis/test_context_parallel_docs.py`` to print it afresh.
Log-normal rows (c = 3) are empirical lengths (``Packing(lengths=Lengths(...))``,
200,000 seeded draws); where this checkout has no ``Lengths`` yet the table
says "pending" rather than hold typed-in figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorcad
from tensorcad.analysis.context_parallel.ranks import SHARDINGS, ContextParallel
from tensorcad.analysis.report import analyze
from tensorcad.packing import Packing

DOC = Path(__file__).resolve().parents[2] / "docs" / "context-parallel.md"
BEGIN, END = "<!-- table: begin -->", "<!-- table: end -->"
SEQ = 131072


def lognormal(mean: float, spread: float, count: int = 200_000, seed: int = 0) -> np.ndarray:
    """Whole-token log-normal lengths of the given mean and coefficient of variation."""
    sigma2 = np.log1p(spread**2)
    draws = np.random.default_rng(seed).lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)
    return np.maximum(np.rint(draws), 1).astype(np.int64)


def _lognormal_packing(mean: float):
    try:
        from tensorcad.packing.corpus.histogram import Lengths
    except ImportError:
        return None
    return Packing(None, lengths=Lengths.of(lognormal(mean, 3.0)))


def _row(design, size: int, label: str, packing) -> str:
    cells = []
    for shard in SHARDINGS:
        if packing is None:
            cells.append("pending")
            continue
        op = tensorcad.OperatingPoint(seq=SEQ, packing=packing, cp=ContextParallel(size, shard))
        cp = analyze(design, op).cp
        cells.append(f"{cp.max_over_mean:.3f} ({cp.slowest_over_balanced:.2f})")
    return f"| {size} | {label} | " + " | ".join(cells) + " |"


def table() -> str:
    design = tensorcad.load("llama-3-8b-documents")
    lines = ["| CP | documents | " + " | ".join(SHARDINGS) + " |", "|" + "---|" * (2 + len(SHARDINGS))]
    for size in (8, 16):
        for mean in (1024, 8192):
            lines.append(_row(design, size, f"gamma, mean {mean:,}, c = 1", Packing(mean, 1.0)))
        for mean in (1024, 8192):
            lines.append(_row(design, size, f"log-normal, mean {mean:,}, c = 3", _lognormal_packing(mean)))
    return "\n".join(lines)


@pytest.mark.slow
def test_docs_table_is_the_engines():
    text = DOC.read_text()
    written = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert written == table()


if __name__ == "__main__":
    print(table())
