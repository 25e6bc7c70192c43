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
