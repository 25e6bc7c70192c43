"""data[coverage] of a sharded corpus: per-shard and per-rank counts merged equal the one-process count.

Without a cluster (the default suite): each shard's due count and each rank's
seen count merged by hand in a scrambled grouping give check_coverage's
verdict, figure for figure. On a local Dask cluster of 2 worker processes
(-m slow: it takes seconds to start): check_coverage_on_cluster gives it too.
"""

from __future__ import annotations

import json

import pytest

from tensorcad.packing.corpus.digest import first_named
from tensorcad.packing.corpus.engines import shard_due, shard_first
from tensorcad.runtime.certification.data.coverage import check_coverage, seen_of, verdict

SHARDS, PER_SHARD = 4, 250


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded")
    documents = [{"id": f"doc-{i}", "text": "x" * (i % 13)} for i in range(SHARDS * PER_SHARD)]
    for s in range(SHARDS):
        with open(folder / f"part-{s}.jsonl", "w") as f:
            for d in documents[s * PER_SHARD:(s + 1) * PER_SHARD]:
                f.write(json.dumps(d) + "\n")
    return folder, documents


def _ranks(documents, faulty: bool) -> list[list[dict]]:
    """Two ranks' batches: each half of the corpus; faulty, rank 1 loses its first 7 and repeats 10 of rank 0's."""
    ids = [d["id"] for d in documents]
    half = len(ids) // 2
    rank0, rank1 = ids[:half], ids[half:]
    if faulty:
        rank1 = rank0[100:110] + rank1[7:]
    return [[{"id": r[i:i + 16]} for i in range(0, len(r), 16)] for r in (rank0, rank1)]


def _figures(result) -> dict:
    out = result.to_json()
    for key in ("seconds", "message", "batches"):
        out.pop(key)
    return out


@pytest.mark.parametrize("faulty", [False, True])
def test_shards_and_ranks_counted_apart_merge_to_the_whole(corpus, faulty):
    folder, documents = corpus
    ranks = _ranks(documents, faulty)
    whole = check_coverage(documents, [b for rank in ranks for b in rank])
    shards = [shard_due(str(folder / f"part-{s}.jsonl"), "example", "whole", None, "id", None)
              for s in range(SHARDS)]
    seen = [seen_of(rank) for rank in ranks]
    merged = shards[2].merge(seen[1]).merge(shards[0].merge(seen[0], shards[3]), shards[1])  # any grouping

    def name(groups):
        found = [shard_first(str(folder / f"part-{s}.jsonl"), groups, "id") for s in range(SHARDS)]
        return [next((f[g] for f in found if f[g] is not None), None) for g in range(len(groups))]

    result = verdict(merged, policy="whole", unit="example", name=name)
    assert _figures(result) == _figures(whole)
    assert result.passed is not faulty
    if faulty:
        assert (result.lost, result.duplicated) == (7, 10)  # rank 1's first 7 dropped; 10 of rank 0's repeated
        assert (result.first_lost, result.first_duplicated) == ("doc-500", "doc-100")
        assert first_named((d["id"] for d in documents), [seen[0].digest.keys[:0]]) == [None]


