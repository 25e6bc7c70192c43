"""Lengths of a corpus held by an engine: a Dask collection on a cluster, or a Hugging Face ``Dataset``.

``lengths_on(dataset)`` counts each partition of a Dask DataFrame, Series or
Bag where it lives, into a small histogram, and merges those in a tree of
tasks on the cluster (eight at a time), so no machine ever holds more than a
partition and a few histograms; the result is exact. A Hugging Face ``Dataset``
(``datasets.load_from_disk``, or built in memory) is read here, batch by batch
of its Arrow table. ``count_on_cluster`` sends the shards of a corpus on disk
to a cluster's workers, one task a shard (``tensorcad lengths --engine dask``);
``coverage_on_cluster`` counts ``data[coverage]`` there the same way, each shard's
digest and each loader's a task, merged in a tree (only what differs comes back).

Dask rather than Ray Data: a histogram is a map over partitions and a
reduction, which ``dask.delayed`` writes as a tree over any collection with no
shuffle, and ``distributed``'s scheduler and workers are plain Python processes
that a ``LocalCluster`` starts on this machine in under a second, where Ray
starts its own control store, raylet and shared-memory object store (sized
at 30% of memory by default) for every cluster. The same call runs against
a cluster's address: ``Client("tcp://scheduler:8786")``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tensorcad.errors import TensorcadError, one_line, shown

from .digest import CoverageCount, due_of, first_named, merge_counted
from .histogram import Lengths
from .reading import BATCH, Counting, Tally, checked_lengths, count_file, lengths_of_counts, records
from . import scheduler as scheduler_module
from .scheduler import probe
from .shards import MAX_WORKERS, Counted, shards_of

FAN_IN = 8  # histograms a merge task adds at once
WHERE = "dataset"


def lengths_on(dataset, *, field: str = "text", column: str | None = None, by: str | None = None,
               tokenizer: str | Path | None = None) -> Lengths:
    """The histogram of a Dask DataFrame, Series or Bag's documents, or a Hugging Face ``Dataset``'s.

    A frame's length column (``column``, else ``token_count`` or ``length``)
    when it has one and neither ``by`` nor ``tokenizer`` is given, else its
    ``field`` of text counted ``by`` whitespace, bytes or the ``tokenizer``
    directory (which every worker must be able to read). A Series or Bag of
    integers is lengths; of strings, texts; a Bag of dicts, records.
    """
    counting = Counting(field=field, by=by, tokenizer=None if tokenizer is None else str(tokenizer), column=column)
    return counted_on(dataset, counting)[0]


def counted_on(dataset, counting: Counting) -> tuple[Lengths, int]:
    """``lengths_on``'s histogram and the empty documents it skipped."""
    if type(dataset).__module__.split(".")[0] == "datasets":
        return lengths_of_counts([_hf_dataset(dataset, counting)], WHERE)
    try:
        import dask
    except ModuleNotFoundError:
        dask = None
    if dask is None or not dask.is_dask_collection(dataset) or not hasattr(dataset, "to_delayed"):
        raise TensorcadError(WHERE, "expected a Dask DataFrame, Series or Bag, or a Hugging Face Dataset; got "
                                    f"{type(dataset).__module__}.{type(dataset).__qualname__}")
    partitions = dataset.to_delayed()
    count = dask.delayed(partition_counts, pure=True)
    parts = [count(p, counting, f"{WHERE}: partition {i}") for i, p in enumerate(partitions)]
    (merged,) = dask.compute(_tree(parts))
    return lengths_of_counts([merged], WHERE)


