"""packing/corpus/digest.py to the letter (issue 45's mutation): the keys against splitmix64 and BLAKE2b written
out here with Python integers, every id form hash_ids takes or refuses, the tally's counts and compaction, the
differences of a digest by hand, first_named's reading, and what due_of counts of every kind of corpus."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.digest import (
    PIECES,
    Digest,
    Tally,
    differences,
    due_of,
    first_named,
    hash_ids,
)

MASK = (1 << 64) - 1


def splitmix(x: int) -> int:
    """splitmix64's finaliser on one integer, as its paper writes it (the int64's bits read unsigned)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def blake(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


IDS = [0, 1, 7, -1, -(2**40), 2**53 + 1, 2**62 + 3]


def test_integer_and_string_keys_are_splitmix64_and_blake2b():
    keys = hash_ids(IDS)
    assert keys.dtype == np.uint64
    assert keys.tolist() == [splitmix(i & MASK) for i in IDS]
    strings = hash_ids(["a", "doc-17", "é"])
    assert strings.dtype == np.uint64 and strings.tolist() == [blake("a"), blake("doc-17"), blake("é")]
    mixed = hash_ids(np.asarray(["x", 5, np.int32(-3)], dtype=object))
    assert mixed.tolist() == [blake("x"), splitmix(5), splitmix(-3 & MASK)]


def test_every_form_of_ids_gives_the_same_keys():
    torch = pytest.importorskip("torch")
    want = [splitmix(i & MASK) for i in IDS]
    assert hash_ids(np.asarray(IDS, dtype=np.int64)).tolist() == want
    assert hash_ids(torch.tensor(IDS)).tolist() == want
    graded = torch.tensor([0.0, 1.0], requires_grad=True)
    with pytest.raises(TensorcadError, match=r"^ids: document ids are integers or strings, got float32$"):
        hash_ids(graded)  # detached before numpy() (a tensor with a graph has no numpy()), then refused

    class Column:  # an array library's column: numpy() and no detach
        def numpy(self):
            return np.asarray([0, 1, 7])

    assert hash_ids(Column()).tolist() == want[:3]
    grid = hash_ids(np.asarray([[0, 1], [7, -1]]))
    assert grid.shape == (4,) and grid.tolist() == want[:4]
    assert hash_ids(np.asarray([["a", "b"], ["c", "d"]])).tolist() == [blake(c) for c in "abcd"]


def test_ids_that_are_not_integers_or_strings_are_refused_by_path():
    with pytest.raises(TensorcadError) as bools:
        hash_ids(np.asarray([True, False]), "batch.id")
    assert str(bools.value) == "batch.id: document ids are integers or strings, got bool"
    with pytest.raises(TensorcadError) as floats:
        hash_ids([0.5, 1.5])
    assert str(floats.value) == "ids: document ids are integers or strings, got float64"
    with pytest.raises(TensorcadError) as element:
        hash_ids(np.asarray(["a", 2, 1.5], dtype=object), "corpus")
    assert str(element.value) == "corpus[2]: a document id is an integer or a string, got 1.5"
    with pytest.raises(TensorcadError) as flag:
        hash_ids(np.asarray(["a", True], dtype=object))
    assert str(flag.value) == "ids[1]: a document id is an integer or a string, got True"


def test_an_empty_digest_and_its_arrays():
    empty = Digest.empty()
    assert (empty.keys.dtype, empty.positions.dtype, empty.counts.dtype) == (np.uint64, np.int64, np.int64)
    assert len(empty) == 0 and empty.zero
    arrays = Tally().digest().to_arrays()
    assert list(arrays) == ["keys", "positions", "counts"] and all(len(a) == 0 for a in arrays.values())


def test_a_tally_counts_what_it_was_given_and_compacts_at_its_threshold():
    tally = Tally(count_pieces=True, compact_every=7)
    key = hash_ids([3])
    tally.add(key, [0], [4])
    assert (tally.pieces, tally.tokens, tally._pending, len(tally._keys)) == (1, 4, 3, 3)
    tally.add(np.r_[key, key], [4, 9], [6, 10])  # 6 events more: 9 >= 7, summed
    assert (tally.pieces, tally.tokens, tally._pending, tally._keys) == (3, 7, 0, [])
    tally.add(key, [0], [10], sign=-1)  # what is due: not counted as given
    assert (tally.pieces, tally.tokens) == (3, 7)
    digest = tally.digest()
    # pieces [0,4) [4,6) [9,10) less [0,10): tokens 6..8 lost, 2 pieces over
    assert digest.positions.tolist() == [PIECES, 6, 9] and digest.counts.tolist() == [2, -1, 1]
    exact = Tally(compact_every=6)
    exact.add(key, [0], [1])
    exact.add(key, [1], [2])  # 6 events: at the threshold, summed
    assert exact._pending == 0 and exact._keys == []
    assert exact.digest().positions.tolist() == [0, 2]


def _diff(seen: list[tuple[int, int, int]], due: list[tuple[int, int]], pieces: bool = False):
    given, wanted = Tally(count_pieces=pieces), Tally(count_pieces=pieces)
    for d, s, e in seen:
        given.add(hash_ids([d]), [s], [e])
    for d, n in due:
        wanted.add(hash_ids([d]), [0], [n])
    return differences(given.digest().merge(wanted.digest().negated()))


def test_differences_by_hand():
    # document 1 wholly lost, document 2 split (its tokens exact, one piece over), document 3 read twice over
    # tokens 1..2, then 2 alone a third time
    diff = _diff([(2, 0, 3), (2, 3, 5), (3, 0, 4), (3, 1, 3), (3, 2, 3)], [(1, 4), (2, 5), (3, 4)], pieces=True)
    order = {k: d for d, k in zip((1, 2, 3), hash_ids([1, 2, 3]).tolist())}
    by = {order[k]: (int(lost), int(dup), int(copies), int(extra)) for k, lost, dup, copies, extra in
          zip(diff.keys.tolist(), diff.lost, diff.duplicated, diff.copies, diff.extra_pieces)}
    assert by == {1: (4, 0, 1, -1), 2: (0, 0, 1, 1), 3: (0, 3, 3, 2)}
    assert (diff.lost_tokens, diff.duplicated_tokens) == (4, 3)
    assert all(a.dtype == np.int64 for a in (diff.lost, diff.duplicated, diff.copies, diff.extra_pieces))
    assert diff.keys.dtype == np.uint64
    # a key with only pieces (its tokens exact) beside one that lost tokens: each figure on its own key
    only = _diff([(2, 0, 2), (2, 2, 5), (4, 0, 1)], [(2, 5), (4, 3)], pieces=True)
    figures = {k: (int(a), int(b)) for k, a, b in zip(only.keys.tolist(), only.lost, only.extra_pieces)}
    assert figures == {hash_ids([2]).tolist()[0]: (0, 1), hash_ids([4]).tolist()[0]: (2, 0)}
    assert differences(Digest.empty()).keys.tolist() == []


def test_first_named_reads_in_chunks_and_stops_once_every_group_has_one():
    keys = hash_ids([5, 9, 2])
    read = []

    def ids():
        for i in range(10):
            read.append(i)
            yield i

    assert first_named(ids(), [keys[:1], keys[1:2]], chunk=3) == [5, 9]
    assert read == list(range(10))  # 9 is in the last, short chunk
    read.clear()
    assert first_named(ids(), [keys[:1], keys[2:3]], chunk=3) == [5, 2]
    assert read == list(range(6))  # both found by the second chunk: it stops there
    read.clear()
    assert first_named(ids(), [keys[2:3]], chunk=3) == [2]
    assert read == [0, 1, 2]  # found in the first chunk: nothing more read
    read.clear()
    assert first_named(ids(), [keys[:1], hash_ids([99])], chunk=4) == [5, None]
    assert read == list(range(10))  # one group is never found: every id read, in chunks and the rest
    with pytest.raises(TensorcadError) as bad:
        first_named([1, 2.5], [keys], path="corpus.id")
    assert str(bad.value) == "corpus.id[1]: a document id is an integer or a string, got 2.5"
    assert first_named(["a", "b"], [hash_ids(["b"]), []]) == ["b", None]


def test_due_of_examples_tokens_and_truncation():
    ints = due_of([0, 1, 2])
    assert (ints.due, ints.documents, ints.units, ints.dropped) == (3, 3, 0, 0)
    mapped = due_of([{"id": "a"}, {"id": "b"}])  # the id under "id", one unit an example
    assert (mapped.due, mapped.documents) == (2, 2)
    assert set(mapped.digest.keys.tolist()) == {blake("a"), blake("b")}
    # each example's piece [0, 1) due (sign -1), and under "whole" its count of pieces
    assert mapped.digest.positions.tolist() == [PIECES, 0, 1] * 2 and mapped.digest.counts.tolist() == [-1, -1, 1] * 2
    assert due_of([0], policy="split").digest.positions.tolist() == [0, 1]  # pieces counted only for "whole"
    docs = [{"id": 0, "input_ids": [1, 2, 3]}, {"id": 1, "input_ids": [4]}, {"id": 2, "text": "abcd"}]
    assert due_of(docs[:2], unit="token").due == 4
    assert due_of(docs[2:], unit="token", length_of="text").due == 4
    assert due_of(docs, unit="token", length_of=lambda d: len(d.get("text", "xy"))).due == 8
    assert due_of([{"key": 7}], id_key="key").documents == 1
    cut = due_of(docs[:2], unit="token", policy="truncate", max_length=2)
    assert (cut.due, cut.dropped) == (3, 1)
    many = due_of(({"id": i, "input_ids": [0, 0, 0]} for i in range(5000)), unit="token", policy="truncate",
                  max_length=2)  # past one chunk of 4,096
    assert (many.due, many.dropped, many.documents) == (10_000, 5_000, 5_000)
    assert due_of(range(5000)).documents == 5000


def test_due_of_refuses_what_it_cannot_count_by_path():
    with pytest.raises(TensorcadError) as no_id:
        due_of([{"id": 1}, {"name": 2}])
    assert str(no_id.value) == "documents[1]: a document has no 'id' field"
    with pytest.raises(TensorcadError) as no_length:
        due_of([{"id": 1, "input_ids": [1]}, {"id": 2}], unit="token")
    assert str(no_length.value) == ("documents[1]: counting tokens needs each document's length: give length_of "
                                    "(a field or a function) or an 'input_ids' field")
    with pytest.raises(TensorcadError) as plain:
        due_of([3, 4], unit="token")
    assert str(plain.value).startswith("documents[0]: counting tokens needs each document's length")
    with pytest.raises(TensorcadError) as bad_id:
        due_of([{"id": 1.5}])
    assert str(bad_id.value) == "documents[0]: a document id is an integer or a string, got 1.5"
