"""A corpus in shards: found under a directory, a glob or a saved dataset, counted in worker processes, merged.

The Must-show of issue 31: 8 shards' histograms merged are the histogram of
their concatenation, exactly, in one process, with ``--workers 2``, and as
separate histograms added up by ``--merge`` (the engine's local cluster is
``test_engines.py``). Every reference is counted in ``shard_corpora``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tensorcad.cli import main
from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus import Counting, Lengths, count_lengths, count_shards, load_lengths, shards_of

pytest.importorskip("pyarrow", reason="Parquet and Arrow shards need pyarrow")
pytest.importorskip("zstandard", reason=".zst shards need zstandard (pip install 'tensorcad[corpus]')")
from shard_corpora import count_shards_parquet, reference, text_shards, texts, words_of  # noqa: E402


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tensorcad.cli", "lengths", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    documents = texts()
    shards, whole = text_shards(tmp_path_factory.mktemp("c") / "shards", documents)
    return documents, shards, whole


def test_eight_shards_merged_are_the_concatenation_exactly(corpus, tmp_path, capsys):
    documents, shards, whole = corpus
    expected = words_of(documents)
    assert len(shards) == 8 and {s.name.split(".", 1)[1] for s in shards} == {"jsonl", "jsonl.gz", "jsonl.zst",
                                                                              "parquet", "arrow"}
    one_file, empty = count_lengths([whole])
    in_process = count_shards([shards[0].parent])
    assert one_file == expected and in_process.lengths == expected
    assert in_process.empty == empty == sum(1 for t in documents if not t.split()) > 0
    assert count_shards([shards[0].parent], workers=2).lengths == expected  # two spawned processes
    # one histogram a shard, then --merge (the command in this process: its code, without eight starts)
    for i, shard in enumerate(shards):
        assert main(["lengths", str(shard), "-o", str(tmp_path / f"h{i}.json"), "--json"]) == 0
    capsys.readouterr()
    merged = ["lengths", "--merge", *[str(tmp_path / f"h{i}.json") for i in range(8)], "-o", str(tmp_path / "all.json")]
    assert main([*merged, "--json"]) == 0
    assert load_lengths(tmp_path / "all.json") == expected
    assert json.loads(capsys.readouterr().out)["tokens"] == sum(len(t.split()) for t in documents)
    assert main(merged) == 2  # all.json is there now: replacing it takes --force (issue 33)
    capsys.readouterr()
    assert main([*merged, "--force"]) == 0 and "histograms merged" in capsys.readouterr().out


@pytest.mark.slow
def test_the_command_with_two_workers_writes_the_concatenations_histogram(corpus, tmp_path):
    documents, shards, _ = corpus
    expected = words_of(documents)
    run = cli(shards[0].parent, "--workers", 2, "-o", tmp_path / "two.json", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["shards"], summary["workers"], summary["documents"]) == (8, 2, expected.documents)
    assert load_lengths(tmp_path / "two.json") == expected


def test_a_token_count_column_is_read_instead_of_the_text(tmp_path):
    counts = np.random.default_rng(3).integers(0, 40_000, 20_000)
    shards, whole = count_shards_parquet(tmp_path / "pq", counts)
    expected = reference(counts.tolist())
    assert count_shards([whole]).lengths == expected
    assert count_shards([tmp_path / "pq"]).lengths == expected
    assert count_shards([str(tmp_path / "pq" / "*.parquet")]).empty == int((counts == 0).sum())
    # --by (or --tokenizer) counts the text, even where a length column is there: one word a row here
    assert count_shards([whole], Counting(by="whitespace")).lengths == Lengths((1,), (len(counts),))
    assert count_shards([whole], Counting(column="token_count", by="bytes")).lengths == expected


def test_jsonl_records_with_a_length_field(tmp_path):
    lines = [{"text": "a b c", "length": 7}, {"text": "", "length": 0}, {"text": "d", "length": 7}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert count_lengths([tmp_path / "c.jsonl"]) == (Lengths((7,), (2,)), 1)
    assert count_lengths([tmp_path / "c.jsonl"], by="whitespace") == (Lengths((1, 3), (1, 1)), 1)


def test_directories_globs_and_saved_datasets_name_their_shards_in_order(corpus, tmp_path):
    _, shards, _ = corpus
    folder = shards[0].parent
    (folder / ".hidden.jsonl").write_text("not read\n")
    (folder / "_SUCCESS").write_text("")
    assert shards_of([folder]) == sorted(shards)
    assert shards_of([str(folder / "*.jsonl*")]) == sorted(s for s in shards if ".jsonl" in s.name)
    assert shards_of([shards[3], shards[1]]) == [shards[3], shards[1]]
    datasets = pytest.importorskip("datasets", reason="a saved dataset needs datasets (pip install 'tensorcad[trl]')")
    documents = texts(1500, seed=4)
    datasets.Dataset.from_dict({"text": documents}).save_to_disk(tmp_path / "saved", num_shards=3)
    found = shards_of([tmp_path / "saved"])
    assert len(found) == 3 and all(s.suffix == ".arrow" for s in found)
    assert count_shards([tmp_path / "saved"]).lengths == words_of(documents)


@pytest.mark.parametrize("make, where, message", [
    (lambda p: None, "*.jsonl", "matches no files"),
    (lambda p: (p / "d").mkdir() or (p / "d" / "notes.md").write_text("x"), "d", "holds no corpus files"),
    (lambda p: (p / "dd").mkdir() or (p / "dd" / "dataset_dict.json").write_text("{}"), "dd", "is a DatasetDict"),
])
def test_sources_that_name_no_shards_are_refused(tmp_path, make, where, message):
    make(tmp_path)
    with pytest.raises(TensorcadError, match=message) as caught:
        shards_of([str(tmp_path / where)])
    assert caught.value.path == str(tmp_path / where)


def test_an_error_crosses_a_process_as_itself():
    import pickle

    error = pickle.loads(pickle.dumps(TensorcadError("shard.jsonl:2", "field 'text' is int, not text")))
    assert type(error) is TensorcadError and (error.path, error.message) == ("shard.jsonl:2",
                                                                             "field 'text' is int, not text")


@pytest.mark.slow
def test_a_bad_shard_read_by_a_worker_is_one_line_naming_it(corpus, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(3):
        (tmp_path / f"ok{i}.jsonl").write_text('{"text": "a b"}\n' * 50)
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": 5}\n')
    run = cli(tmp_path, "--workers", 2, "-o", "")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert f"{tmp_path / 'bad.jsonl'}:2: field 'text' is int, not text" in run.stderr
    (tmp_path / "bad.jsonl").unlink()
    pq.write_table(pa.table({"token_count": [3, -1]}), tmp_path / "neg.parquet")
    with pytest.raises(TensorcadError, match="token_count -1 is not a length") as caught:
        count_shards([tmp_path], workers=2)
    assert caught.value.path == f"{tmp_path / 'neg.parquet'}: row 1"
    (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(TensorcadError, match="cannot be read") as caught:
        count_shards([tmp_path / "broken.jsonl.gz"])


def test_options_that_cannot_go_together_are_refused(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text('{"text": "a b"}\n')
    for args, line in [(("--scheduler", "tcp://127.0.0.1:1"), "--scheduler: needs --engine dask"),
                       (("--merge", "--workers", "2"), "--workers: --merge adds histograms up; it counts nothing"),
                       (("--workers", "0"), "--workers: must be a whole number in 1..256, got 0")]:
        assert main(["lengths", str(tmp_path / "c.jsonl"), *args, "-o", "", "--json"]) == 2
        assert capsys.readouterr().err == f"tensorcad: {line}\n"
