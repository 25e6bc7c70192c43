"""`tensorcad lengths` streams: its peak memory does not grow with the corpus.

Run: python -m pytest benchmarks/bench_lengths.py --benchmark-only
     TENSORCAD_BENCH_CORPUS_MB=1024 python -m pytest benchmarks/bench_lengths.py --benchmark-only  # 1 GB

A JSONL corpus of web-text-like documents (log-normal word counts, mean 700
words, c = 3) is written at a small size and at the large one
(``TENSORCAD_BENCH_CORPUS_MB``, 256 MB by default); each is counted by the
CLI in a child process that reports its own peak resident memory. The
bound is a ratio in the same run: the large corpus's peak within 10% (plus
8 MiB) of the small one's, however many times larger it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SMALL_MB = 16
LARGE_MB = int(os.environ.get("TENSORCAD_BENCH_CORPUS_MB", "256"))
WORDS = np.array("the of and to in a is that for it as was with be by on not he this are or his from at".split())

PEAK = """
import resource, sys
from tensorcad.cli import main
code = main(sys.argv[1:])
print("PEAK_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def write_corpus(path, megabytes: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p(9.0))
    written = documents = 0
    with open(path, "w") as f:
        while written < megabytes << 20:
            counts = np.maximum(rng.lognormal(np.log(700) - sigma**2 / 2, sigma, 256).astype(int), 1)
            for n in np.minimum(counts, 200_000):
                line = json.dumps({"text": " ".join(WORDS[rng.integers(0, len(WORDS), n)])}) + "\n"
                f.write(line)
                written += len(line)
                documents += 1
    return documents


def peak_kib(path) -> tuple[int, dict]:
    run = subprocess.run([sys.executable, "-c", PEAK, "lengths", str(path), "-o", "", "--json"],
                         capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stderr
    peak = int(run.stderr.split("PEAK_KIB")[1].split()[0])
    return peak, json.loads(run.stdout)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    small, large = folder / "small.jsonl", folder / "large.jsonl"
    return (small, write_corpus(small, SMALL_MB)), (large, write_corpus(large, LARGE_MB, seed=1))


def test_peak_memory_stays_flat(benchmark, corpora):
    (small, small_docs), (large, large_docs) = corpora
    small_peak, small_summary = peak_kib(small)
    large_peak, large_summary = benchmark.pedantic(peak_kib, args=(large,), rounds=1, iterations=1)
    assert small_summary["documents"] == small_docs and large_summary["documents"] == large_docs
    benchmark.extra_info.update({"small_mb": SMALL_MB, "large_mb": LARGE_MB, "small_peak_mib": small_peak / 1024,
                                 "large_peak_mib": large_peak / 1024, "large_documents": large_docs})
    print(f"\n{SMALL_MB} MB: peak {small_peak / 1024:.1f} MiB; {LARGE_MB} MB ({large_docs:,} documents): "
          f"peak {large_peak / 1024:.1f} MiB")
    assert large_peak <= 1.10 * small_peak + 8 * 1024
