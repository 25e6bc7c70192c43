"""Lengths files and corpora read in linear time (#32): ten times the input, about ten times the time.

Run: python -m pytest benchmarks/bench_linear_reading.py --benchmark-only
     TENSORCAD_BENCH_KEYS=1000000 TENSORCAD_BENCH_DOCUMENT_MB=200 python -m pytest benchmarks/bench_linear_reading.py

Before #32 a JSON histogram looked up each key's line in the whole text (100k keys: 51-102 s) and a plain-text
document was copied again with every 1 MiB chunk (300 MB: over a minute): quadratic, so ten times the input took
a hundred times as long. The bound is a ratio in the same run, never seconds: the large input's time over the
small one's, below 3x the size ratio (linear gives the ratio itself; quadratic its square).
"""

from __future__ import annotations

import json
import os
import time

KEYS = int(os.environ.get("TENSORCAD_BENCH_KEYS", "100000"))
DOCUMENT_MB = int(os.environ.get("TENSORCAD_BENCH_DOCUMENT_MB", "64"))


def best_of(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def histogram(path, keys: int):
    path.write_text("{\n" + ",\n".join(f'  "{n}": {n % 5 + 1}' for n in range(1, keys + 1)) + "\n}\n")
    return path


def test_a_histogram_reads_in_linear_time(benchmark, tmp_path):
    from tensorcad.packing.corpus.histogram import load_lengths

    small, large = histogram(tmp_path / "small.json", KEYS // 10), histogram(tmp_path / "large.json", KEYS)
    ratio = best_of(lambda: load_lengths(large)) / best_of(lambda: load_lengths(small))
    benchmark.extra_info["time ratio, 10x the keys"] = ratio
    lengths = benchmark(load_lengths, large)
    assert len(lengths.values) == KEYS
    assert ratio < 30, f"10x the keys took {ratio:.1f}x the time: not linear"


def test_one_long_document_reads_in_linear_time(benchmark, tmp_path):
    from tensorcad.packing.corpus.reading import count_lengths

    word = "w" * 15 + " "  # 16 bytes a word: 64 MB is 4M words, under the 2^24 tokens a row holds
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_text(word * (DOCUMENT_MB * 2**20 // 16 // 8))
    large.write_text(word * (DOCUMENT_MB * 2**20 // 16))
    ratio = best_of(lambda: count_lengths([large]), 2) / best_of(lambda: count_lengths([small]), 2)
    benchmark.extra_info["time ratio, 8x the document"] = ratio
    lengths, _ = benchmark(count_lengths, [large])
    assert lengths.values == (DOCUMENT_MB * 2**20 // 16,)
    assert ratio < 24, f"8x the document took {ratio:.1f}x the time: not linear"


def words_by_chunks(path) -> int:
    """The reference: the file read in 1 MiB chunks, decoded and its words counted, in plain Python."""
    import codecs

    decoder, words, inside = codecs.getincrementaldecoder("utf-8")(), 0, False
    with open(path, "rb") as f:
        while data := f.read(1 << 20):
            chunk = decoder.decode(data)
            words += len(chunk.split()) - (inside and chunk[:1].strip() != "")
            inside = chunk[-1:].strip() != ""
    return words


def test_lengths_counts_a_300_mb_document_in_bounded_memory(benchmark, tmp_path):
    """The issue's figure: `tensorcad lengths` on a 300 MB single-document file (refused past 256 MiB before)."""
    from tensorcad import cli

    megabytes = 3 if benchmark.disabled else int(os.environ.get("TENSORCAD_BENCH_LONG_MB", "300"))
    word = "w" * 31 + " "  # 32 bytes a word: 300 MB is 9.8M words, under the 2^24 tokens a row holds
    path = tmp_path / "one.txt"
    with path.open("w") as f:
        for _ in range(megabytes):
            f.write(word * (10**6 // 32))
    expected = megabytes * (10**6 // 32)
    reference = best_of(lambda: words_by_chunks(path), 1)
    assert words_by_chunks(path) == expected
    out = tmp_path / "h.json"

    def count(corpus=path):
        assert cli.main(["lengths", str(corpus), "--by", "whitespace", "--json", "-o", str(out), "--force"]) == 0

    (tmp_path / "warm.txt").write_text("a b")
    count(tmp_path / "warm.txt")  # the CLI's imports once, outside the figure
    started = time.perf_counter()
    benchmark.pedantic(count, rounds=1, iterations=1)
    seconds = time.perf_counter() - started
    assert json.loads(out.read_text()) == {str(expected): 1}
    benchmark.extra_info["seconds"] = seconds
    benchmark.extra_info["time over a plain chunked word count"] = seconds / reference
    # CI-sized, the CLI's fixed cost is most of it: the ratio is held at the figure's size only.
    assert benchmark.disabled or seconds / reference < 4, f"{seconds / reference:.1f}x a plain chunked word count"
