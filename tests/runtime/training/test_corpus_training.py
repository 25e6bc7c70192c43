"""smoke-train --corpus: real documents tokenized with their boundaries, packed, trained, probed."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorcad.packing import positions_of  # noqa: E402
from tensorcad.runtime.training.corpus import (  # noqa: E402
    Tokenized,
    gradient_probe,
    into_vocabulary,
    pack_corpus,
    tokenize,
    train_on_corpus,
)


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture
def corpus(tmp_path):
    """Sorting problems written as text, one a JSON line, of uneven lengths."""
    rng = np.random.default_rng(0)
    path = tmp_path / "sort.jsonl"
    with path.open("w") as f:
        for _ in range(600):
            digits = rng.integers(0, 10, rng.integers(3, 12))
            text = " ".join(map(str, digits)) + " > " + " ".join(map(str, sorted(digits)))
            f.write(json.dumps({"text": text}) + "\n")
    return path


def test_tokenizing_records_every_documents_boundary(corpus):
    tokens = tokenize(corpus)
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    assert tokens.lengths.tolist() == [len(t.encode()) for t in texts]
    for k in (0, 17, 599):
        assert bytes(tokens.ids[tokens.starts[k]:tokens.starts[k + 1]].astype(np.uint8)).decode() == texts[k]


@pytest.mark.parametrize("strategy", ["stream", "bfd", "ffd", "split", "pad"])
def test_packed_rows_hold_the_documents_where_the_boundaries_say(strategy):
    lengths = np.array([5, 30, 3, 12, 64, 7, 100, 1, 9, 40])
    ids = np.arange(lengths.sum())  # every token its own id: where it came from is visible
    tokens = Tokenized(ids, np.concatenate(([0], np.cumsum(lengths))))
    packed = pack_corpus(tokens, 32, strategy)
    assert (packed.positions == positions_of(packed.documents)).all()
    seen = []
    for r in range(len(packed.ids)):
        for d in np.unique(packed.documents[r][packed.real[r]]):
            piece = packed.ids[r][(packed.documents[r] == d) & packed.real[r]]
            # A piece is a run of one document's consecutive tokens.
            owner = np.searchsorted(tokens.starts, piece[0], side="right") - 1
            assert (np.diff(piece) == 1).all() and piece[-1] < tokens.starts[owner + 1]
            seen.extend(piece.tolist())
    if strategy in ("stream",):
        assert sorted(seen) == list(range(len(packed.ids) * 32))  # the stream's whole rows
    elif strategy == "split":
        assert sorted(seen) == ids.tolist()  # nothing lost
    else:
        assert sorted(seen) == [t for d, n in enumerate(lengths) for t in range(tokens.starts[d],
                                                                                 tokens.starts[d] + min(n, 32))]
    assert not packed.scored[~packed.real[:, 1:]].any()


def test_a_document_masked_nano_sort_learns_and_no_gradient_crosses_documents(corpus):
    result = train_on_corpus("nano-sort", corpus, steps=30, params=150_000, rows=4, seq=64, strategy="bfd")
    assert result.final_loss < result.initial_loss
    assert result.probe_cross == 0.0 and result.probe_own > 0 and result.probe_documents >= 2
    assert result.passed and json.dumps(result.to_json())


def test_the_probe_sees_a_model_that_lets_documents_mix(corpus):
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale

    model = build(scale(__import__("tensorcad").load("nano-sort"), params=150_000), form="eager")

    class Blind(torch.nn.Module):
        """The same model, told every token is one document."""

        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, ids, documents):
            return self.inner(ids, documents=torch.zeros_like(documents))

    tokens = tokenize(corpus)
    packed = pack_corpus(Tokenized(into_vocabulary(tokens.ids, model.config.vocab_size), tokens.starts), 64, "bfd")
    tensors = {"ids": torch.from_numpy(packed.ids[:8]), "documents": torch.from_numpy(packed.documents[:8])}
    cross, own, _ = gradient_probe(Blind(), tensors, torch.from_numpy(packed.scored[:8]))
    assert cross > 0 and own > 0


@pytest.mark.parametrize("argv, text", [
    (["smoke-train", "nano-sort", "--tokenizer", "somewhere"], "--corpus: --tokenizer and --pack-strategy need"),
    (["smoke-train", "gpt2-small", "--corpus", "CORPUS"], "has no documents input"),
    (["smoke-train", "nano-sort", "--corpus", "CORPUS", "--tokenizer", "/nonexistent"], "no tokenizer.json"),
])
def test_the_command_refuses_in_one_line(corpus, capsys, argv, text):
    from tensorcad.cli import main

    code = main([str(corpus) if a == "CORPUS" else a for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and text in err and err.count("\n") == 1