@pytest.mark.slow  # a local Dask cluster of 2 worker processes: seconds to start
def test_coverage_on_a_dask_cluster_equals_the_one_process_count(corpus):
    pytest.importorskip("dask.distributed", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
    from tensorcad.runtime.certification.data.at_scale import check_coverage_on_cluster

    folder, documents = corpus
    ranks = _ranks(documents, faulty=True)
    result = check_coverage_on_cluster([folder], ranks)  # a local cluster of 2 workers, the default
    whole = check_coverage(documents, [b for rank in ranks for b in rank])
    figures = _figures(result)
    assert {k: v for k, v in figures.items() if k != "figures"} == {k: v for k, v in _figures(whole).items()
                                                                     if k != "figures"}
    assert (result.lost, result.duplicated, result.first_lost) == (7, 10, "doc-500")
    assert result.figures["shards"] == SHARDS and result.figures["loaders"] == 2 and result.figures["workers"] == 2


@pytest.mark.parametrize("kwargs, words", [
    (dict(loaders=[]), "loaders: expected one loader a rank (at least one)"),
    (dict(loaders=[[]], length_of=len), "length_of: on a cluster a document's length is a field's (a name), not a "
                                        "function"),
    (dict(loaders=[[]], policy="all"), "policy: expected one of"),
    (dict(loaders=[[]], policy="truncate"), "max_length: the policy 'truncate' needs a positive max_length"),
    (dict(loaders=[[]], resume_at=2), "loader: a resume needs a function making the loader"),
])
def test_a_cluster_run_refuses_its_settings_before_starting_a_cluster(kwargs, words):
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.certification.data.at_scale import check_coverage_on_cluster

    with pytest.raises(TensorcadError) as e:
        check_coverage_on_cluster([], **kwargs)
    assert str(e.value).startswith(words)


@pytest.mark.slow  # a local Dask cluster of 1 worker process
def test_a_truncating_token_count_on_a_cluster_of_one_worker_equals_the_one_process_count(tmp_path):
    pytest.importorskip("dask.distributed", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
    import numpy as np

    from tensorcad.runtime.certification import provenance
    from tensorcad.runtime.certification.data.at_scale import check_coverage_on_cluster

    documents = [{"id": i, "text": "x" * (i % 13)} for i in range(200)]
    for s in range(2):
        with open(tmp_path / f"part-{s}.jsonl", "w") as f:
            for d in documents[s * 100:(s + 1) * 100]:
                f.write(json.dumps(d) + "\n")
    rows = [{k: np.asarray([v]) for k, v in provenance(d["id"], min(len(d["text"]), 8)).items()}
            for d in documents if d["text"]]
    rows[3] = {k: v[:, :-1] for k, v in rows[3].items()}  # one token the packer lost
    ranks = [rows[:90], rows[90:]]
    settings = dict(pieces="tokens", policy="truncate", max_length=8, length_of="text")
    result = check_coverage_on_cluster([tmp_path], ranks, workers=1, **settings)
    whole = check_coverage(documents, rows, **settings)
    assert _figures(result) == _figures(whole)
    assert result.unit == "token" and result.policy == "truncate" and result.dropped > 0
    assert (result.lost, result.first_lost) == (1, 4)  # rows[3] is document 4 (document 0 has no text)
    assert result.figures["workers"] == 1 and result.figures["loaders"] == 2 and 0 < result.seconds < 120


class Resumable:
    """A rank's loader that saves and restores where it is (picklable: the cluster's workers import this module)."""

    def __init__(self, rows):
        self.rows, self.at = rows, 0

    def __iter__(self):
        while self.at < len(self.rows):
            self.at += 1
            yield self.rows[self.at - 1]

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.at = state["at"]


@pytest.mark.slow  # a local Dask cluster
def test_a_resumed_whole_count_named_by_another_key_on_a_cluster_equals_the_one_process_count(tmp_path):
    pytest.importorskip("dask.distributed", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
    from functools import partial

    import numpy as np

    from tensorcad.runtime.certification import provenance
    from tensorcad.runtime.certification.data.at_scale import check_coverage_on_cluster

    documents = [{"doc": i, "input_ids": [0] * (3 + i % 5)} for i in range(40)]
    with open(tmp_path / "part-0.jsonl", "w") as f:
        for d in documents:
            f.write(json.dumps(d) + "\n")

    def rows_of(ds):
        return [{k: np.asarray([v]) for k, v in provenance(d["doc"], len(d["input_ids"])).items()} for d in ds]

    rows = rows_of(documents)
    first = {k: v[:, :2] for k, v in rows[5].items()}  # document 5 comes out in two pieces
    rest = {"tensorcad_doc": rows[5]["tensorcad_doc"][:, 2:], "tensorcad_offset": rows[5]["tensorcad_offset"][:, 2:]}
    rows[5:6] = [first, rest]
    ranks = [partial(Resumable, rows[:20]), partial(Resumable, rows[20:])]
    settings = dict(pieces="tokens", id_key="doc", resume_at=3)
    result = check_coverage_on_cluster([tmp_path], ranks, workers=1, **settings)
    whole = check_coverage(documents, lambda: Resumable(rows), **settings)
    assert (result.split_documents, whole.split_documents) == (1, 1)  # under 'whole', pieces are a fault
    assert result.resumed_at == 3 and result.lost == result.duplicated == 0
    assert _figures(result) == _figures(whole)
