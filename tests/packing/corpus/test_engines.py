"""Lengths on an engine: Dask collections on a local cluster of 2 worker processes, and Hugging Face Datasets.

The Must-show of issue 31 on the engine: 8 shards counted on the cluster are
the histogram of their concatenation, exactly, through ``lengths_on`` over
Dask's own readers and through the CLI's ``--engine dask`` against the
cluster's address. References are counted in ``shard_corpora``. The tests on
the cluster run under ``-m slow`` (its processes take seconds to start); the
histograms they merge are the ones ``test_shards.py`` holds in one process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorcad.cli import main
from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus import Lengths, count_on_cluster, lengths_on
from tensorcad.packing.corpus.engines import cluster

dd = pytest.importorskip("dask.dataframe", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
pytest.importorskip("dask.distributed", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
pytest.importorskip("zstandard", reason=".zst shards need zstandard (pip install 'tensorcad[corpus]')")
import dask.bag as db  # noqa: E402
from shard_corpora import count_shards_parquet, reference, text_shards, texts, words_of  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with cluster(workers=2) as client:
        yield client


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    documents = texts(3000, seed=1)
    shards, whole = text_shards(tmp_path_factory.mktemp("e") / "shards", documents)
    return documents, shards, whole


@pytest.mark.slow  # a cluster of 2 worker processes: seconds to start and to run on
def test_the_local_cluster_is_two_worker_processes_on_this_machine_only(client):
    workers = client.scheduler_info()["workers"]
    assert len(workers) == 2 and client.scheduler.address.startswith("tcp://127.0.0.1:")
    assert all(address.startswith("tcp://127.0.0.1:") for address in workers)
    pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2 and __import__("os").getpid() not in pids.values()


@pytest.mark.slow
def test_eight_shards_on_the_cluster_are_the_concatenation_exactly(client, corpus, tmp_path, capsys):
    documents, shards, _ = corpus
    expected = words_of(documents)
    counted = count_on_cluster([shards[0].parent], scheduler=client.scheduler.address)
    assert counted.lengths == expected and (counted.shards, counted.workers) == (8, 2)
    assert counted.empty == sum(1 for t in documents if not t.split())
    # The CLI against the cluster's address: tensorcad lengths DIR --engine dask --scheduler ADDRESS
    out = tmp_path / "h.json"
    code = main(["lengths", str(shards[0].parent), "--engine", "dask", "--scheduler", client.scheduler.address,
                 "-o", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and (summary["engine"], summary["workers"], summary["shards"]) == ("dask", 2, 8)
    from tensorcad.packing.corpus import load_lengths

    assert load_lengths(out) == expected


@pytest.mark.slow
def test_lengths_on_dasks_own_readers(client, corpus, tmp_path):
    documents, shards, whole = corpus
    expected = words_of(documents)
    jsonl = [str(s) for s in shards if s.name.endswith(".jsonl")]
    frame = dd.read_json(jsonl, lines=True, blocksize=None)
    assert frame.npartitions == len(jsonl)
    lines = [json.loads(line) for path in jsonl for line in open(path)]
    assert lengths_on(frame) == words_of([r["text"] for r in lines])
    assert lengths_on(db.read_text(str(whole)).map(json.loads)) == expected  # a Bag of records
    assert lengths_on(db.from_sequence(documents, npartitions=8)) == expected  # a Bag of texts
    counts = np.random.default_rng(2).integers(0, 9000, 30_000)
    parquet, _ = count_shards_parquet(tmp_path / "pq", counts)
    frame = dd.read_parquet([str(p) for p in parquet])
    assert lengths_on(frame) == reference(counts.tolist())  # its token_count column
    assert lengths_on(frame["token_count"]) == reference(counts.tolist())  # a Series of lengths
    assert lengths_on(frame, by="bytes") == Lengths((1,), (len(counts),))  # the text column, "x" a row


@pytest.mark.slow
def test_a_tokenizer_counts_on_the_workers(client, corpus, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    documents = corpus[0][:600]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(documents, trainers.WordPieceTrainer(vocab_size=30, special_tokens=["[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    expected = reference([len(tokenizer.encode(t, add_special_tokens=False).ids) for t in documents])
    assert lengths_on(db.from_sequence(documents, npartitions=4), tokenizer=tmp_path) == expected


@pytest.mark.slow
def test_an_error_on_a_worker_comes_back_as_itself(client):
    with pytest.raises(TensorcadError, match="token_count -3 is not a length") as caught:
        lengths_on(dd.from_dict({"token_count": [1, 2, 5, -3]}, npartitions=2))
    assert caught.value.path == "dataset: partition 1 row 1"


def test_what_is_not_a_collection_is_refused():
    with pytest.raises(TensorcadError, match="expected a Dask DataFrame, Series or Bag, or a Hugging Face Dataset"):
        lengths_on([1, 2, 3])


def test_hugging_face_datasets_in_memory_and_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets", reason="needs datasets (pip install 'tensorcad[trl]')")
    documents = texts(2000, seed=5)
    dataset = datasets.Dataset.from_dict({"text": documents, "token_count": [len(t) for t in documents]})
    assert lengths_on(dataset) == reference([len(t) for t in documents])  # the length column
    assert lengths_on(dataset, by="whitespace") == words_of(documents)
    picked = dataset.shuffle(seed=0).select(range(500))  # an indices mapping over the same table
    assert lengths_on(picked, by="whitespace") == words_of(picked["text"])
    dataset.save_to_disk(tmp_path / "saved", num_shards=4)
    assert lengths_on(datasets.load_from_disk(tmp_path / "saved"), by="whitespace") == words_of(documents)
