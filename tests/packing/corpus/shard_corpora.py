"""Corpora in shards for the tests of shards and engines: the same documents in 8 shards and in one file.

Each reference histogram is counted here, document by document, with
``collections.Counter`` over ``str.split`` (or the ``token_count`` written),
sharing nothing with ``tensorcad.packing.corpus``.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np

from tensorcad.packing.corpus.histogram import Lengths

SHARDS = 8
WORDS = np.array("the of and to in a is that for it as was with be by on not he this are".split())


def texts(count: int = 4000, seed: int = 0) -> list[str]:
    """Documents of log-normal word counts (some empty, a few long)."""
    rng = np.random.default_rng(seed)
    counts = np.floor(rng.lognormal(3.5, 1.2, count)).astype(int)
    counts[rng.random(count) < 0.02] = 0
    return [" ".join(WORDS[rng.integers(0, len(WORDS), n)]) for n in counts]


def reference(values) -> Lengths:
    """The histogram of lengths (0 is an empty document: skipped), by Counter."""
    table = Counter(v for v in values if v > 0)
    return Lengths(tuple(sorted(table)), tuple(table[v] for v in sorted(table)))


def words_of(documents: list[str]) -> Lengths:
    return reference([len(t.split()) for t in documents])


def _lines(documents) -> bytes:
    return "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(documents)).encode()


def text_shards(folder: Path, documents: list[str]) -> tuple[list[Path], Path]:
    """The documents in 8 shards, JSONL plain, gzip and zstd, Parquet and Arrow in turn; and all in one JSONL."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for i, part in enumerate(np.array_split(np.array(documents, dtype=object), SHARDS)):
        part = list(part)
        kind = i % 5
        path = folder / f"part-{i:05d}" if kind else folder / f"part-{i:05d}.jsonl"
        if kind == 0:
            path.write_bytes(_lines(part))
        elif kind == 1:
            path = path.with_suffix(".jsonl.gz")
            path.write_bytes(gzip.compress(_lines(part)))
        elif kind == 2:
            path = path.with_suffix(".jsonl.zst")
            path.write_bytes(zstandard.ZstdCompressor().compress(_lines(part)))
        elif kind == 3:
            path = path.with_suffix(".parquet")
            pq.write_table(pa.table({"id": list(range(len(part))), "text": part}), path, row_group_size=300)
        else:
            path = path.with_suffix(".arrow")
            table = pa.table({"text": part})
            with pa.ipc.new_stream(path, table.schema) as writer:
                writer.write_table(table, max_chunksize=200)
        shards.append(path)
    whole = folder.parent / f"{folder.name}-all.jsonl"
    whole.write_bytes(_lines(documents))
    return shards, whole


def count_shards_parquet(folder: Path, counts: np.ndarray) -> tuple[list[Path], Path]:
    """Lengths as a token_count column (beside a text column that says otherwise), in 8 Parquet shards and one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for i, part in enumerate(np.array_split(counts, SHARDS)):
        path = folder / f"train-{i:05d}-of-{SHARDS:05d}.parquet"
        pq.write_table(pa.table({"text": ["x"] * len(part), "token_count": part}), path, row_group_size=1000)
        shards.append(path)
    whole = folder.parent / f"{folder.name}-all.parquet"
    pq.write_table(pa.table({"text": ["x"] * len(counts), "token_count": counts}), whole)
    return shards, whole
