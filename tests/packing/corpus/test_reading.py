"""`tensorcad lengths`: corpora streamed into histograms, counted three ways, bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tensorcad.packing.corpus.histogram import Lengths, load_lengths
from tensorcad.packing.corpus.reading import count_lengths, documents, plot
from tensorcad.errors import TensorcadError

TEXTS = ["the cat sat", "a", "", "héllo wörld again and again", "x " * 40]


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))


def test_jsonl_counted_by_words_and_bytes_as_python_counts_them(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", TEXTS)
    words, empty = count_lengths([tmp_path / "c.jsonl"])
    assert words == Lengths.of([len(t.split()) for t in TEXTS if t.split()]) and empty == 1
    raw, _ = count_lengths([tmp_path / "c.jsonl"], by="bytes")
    assert raw == Lengths.of([len(t.encode()) for t in TEXTS if t])


def test_plain_text_split_by_a_separator_across_chunk_edges(tmp_path, monkeypatch):
    import tensorcad.packing.corpus.text as text

    monkeypatch.setattr(text, "CHUNK", 7)  # separators straddle chunks
    (tmp_path / "c.txt").write_text("<|eot|>".join(TEXTS))
    assert list(documents(tmp_path / "c.txt", separator="<|eot|>")) == TEXTS


def test_a_local_tokenizer_counts_what_it_encodes(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    write_jsonl(tmp_path / "c.jsonl", TEXTS)
    lengths, empty = count_lengths([tmp_path / "c.jsonl"], tokenizer=tmp_path)
    expected = [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in TEXTS]
    assert lengths == Lengths.of([n for n in expected if n]) and empty == expected.count(0)


def test_parquet_when_pyarrow_is_there(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="Parquet is optional (pyarrow)")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": TEXTS}), tmp_path / "c.parquet")
    lengths, _ = count_lengths([tmp_path / "c.parquet"], field="content")
    assert lengths == Lengths.of([len(t.split()) for t in TEXTS if t.split()])


@pytest.mark.parametrize("body, where, message", [
    ('{"text": "a b"}\n{"text": \n', "c.jsonl:2", "not valid JSON"),
    ('{"text": "a b"}\n{"body": "c"}\n', "c.jsonl:2", "no field 'text'"),
    ('{"text": 5}\n', "c.jsonl:1", "not text"),
    ('\n\n', "c.jsonl", "no non-empty documents"),
])
def test_bad_corpora_name_the_file_and_line(tmp_path, body, where, message):
    (tmp_path / "c.jsonl").write_text(body)
    with pytest.raises(TensorcadError, match=message) as caught:
        count_lengths([tmp_path / "c.jsonl"])
    assert caught.value.path == str(tmp_path / where)


def test_the_command_writes_a_histogram_the_analysis_reads(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", TEXTS * 10)
    out = tmp_path / "h.json"
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "lengths", str(tmp_path / "c.jsonl"),
                          "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "40 documents" in run.stdout and "#" in run.stdout  # the summary, and the plot's bars
    assert load_lengths(out) == Lengths.of([len(t.split()) for t in TEXTS * 10 if t.split()])
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "lengths", str(tmp_path / "c.jsonl"),
                          "-o", "", "--json"], capture_output=True, text=True, timeout=60)
    summary = json.loads(run.stdout)
    assert summary["documents"] == 40 and summary["empty"] == 10 and summary["max"] == 40
    bad = subprocess.run([sys.executable, "-m", "tensorcad.cli", "lengths", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_the_plot_has_a_bar_for_every_power_of_two():
    text = plot(Lengths.of([1, 2, 3, 5, 9, 17, 40]))
    for label in ("1", "2", "4", "8", "16", "32"):
        assert label in text
