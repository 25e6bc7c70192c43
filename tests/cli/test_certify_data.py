"""`tensorcad certify-data`: a JSONL corpus and a loader factory the test writes; --json; bad input exits 2."""

from __future__ import annotations

import json

import pytest

from tensorcad.cli import main

LOADERS = '''
import json

def _ids(path):
    return [json.loads(line)["id"] for line in open(path)]

def whole(path):
    ids = _ids(path)
    return [{"id": ids[i:i + 4]} for i in range(0, len(ids), 4)]

def doubled(path):  # every worker yields everything: each example twice
    return whole(path) + whole(path)

class Resumable:
    """A loader with torchdata's state_dict protocol that forgets one batch on resume."""

    def __init__(self, path):
        self.batches, self.at = whole(path), 0

    def __iter__(self):
        while self.at < len(self.batches):
            self.at += 1
            yield self.batches[self.at - 1]

    def state_dict(self):
        return {"at": self.at + 1}

    def load_state_dict(self, state):
        self.at = state["at"]
'''


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    (tmp_path / "user_loaders.py").write_text(LOADERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": f"document {i}"}) + "\n" for i in range(30)))
    return str(path)


def test_a_loader_that_gives_the_epoch_passes(corpus, capsys):
    assert main(["certify-data", corpus, "--loader", "user_loaders:whole", "--checks", "data[coverage]"]) == 0
    assert "data[coverage] passed" in capsys.readouterr().out


def test_duplicates_and_a_lossy_resume_fail_with_their_counts_in_json(corpus, capsys):
    assert main(["certify-data", corpus, "--loader", "user_loaders:doubled", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    coverage, boundaries = report["checks"]
    assert coverage["status"] == "failed" and coverage["figures"]["duplicated"] == 30
    assert boundaries["status"] == "skipped"  # examples carry no packer's lengths: said, not passed
    assert main(["certify-data", corpus, "--loader", "user_loaders:Resumable", "--resume-at", "2",
                 "--checks", "data[coverage]", "--json"]) == 1
    figures = json.loads(capsys.readouterr().out)["checks"][0]["figures"]
    assert (figures["lost"], figures["first_lost"], figures["resumed_at"]) == (4, 8, 2)  # the third batch: 8..11


@pytest.mark.parametrize("argv, named", [
    (["certify-data", "missing.jsonl", "--loader", "user_loaders:whole"], "missing.jsonl"),
    (["certify-data", "{corpus}", "--loader", "user_loaders"], "--loader"),
    (["certify-data", "{corpus}", "--loader", "no_such_module:f"], "--loader"),
    (["certify-data", "{corpus}", "--loader", "user_loaders:whole", "--checks", "isolation"], "--checks"),
    (["certify-data", "{corpus}", "--loader", "user_loaders:whole", "--policy", "truncate"], "max_length"),
    (["certify-data", "{corpus}", "--loader", "user_loaders:whole", "--resume-at", "x"], "--resume-at"),
])
def test_bad_input_exits_2_with_one_line(corpus, capsys, argv, named):
    assert main([a.replace("{corpus}", corpus) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err


def test_help():
    with pytest.raises(SystemExit) as done:
        main(["certify-data", "--help"])
    assert done.value.code == 0


RANKED = '''
import json
import os


def _ids(folder):
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else [folder]
    paths = [os.path.join(folder, f) for f in files] if os.path.isdir(folder) else files
    return [json.loads(line)["id"] for p in paths for line in open(p)]


def ranked(folder, rank, ranks):  # each rank its strided share of the epoch
    mine = _ids(folder)[rank::ranks]
    return [{"id": mine[i:i + 8]} for i in range(0, len(mine), 8)]


def lossy(folder, rank, ranks):  # rank 1 loses its first batch
    return ranked(folder, rank, ranks)[1 if rank == 1 else 0:]
'''


@pytest.fixture
def shards(tmp_path, monkeypatch):
    (tmp_path / "ranked_loaders.py").write_text(RANKED)
    monkeypatch.chdir(tmp_path)  # the cluster's workers import the factory from here, as the command does
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = tmp_path / "shards"
    folder.mkdir()
    for s in range(3):
        (folder / f"part-{s}.jsonl").write_text(
            "".join(json.dumps({"id": f"d{s}-{i}"}) + "\n" for i in range(40)))
    return str(folder)


@pytest.mark.slow  # a local Dask cluster of 2 worker processes: seconds to start
@pytest.mark.parametrize("factory, lost", [("ranked", 0), ("lossy", 8)])
def test_coverage_on_a_dask_cluster_from_the_command_line(shards, capsys, factory, lost):
    pytest.importorskip("dask.distributed", reason="the engine is an optional extra (pip install 'tensorcad[dask]')")
    code = main(["certify-data", shards, "--loader", f"ranked_loaders:{factory}", "--engine", "dask", "--ranks", "2",
                 "--workers", "2", "--json"])
    [check] = json.loads(capsys.readouterr().out)["checks"]
    assert check["name"] == "data[coverage]" and code == (1 if lost else 0)
    figures = check["figures"]
    assert figures["lost"] == lost and figures["duplicated"] == 0
    assert figures["cluster"] == {"shards": 3, "loaders": 2, "workers": 2}
    # the one-process count of the same corpus and the two ranks' batches, figure for figure
    import importlib

    from tensorcad.runtime.certification.data.coverage import check_coverage

    loaders = importlib.import_module("ranked_loaders")
    documents = [{"id": i} for i in loaders._ids(shards)]
    batches = [b for rank in range(2) for b in getattr(loaders, factory)(shards, rank, 2)]
    alone = check_coverage(documents, batches).to_json()
    assert {k: figures[k] for k in ("due", "seen", "lost", "duplicated", "first_lost")} == \
        {k: alone[k] for k in ("due", "seen", "lost", "duplicated", "first_lost")}
    if lost:  # rank 1's first batch: every second id from the second, 'd0-1' first
        assert figures["first_lost"] == "d0-1"


@pytest.mark.parametrize("argv, says", [
    (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler: needs --engine dask"),
    (["--ranks", "2"], "--ranks: needs --engine dask"),
    (["--engine", "dask", "--ranks", "0"], "--ranks: expected 1..1,024 loaders, got 0"),
    (["--engine", "dask", "--checks", "data[boundaries]"], "--checks: data[boundaries] reads the first batches here"),
])
def test_the_cluster_options_are_refused_where_they_cannot_apply(corpus, capsys, argv, says):
    assert main(["certify-data", corpus, "--loader", "user_loaders:whole", *argv]) == 2
    assert says in capsys.readouterr().err