def _tree(parts: list, merging=None):
    """Histograms (or coverage counts) merged in a tree of tasks, ``FAN_IN`` at a time."""
    import dask

    merge = dask.delayed(merging or merge_counts, pure=True)
    while len(parts) > 1:
        parts = [merge(*parts[i:i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts[0]


def merge_counts(*parts: tuple[np.ndarray, np.ndarray, int]) -> tuple[np.ndarray, np.ndarray, int]:
    """Histograms as (lengths, counts, empty), added exactly."""
    values, inverse = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
    counts = np.zeros(len(values), dtype=np.int64)
    np.add.at(counts, inverse, np.concatenate([p[1] for p in parts]).astype(np.int64))
    return values, counts, sum(int(p[2]) for p in parts)


def partition_counts(partition, counting: Counting, where: str) -> tuple[np.ndarray, np.ndarray, int]:
    """One partition's histogram: a pandas frame or series (a Dask DataFrame's), or a list (a Bag's)."""
    tally = Tally(counting)
    if hasattr(partition, "columns"):  # a pandas DataFrame
        key, lengths = counting.key([str(c) for c in partition.columns], where)
        _add(tally, partition[key], lengths, where, key)
    elif hasattr(partition, "dtype"):  # a pandas Series
        _add(tally, partition, np.issubdtype(partition.dtype, np.integer), where, str(partition.name))
    else:
        items = list(partition)
        if items and all(isinstance(i, dict) for i in items):
            key, lengths = counting.key(items[0], where, "field")
            missing = next((n for n, i in enumerate(items) if key not in i), None)
            if missing is not None:
                raise TensorcadError(f"{where} item {missing}", f"no field {key!r}")
            items = [i[key] for i in items]
        else:
            key, lengths = "item", bool(items) and all(isinstance(i, (int, np.integer)) for i in items)
        _add(tally, items, lengths, where, key)
    return tally.arrays()


def _add(tally: Tally, values, lengths: bool, where: str, key: str) -> None:
    if lengths:
        array = np.asarray(values)
        if array.dtype == object or np.issubdtype(array.dtype, np.floating):  # a null among whole numbers
            raise TensorcadError(f"{where} row 0", f"{key} holds missing or fractional values, not lengths")
        tally.add(True, checked_lengths(array, f"{where} row", 0, key))
        return
    texts = ["" if _missing(t) else t for t in list(values)]  # a missing text: an empty document
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TensorcadError(f"{where} row {bad}", f"{key} is {type(texts[bad]).__name__}, not text")
    for start in range(0, len(texts), BATCH):
        tally.add(False, texts[start:start + BATCH])


def _missing(value) -> bool:
    """None, NaN or pandas' NA: what a frame holds where a text is missing."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType"


def _hf_dataset(dataset, counting: Counting) -> tuple[np.ndarray, np.ndarray, int]:
    """A Hugging Face Dataset's histogram, read in batches of its Arrow table (its indices mapping honoured)."""
    from .reading import ROWS

    key, lengths = counting.key(dataset.column_names, WHERE)
    tally, row = Tally(counting), 0
    for table in dataset.with_format("arrow").iter(batch_size=ROWS if lengths else BATCH):
        column = table.column(key).combine_chunks()
        if lengths:
            if column.null_count:
                raise TensorcadError(f"{WHERE}: row {row}", f"{key} holds nulls")
            tally.add(True, checked_lengths(column.to_numpy(zero_copy_only=False), f"{WHERE}: row", row, key))
        else:
            _add(tally, column.to_pylist(), False, f"{WHERE}: rows from {row}", key)
        row += table.num_rows
    return tally.arrays()


@contextmanager
def cluster(scheduler: str | None = None, workers: int = 2) -> Iterator:
    """A Dask client: of the scheduler at ``scheduler``, or of a local cluster of ``workers`` processes on 127.0.0.1."""
    try:
        from dask.distributed import Client, LocalCluster
    except ModuleNotFoundError:
        raise TensorcadError("--engine", "dask needs dask and distributed: pip install 'tensorcad[dask]'") from None
    if scheduler:
        address = probe(scheduler)  # parsed, and greeted us, before distributed reads a byte of it
        try:
            client = Client(address, timeout=scheduler_module.PROBE_SECONDS)
        except (OSError, ValueError, TimeoutError) as e:
            raise TensorcadError("--scheduler", one_line(f"cannot reach {shown(scheduler)}: {e}")) from None
        with client:
            yield client
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        # 0 or -1 workers: a cluster with no worker waits for one forever.
        raise TensorcadError("--workers", f"must be a whole number in 1..{MAX_WORKERS}, got {shown(workers)}")
    # Workers in processes of one thread each (counting holds the GIL), no dashboard, nothing off this machine,
    # and no log lines: a task's error comes back to the caller as itself.
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, silence_logs=logging.CRITICAL) as local, Client(local) as client:
        yield client


def count_on_cluster(sources: Iterable[str | Path], counting: Counting = Counting(), *, workers: int = 2,
                     scheduler: str | None = None) -> Counted:
    """The shards the sources name, one task each on a Dask cluster's workers, merged in a tree there."""
    import dask

    sources = [str(s) for s in sources]
    shards = shards_of(sources)
    with cluster(scheduler, workers) as client:
        count = dask.delayed(count_file, pure=True)
        (merged,) = dask.compute(_tree([count(str(s), counting) for s in shards]))
        engaged = len(client.nthreads())
    lengths, empty = lengths_of_counts([merged], sources[0] if len(sources) == 1 else ", ".join(sources))
    return Counted(lengths, empty, len(shards), engaged)


# -- coverage: per-shard digests merged on the cluster (data[coverage] at scale) -----------------------------


def shard_due(path: str, unit: str, policy: str, max_length: int | None, id_key: str,
              length_of: str | None) -> CoverageCount:
    """What one JSONL shard's documents should give (its digest with sign -1): a task on a worker."""
    return due_of(records(path), unit, policy, max_length, id_key, length_of)


def shard_first(path: str, groups: list[np.ndarray], id_key: str) -> list:
    """The first id in one shard of each group of keys (None where none is): naming a failure's first examples."""
    ids = (r.get(id_key) if isinstance(r, dict) else r for r in records(path))
    return first_named(ids, groups, path)


def _part(make) -> CoverageCount:
    return make()


def coverage_on_cluster(sources: Iterable[str | Path], seen_parts: list, *, unit: str = "example",
                        policy: str = "whole", max_length: int | None = None, id_key: str = "id",
                        length_of: str | None = None, wanted=None, workers: int = 2,
                        scheduler: str | None = None) -> tuple[CoverageCount, list, int, int]:
    """One epoch's coverage counted on a Dask cluster, shard by shard and part by part.

    Each JSONL shard's due digest and each of ``seen_parts`` (functions
    returning a ``CoverageCount``: a rank's or a worker's loader counted where it
    runs) is a task; they merge in a tree there, so what comes back is only
    what differs. ``wanted(merged)`` gives groups of keys to name: each shard
    finds its first id of each, and the first shard with one names it. Returns
    (merged, names, shards, workers engaged).
    """
    import dask

    shards = shards_of([str(s) for s in sources])
    with cluster(scheduler, workers) as client:
        due = dask.delayed(shard_due, pure=True)
        seen = dask.delayed(_part, pure=False)  # a loader: run it every time asked
        parts = [due(str(s), unit, policy, max_length, id_key, length_of) for s in shards]
        parts += [seen(make) for make in seen_parts]
        (merged,) = dask.compute(_tree(parts, merge_counted))
        groups = wanted(merged) if wanted is not None else []
        names: list = [None] * len(groups)
        if any(len(g) for g in groups):
            first = dask.delayed(shard_first, pure=True)
            for found in dask.compute(*[first(str(s), groups, id_key) for s in shards]):
                names = [n if n is not None else f for n, f in zip(names, found)]
        engaged = len(client.nthreads())
    return merged, names, len(shards), engaged
