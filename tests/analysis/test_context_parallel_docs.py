"""The table in docs/context-parallel.md is the engine's output: regenerated here and compared.

Run ``python tests/analysis/test_context_parallel_docs.py`` to print it afresh.
Log-normal rows (c = 3) wait for empirical lengths (``Packing(lengths=...)``):
until then the table says so rather than hold typed-in figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tensorcad
from tensorcad.analysis.context_parallel import SHARDINGS, ContextParallel
from tensorcad.analysis.report import analyze
from tensorcad.packing import Packing

DOC = Path(__file__).resolve().parents[2] / "docs" / "context-parallel.md"
BEGIN, END = "<!-- table: begin -->", "<!-- table: end -->"
SEQ = 131072


def table() -> str:
    design = tensorcad.load("llama-3-8b-documents")
    head = "| CP | documents | " + " | ".join(SHARDINGS) + " |"
    lines = [head, "|" + "---|" * (2 + len(SHARDINGS))]
    for size in (8, 16):
        for mean in (1024, 8192):
            cells = []
            for shard in SHARDINGS:
                op = tensorcad.OperatingPoint(seq=SEQ, packing=Packing(mean, 1.0), cp=ContextParallel(size, shard))
                cp = analyze(design, op).cp
                cells.append(f"{cp.max_over_mean:.3f} ({cp.slowest_over_balanced:.2f})")
            lines.append(f"| {size} | gamma, mean {mean:,}, c = 1 | " + " | ".join(cells) + " |")
        for mean in (1024, 8192):
            lines.append(f"| {size} | log-normal, mean {mean:,}, c = 3 | "
                         + " | ".join(["pending"] * len(SHARDINGS)) + " |")
    return "\n".join(lines)


@pytest.mark.slow
def test_docs_table_is_the_engines():
    text = DOC.read_text()
    written = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert written == table()


if __name__ == "__main__":
    print(table())
