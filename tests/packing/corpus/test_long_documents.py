"""One document longer than memory should hold (#32): counted chunk by chunk, never held, counted exactly.

`tensorcad lengths` refused a document past 256 MiB (it held the document to count it); a 300 MB one is a
user's corpus. Counted by bytes or words it is now counted as it is read. Each expected count is Python's own
(`len(doc.split())`, `len(doc.encode())`) on the whole document, written by the test.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from tensorcad import cli
from tensorcad.packing.corpus import reading, text
from tensorcad.packing.corpus.histogram import Lengths

# Whitespace of several kinds (ideographic space and NBSP are Unicode's whitespace too), and multibyte letters
# whose UTF-8 bytes a chunk edge can cut.
ALPHABET = ["a", "é", "€", "😀", " ", "\u3000", "\xa0", "\t", "\n", "x"]


def corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 3, 40, 700, 3000]))) for _ in range(12)]


@pytest.mark.parametrize("chunk", [1, 5, 64])
@pytest.mark.parametrize("separator", ["\n\n", "|", "<doc>"])
def test_long_documents_are_counted_across_chunk_edges_as_python_counts_them_whole(tmp_path, monkeypatch,
                                                                                   chunk, separator):
    monkeypatch.setattr(text, "CHUNK", chunk)
    monkeypatch.setattr(text, "FOLD_BYTES", 97)  # most documents are counted in pieces, some straddling the fold
    for seed in range(4):
        whole = separator.join(corpus(seed))
        docs = whole.split(separator)  # what a document is: Python's own split of the whole text
        path = tmp_path / f"c{seed}.txt"
        path.write_bytes(whole.encode("utf-8"))
        words, _ = reading.count_lengths([path], separator=separator, by="whitespace")
        assert words == Lengths.of([len(d.split()) for d in docs if d.split()]), (seed, docs)
        raw, _ = reading.count_lengths([path], separator=separator, by="bytes")
        assert raw == Lengths.of([len(d.encode()) for d in docs if d]), (seed, docs)
        # Where the text is wanted, it is each document whole, as before.
        assert list(reading.documents(path, separator=separator)) == docs


def test_a_document_past_the_old_refusal_is_counted_in_bounded_memory_each_character_once(tmp_path, monkeypatch):
    # Scaled down 32x: a 8 MiB document against a 256 KiB refusal. Held whole, the document alone is 8 MiB
    # of memory and `"".join` and `split` as much again; counted as it comes, it is a few chunks.
    monkeypatch.setattr(text, "MAX_DOCUMENT_BYTES", 1 << 18)
    monkeypatch.setattr(text, "FOLD_BYTES", 1 << 17)
    monkeypatch.setattr(text, "CHUNK", 1 << 14)
    word = "w" * 15 + " "
    size = 8 << 20
    (tmp_path / "one.txt").write_text(word * (size // 16))
    added = []
    add = text.LongDocument.add
    monkeypatch.setattr(text.LongDocument, "add", lambda self, piece: (added.append(len(piece)), add(self, piece)))
    tracemalloc.start()
    try:
        lengths, _ = reading.count_lengths([tmp_path / "one.txt"], by="whitespace")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lengths.values == (size // 16,)
    assert sum(added) == size  # each character counted once: linear work, no piece counted twice
    assert peak < 2 << 20, f"peak {peak:,} bytes for a {size:,}-byte document: it was held"


def test_lengths_counts_a_document_past_the_old_refusal_and_refuses_it_for_a_tokenizer(tmp_path, monkeypatch,
                                                                                      capsys):
    monkeypatch.setattr(text, "MAX_DOCUMENT_BYTES", 1 << 16)
    monkeypatch.setattr(text, "FOLD_BYTES", 1 << 12)
    monkeypatch.setattr(text, "CHUNK", 1 << 10)
    (tmp_path / "one.txt").write_text("ab " * 100_000 + "\n\nc d")
    assert cli.main(["lengths", str(tmp_path / "one.txt"), "--json", "-o", str(tmp_path / "h.json")]) == 0
    out = capsys.readouterr().out
    assert '"documents": 2' in out and '"tokens": 100002' in out
    with pytest.raises(Exception, match="a document of more than 0 MiB"):  # its text is wanted whole
        list(reading.documents(tmp_path / "one.txt"))
