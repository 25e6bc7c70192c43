"""`tensorcad lengths` over a corpus in shards: documents a second, one worker against two, a token_count column
against tokenizing, and peak memory flat from a small corpus to a large one.

Run: python -m pytest benchmarks/bench_lengths.py -o python_files='bench_*.py' -p no:xdist -s
     TENSORCAD_BENCH_CORPUS_MB=1024 python -m pytest benchmarks/bench_lengths.py -o python_files='bench_*.py' -p no:xdist -s

The corpus is written here: web-text-like documents (log-normal word counts,
mean 700 words, c = 3, at most 200,000, one of that length) in 8 shards twice over, as JSONL and as Parquet (the
text and its ``token_count``), at ``SMALL_MB`` and at ``TENSORCAD_BENCH_CORPUS_MB``
(256 MB by default; a few MB under ``--benchmark-disable``, as CI runs it). Each
count is the CLI in a child process, which reports its wall time and the peak
resident memory of itself and of its largest worker. Every figure printed is a
ratio of two runs of this one session; what is asserted is that every path
finds the same histogram and that the large corpus's peaks stay within 10%
(plus 8 MiB) of the small one's. Tokenizing (a word-level ``tokenizers``
tokenizer, one token a word, so its histogram is the others') reads a quarter
of the shards: documents a second do not depend on how many there are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SHARDS = 8
SMALL_MB = 16
LONGEST = 200_000  # words: the longest document, in both corpora
WORDS = np.array("the of and to in a is that for it as was with be by on not he this are or his from at".split())

CHILD = """
import json, sys, time
from tensorcad.cli import main
start = time.perf_counter()
code = main(sys.argv[1:])
wall = time.perf_counter() - start
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("BENCH", json.dumps({"wall": wall, "self_kib": peak}), file=sys.stderr)
sys.exit(code)
"""


def high_water_kib(pid: int) -> int:
    """A live process's peak resident memory (VmHWM: of this program, unlike ru_maxrss, which counts what a
    process held before it exec'd, so a child of a large parent starts at the parent's size)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def write_shards(folder, megabytes: int, seed: int) -> int:
    """8 JSONL shards and 8 Parquet shards of the same documents; how many documents there are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    (folder / "jsonl").mkdir()
    (folder / "parquet").mkdir()
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p(9.0))
    documents = 0
    for shard in range(SHARDS):
        # Both corpora hold the longest document (a counter holds one document's words at a time): what is
        # compared is then what the corpus's size adds, not what its heavier tail's longest document does.
        texts, counts = ([" ".join(WORDS[rng.integers(0, len(WORDS), LONGEST)])], [LONGEST]) if shard == 0 else ([], [])
        written = len(texts[0]) if texts else 0
        while written < (megabytes << 20) // SHARDS:
            for n in np.minimum(np.maximum(rng.lognormal(np.log(700) - sigma**2 / 2, sigma, 256).astype(int), 1),
                                LONGEST):
                texts.append(" ".join(WORDS[rng.integers(0, len(WORDS), n)]))
                counts.append(int(n))
                written += len(texts[-1]) + 12
        with open(folder / "jsonl" / f"part-{shard}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        pq.write_table(pa.table({"text": texts, "token_count": counts}), folder / "parquet" / f"part-{shard}.parquet",
                       row_group_size=4096)
        documents += len(texts)
    return documents


def tokenizer_dir(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def count(*args) -> dict:
    """One CLI count in a child process: its summary, wall seconds, and the peak memory (KiB) of the command and
    of its largest worker, whose high-water mark is read every 20 ms while it lives."""
    import time

    import psutil

    child = subprocess.Popen([sys.executable, "-c", CHILD, "lengths", *map(str, args), "-o", "", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TOKENIZERS_PARALLELISM": "true"})
    workers: dict[int, int] = {}
    parent = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            for worker in parent.children(recursive=True):
                workers[worker.pid] = max(workers.get(worker.pid, 0), high_water_kib(worker.pid))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = child.communicate(timeout=3600)
    assert child.returncode == 0, err
    return {**json.loads(out), **json.loads(err.split("BENCH")[1]), "worker_kib": max(workers.values(), default=0)}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, request):
    disabled = request.config.getoption("benchmark_disable", False)
    large_mb = 4 if disabled else int(os.environ.get("TENSORCAD_BENCH_CORPUS_MB", "256"))
    small_mb = 1 if disabled else SMALL_MB
    folder = tmp_path_factory.mktemp("shards")
    small, large = folder / "small", folder / "large"
    return {"small": (small, write_shards(small, small_mb, 0), small_mb),
            "large": (large, write_shards(large, large_mb, 1), large_mb),
            "tokenizer": tokenizer_dir(folder / "tokenizer")}


def test_documents_a_second_and_peak_memory(benchmark, corpora):
    small, small_docs, small_mb = corpora["small"]
    large, large_docs, large_mb = corpora["large"]
    tokenizer = corpora["tokenizer"]
    quarter = [large / "parquet" / f"part-{i}.parquet" for i in range(SHARDS // 4)]
    runs = {
        "jsonl, 1 worker": count(large / "jsonl"),
        "jsonl, 2 workers": count(large / "jsonl", "--workers", 2),
        "parquet token_count, 1 worker": count(large / "parquet"),
        "parquet token_count, 2 workers": count(large / "parquet", "--workers", 2),
        "parquet tokenizing, 1 worker": count(*quarter, "--tokenizer", tokenizer),
        "parquet tokenizing, 2 workers": count(*quarter, "--tokenizer", tokenizer, "--workers", 2),
    }
    smalls = {"jsonl, 1 worker": count(small / "jsonl"), "jsonl, 2 workers": count(small / "jsonl", "--workers", 2),
              "parquet token_count, 1 worker": count(small / "parquet")}
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the timings are the children's, above
    for name, run in runs.items():
        run["documents_a_second"] = run["documents"] / run["wall"]
    full = {k: v for k, v in runs.items() if "tokenizing" not in k}
    assert all(r["documents"] == large_docs and r["tokens"] == full["jsonl, 1 worker"]["tokens"] for r in full.values())
    assert runs["parquet tokenizing, 1 worker"]["tokens"] == runs["parquet tokenizing, 2 workers"]["tokens"]
    rate = {k: v["documents_a_second"] for k, v in runs.items()}
    ratios = {
        "jsonl: 2 workers over 1": rate["jsonl, 2 workers"] / rate["jsonl, 1 worker"],
        "parquet token_count: 2 workers over 1": rate["parquet token_count, 2 workers"]
        / rate["parquet token_count, 1 worker"],
        "parquet tokenizing: 2 workers over 1": rate["parquet tokenizing, 2 workers"]
        / rate["parquet tokenizing, 1 worker"],
        "token_count over tokenizing (1 worker)": rate["parquet token_count, 1 worker"]
        / rate["parquet tokenizing, 1 worker"],
        "token_count over counting words in JSONL (1 worker)": rate["parquet token_count, 1 worker"]
        / rate["jsonl, 1 worker"],
    }
    peaks = {}  # (small, large) MiB: the command's own, and with workers its largest worker's
    for name, small_run in smalls.items():
        for key, whose in (("self_kib", "the command"), ("worker_kib", "its largest worker")):
            if key == "self_kib" or "2 workers" in name:
                peaks[f"{name}, {whose}"] = (small_run[key] / 1024, runs[name][key] / 1024)
    benchmark.extra_info.update({"small_mb": small_mb, "large_mb": large_mb, "large_documents": large_docs,
                                 "documents_a_second_ratios": ratios, "peaks_mib": peaks})
    print(f"\n{large_mb} MB in {SHARDS} shards, {large_docs:,} documents (tokenizing: {len(quarter)} shards)")
    for name, value in rate.items():
        print(f"  {name}: {value:,.0f} documents a second")
    for name, value in ratios.items():
        print(f"  {name}: {value:.2f}x")
    for name, (a, b) in peaks.items():
        print(f"  peak memory, {name}: {small_mb} MB {a:.1f} MiB, {large_mb} MB {b:.1f} MiB ({b / a:.2f}x)")
    for a, b in peaks.values():
        assert b <= 1.10 * a + 8, peaks
