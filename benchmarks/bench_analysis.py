"""How fast the analysis measures a packing, against PyTorch's create_block_mask on the same rows.

Run: python -m pytest benchmarks/bench_analysis.py --benchmark-only

The bounds are the issue's: the whole cold report of llama-3-8b-documents
(``analyze``: unpacked and packed, sampler and blocks, every cache cleared)
under 100 ms at 8,192 tokens and under 1 s at 131,072 (best of five rounds,
since the machine is shared); the engine's block count at least 1,000 times
faster per row than create_block_mask.
"""

from __future__ import annotations

import time

import pytest

from tensorcad.analysis import attention, blocks, report
from tensorcad.analysis.attention import keys_per_query
from tensorcad.analysis.blocks import block_counts
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.design import load
from tensorcad.packing import Packing, draw

DESIGN = load("llama-3-8b-documents")
LLAMA = DESIGN.attentions()[0][0]
PACKING = Packing(1024, 1.0)
TORCH_ROWS = 8  # create_block_mask is timed on a sample of the rows, then scaled per row


def clear_caches() -> None:
    """Every cache between a design and its report: draws, estimates, counts, reports."""
    attention.clear_caches()
    blocks.clear_caches()
    report.clear_caches()


def cold(seq: int) -> None:
    clear_caches()
    report.analyze(DESIGN, OperatingPoint(seq=seq, packing=PACKING))


def test_engine_blocks_vs_create_block_mask(benchmark):
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    seq, rows = 8192, 1024
    keys_per_query(LLAMA, seq, PACKING)  # the rows are drawn (and cached) once, as in the analysis

    def engine():
        blocks.clear_caches()  # the counts are cached; time counting them
        block_counts(LLAMA, seq, PACKING, rows=rows)

    benchmark(engine)
    engine_per_row = benchmark.stats.stats.mean / rows

    documents, _ = draw(TORCH_ROWS, seq, PACKING.mean, PACKING.spread, seed=0)
    doc = torch.from_numpy(documents)

    def same_document_causal(b, h, q_idx, kv_idx):
        flat = doc.view(-1)
        return (q_idx >= kv_idx) & (flat[b * seq + q_idx] == flat[b * seq + kv_idx])

    start = time.perf_counter()
    for r in range(TORCH_ROWS):  # one row a call: B=1 bounds the dense (T, T) mask's memory
        create_block_mask(lambda b, h, q, kv: same_document_causal(b + r, h, q, kv), B=1, H=None,
                          Q_LEN=seq, KV_LEN=seq, device="cpu")
    torch_per_row = (time.perf_counter() - start) / TORCH_ROWS
    ratio = torch_per_row / engine_per_row
    benchmark.extra_info.update(engine_s_per_row=engine_per_row, torch_s_per_row=torch_per_row,
                                per_row_ratio=ratio)
    assert ratio >= 1000


@pytest.mark.parametrize("seq,limit", [(8192, 0.1), (131072, 1.0)])
def test_cold_packed_analysis(benchmark, seq, limit):
    benchmark.pedantic(cold, args=(seq,), rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["limit_s"] = limit
    assert benchmark.stats.stats.min < limit


def test_warm_packed_analysis(benchmark):
    keys_per_query(LLAMA, 8192, PACKING)

    def warm():
        keys_per_query(LLAMA, 8192, PACKING)

    benchmark(warm)
    assert benchmark.stats.stats.mean < 0.001


def test_draw_1024_rows_of_8192(benchmark):
    """The one packing draw the engine, runtime and harness share: about 30 ms here."""
    from tensorcad.packing import draw

    draw(1024, 8192, 1024, 1.0, seed=0)  # first touch of the memory
    benchmark(draw, 1024, 8192, 1024, 1.0, seed=0)
    assert benchmark.stats.stats.min < 0.25
