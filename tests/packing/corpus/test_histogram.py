"""Empirical lengths: the Lengths table, every file form the loader reads, and every bad file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorcad.packing.corpus.histogram import Lengths, load_lengths, write_histogram
from tensorcad.errors import TensorcadError

LIST = [5, 1, 3, 3, 9, 3, 1, 12]


def test_lengths_summarise_a_list_as_brute_force_does():
    lengths = Lengths.of(LIST)
    assert lengths.values == (1, 3, 5, 9, 12) and lengths.counts == (2, 3, 1, 1, 1)
    array = np.array(LIST, dtype=float)
    assert lengths.documents == 8 and lengths.tokens == sum(LIST)
    assert lengths.mean == pytest.approx(array.mean())
    assert lengths.spread == pytest.approx(array.std() / array.mean())
    # The smallest length at least p of the documents do not exceed, counted by hand.
    assert (lengths.quantile(0.5), lengths.quantile(0.9), lengths.quantile(0.99)) == (3, 12, 12)
    assert lengths.summary() == {"documents": 8, "mean": array.mean(), "spread": pytest.approx(array.std() / array.mean()),
                                 "p50": 3, "p90": 12, "p99": 12, "max": 12}
    assert hash(lengths) == hash(Lengths.of(list(reversed(LIST))))


def test_strata_take_one_quantile_per_stratum():
    lengths = Lengths.of(LIST)
    ordered = sorted(LIST)
    # With as many strata as documents, stratum i is the i-th smallest document.
    assert lengths.strata(8).tolist() == ordered
    # With twice as many, every document twice.
    assert lengths.strata(16).tolist() == sorted(ordered * 2)


@pytest.mark.parametrize("name, body", [
    ("h.json", json.dumps({"1": 2, "3": 3, "5": 1, "9": 1, "12": 1})),
    ("h.csv", "length,count\n1,2\n3,3\n5,1\n9,1\n12,1\n"),
    ("l.txt", "\n".join(map(str, LIST)) + "\n"),
    ("l.json", json.dumps(LIST)),
])
def test_every_text_form_reads_the_same_distribution(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    assert load_lengths(path) == Lengths.of(LIST)


def test_npy_parquet_and_the_written_histogram_round_trip(tmp_path):
    np.save(tmp_path / "l.npy", np.array(LIST))
    assert load_lengths(tmp_path / "l.npy") == Lengths.of(LIST)
    write_histogram(Lengths.of(LIST), tmp_path / "w.json")
    assert load_lengths(tmp_path / "w.json") == Lengths.of(LIST)
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the optional pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"tokens": LIST}), tmp_path / "l.parquet")
    assert load_lengths(tmp_path / "l.parquet", column="tokens") == Lengths.of(LIST)
    with pytest.raises(TensorcadError, match="no column 'length'"):
        load_lengths(tmp_path / "l.parquet")


@pytest.mark.parametrize("name, body, where, message", [
    ("bad.csv", "length,count\n5,3\n-2,4\n", "bad.csv:3", "not positive"),
    ("bad.csv", "5,3\n0,4\n", "bad.csv:2", "not positive"),
    ("bad.csv", "5,3\n7,x\n", "bad.csv:2", "not a number"),
    ("bad.csv", "5,0\n7,0\n", "bad.csv", "zero documents"),
    ("bad.txt", "4\n\n7\nseven\n", "bad.txt:4", "not a number"),
    ("bad.txt", "4\n2.5\n", "bad.txt:2", "not a whole number"),
    ("bad.txt", "4\n99999999999\n", "bad.txt:2", "longer than"),
    ("bad.json", '{\n  "4": 1,\n  "-1": 2\n}', "bad.json:3", "not positive"),
    ("bad.json", '{\n  "4": 1,\n  "x": 2\n}', "bad.json:3", "not a number"),
    ("bad.json", '{"4": 1,', "bad.json:1", "not valid JSON"),
    ("bad.json", '{}', "bad.json", "holds no lengths"),
    ("empty.txt", "", "empty.txt", "is empty"),
    ("blank.txt", "\n\n", "blank.txt", "holds no lengths"),
])
def test_a_bad_file_is_one_error_naming_the_file_and_line(tmp_path, name, body, where, message):
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(TensorcadError, match=message) as caught:
        load_lengths(path)
    assert caught.value.path == str(tmp_path / where)


def test_bad_npy_names_the_element(tmp_path):
    np.save(tmp_path / "l.npy", np.array([3, 4, -1]))
    with pytest.raises(TensorcadError, match="not positive") as caught:
        load_lengths(tmp_path / "l.npy")
    assert caught.value.path.endswith("l.npy: element 2")
    with pytest.raises(TensorcadError, match="cannot read"):
        load_lengths(tmp_path / "missing.txt")


def test_the_public_api_names_them_without_torch():
    import subprocess
    import sys

    code = ("import sys, tensorcad; from tensorcad.packing.corpus.histogram import Lengths, load_lengths; "
            "assert tensorcad.Lengths is Lengths and tensorcad.load_lengths is load_lengths; "
            "assert 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
