"""``data[coverage]`` of a sharded corpus on the Dask engine ``tensorcad lengths --engine dask`` runs on.

A corpus too big for one process is certified the same way as a small one:
each JSONL shard's digest of what it should give and each loader's digest of
what it gave (one loader a rank, or a worker: each counted where it runs) are
tasks on the cluster, merged there in a tree (``Digest.merge`` is exact in any
grouping); only the difference comes back, and each shard names its first
lost and duplicated ids for the verdict. Ids never leave their task.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Iterable

from tensorcad.errors import TensorcadError

from .coverage import CoverageResult, checked_settings, seen_of, unit_of, verdict


def check_coverage_on_cluster(sources: Iterable[Any], loaders: list[Any], *, pieces: Any = "examples",
                              policy: str = "whole", max_length: int | None = None, resume_at: int | None = None,
                              id_key: str = "id", length_of: str | None = None, workers: int = 2,
                              scheduler: str | None = None) -> CoverageResult:
    """``check_coverage`` with the corpus's JSONL shards and ``loaders`` (one a rank) counted on a Dask cluster.

    ``loaders``: iterables of batches or functions making one, each sent to a
    worker (so picklable: a module's function, a ``functools.partial``, a list).
    Every rank's batches together must be the epoch. ``scheduler``: a cluster's
    address, else a local cluster of ``workers`` processes on 127.0.0.1.
    """
    from tensorcad.packing.corpus.engines import coverage_on_cluster

    if not loaders:
        raise TensorcadError("loaders", "expected one loader a rank (at least one)")
    for loader in loaders:
        checked_settings(policy, max_length, resume_at, loader)
    if length_of is not None and not isinstance(length_of, str):
        raise TensorcadError("length_of", "on a cluster a document's length is a field's (a name), not a function")
    unit = unit_of(pieces)
    started = time.perf_counter()
    parts = [partial(seen_of, loader, pieces, policy, resume_at) for loader in loaders]

    def wanted(merged):
        from tensorcad.packing.corpus.digest import differences

        diff = differences(merged.digest)
        return [diff.keys[diff.lost > 0], diff.keys[diff.duplicated > 0]] if merged.error is None else []

    merged, names, shards, engaged = coverage_on_cluster(
        list(sources), parts, unit=unit, policy=policy, max_length=max_length, id_key=id_key, length_of=length_of,
        wanted=wanted, workers=workers, scheduler=scheduler)
    result = verdict(merged, policy=policy, unit=unit, resume_at=resume_at,
                     name=(lambda groups: names) if names else None, seconds=time.perf_counter() - started)
    figures = {**result.figures, "shards": shards, "loaders": len(loaders), "workers": engaged}
    return CoverageResult(**{**{f: getattr(result, f) for f in result.__dataclass_fields__}, "figures": figures})


__all__ = ["check_coverage_on_cluster"]
