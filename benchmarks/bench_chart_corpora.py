"""The editor chart's corpora, two of the steps that draw them, each against the way it was done before, in one run.

    python -m pytest benchmarks/bench_chart_corpora.py -o python_files='bench_*.py' -p no:xdist -s

- Gamma lengths: ``document_lengths`` (the quantile evaluated where the rounded
  lengths step, ``packing/whole_quantiles.py``) against the quantile at every
  stratum, for the chart's eight corpora at 8,192 tokens, spread 0.5.
- Range-decided tiles: a row's document blocks counted from a cumulative table
  against a binary search an entry (``analysis/range_tiles.py``; the search is
  what a table too large falls back to), on the chart's corpora's rows.

``extra_info`` holds both ways' seconds and their ratio; what is asserted is that
both ways give the same arrays. Under ``--benchmark-disable`` (CI) one corpus, once.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.special import gammaincinv

from tensorcad.analysis import range_tiles
from tensorcad.analysis.rows import packed_rows
from tensorcad.design.block_ranges import block_ranges
from tensorcad.design import load
from tensorcad.packing import Packing, document_lengths

SEQ = 8192
SPREAD = 0.5
MEANS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
COUNT = 32_000  # documents a corpus, at least (the chart's bfd corpora)


def every_stratum(mean: float, count: int) -> np.ndarray:
    strata = (np.arange(count, dtype=np.float64) + 0.5) / count
    whole = np.maximum(np.floor(gammaincinv(1 / SPREAD**2, strata) * mean * SPREAD**2 + 0.5), 1).astype(np.int64)
    np.random.default_rng(0).shuffle(whole)
    return whole


def timed(f, *args):
    start = time.perf_counter()
    out = f(*args)
    return out, time.perf_counter() - start


def corpora(disabled: bool) -> list[tuple[int, int]]:
    chosen = MEANS[:1] if disabled else MEANS
    return [(m, max(COUNT, 1024 * SEQ // m)) for m in chosen]


def test_gamma_lengths_where_they_step_against_every_stratum(benchmark):
    document_lengths(64, SPREAD, 10)  # scipy.special's import, outside the timings
    now = before = 0.0
    for mean, count in corpora(benchmark.disabled):
        fast, fast_s = timed(document_lengths, mean, SPREAD, count)
        slow, slow_s = timed(every_stratum, mean, count)
        assert np.array_equal(fast, slow)
        now, before = now + fast_s, before + slow_s
    benchmark.pedantic(document_lengths, args=(64, SPREAD, corpora(True)[0][1]), rounds=1, iterations=1)
    benchmark.extra_info.update({"now_s": round(now, 4), "every_stratum_s": round(before, 4),
                                 "ratio": round(before / now, 2)})


def test_tiles_counted_from_a_table_against_a_search(benchmark, monkeypatch):
    attention = load("llama-3-8b-documents").attentions()[0][0]
    ranges = block_ranges(attention)
    blocks = SEQ // 128
    now = before = 0.0
    for mean, _ in corpora(benchmark.disabled):
        batch = packed_rows(SEQ, Packing(float(mean), SPREAD), 0, 1024)
        row = np.repeat(np.arange(batch.count), blocks)
        qb = np.tile(np.arange(blocks), batch.count)
        args = (ranges, batch, row, np.zeros_like(row), qb, 128, SEQ)
        batch.over_blocks("documents", 128)
        tabulated, table_s = timed(range_tiles.decide_from_ranges, *args)
        with monkeypatch.context() as m:
            m.setattr(range_tiles, "TABLE_PER_ENTRY", 0)
            m.setattr(range_tiles, "TABLE_FREE", 0)
            searched, search_s = timed(range_tiles.decide_from_ranges, *args)
        assert all(np.array_equal(a, b) for a, b in zip(tabulated, searched))
        now, before = now + table_s, before + search_s
    benchmark.pedantic(range_tiles.decide_from_ranges, args=args, rounds=1, iterations=1)
    benchmark.extra_info.update({"table_s": round(now, 4), "search_s": round(before, 4),
                                 "ratio": round(before / now, 2)})


@pytest.fixture(autouse=True)
def report(benchmark):
    yield
    if not benchmark.disabled:
        print(benchmark.extra_info)
