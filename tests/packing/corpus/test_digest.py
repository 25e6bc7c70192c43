"""The counting digest against a brute-force count of every (document, token) pair, and merged by shards."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.digest import PIECES, Digest, Tally, differences, first_named, hash_ids


def _random_pieces(rng: np.random.Generator, lengths: list[int]):
    """Each document cut at random places; some pieces dropped, some repeated, some cut short."""
    pieces = []
    for d, n in enumerate(lengths):
        cuts = sorted({0, n, *rng.integers(0, n + 1, size=rng.integers(0, 3)).tolist()})
        for s, e in zip(cuts, cuts[1:]):
            roll = rng.random()
            if roll < 0.1:
                continue  # lost
            pieces.append((d, s, e))
            if roll > 0.9:
                pieces.append((d, s, e))  # duplicated
            if 0.5 < roll < 0.55 and e - s > 1:
                pieces[-1] = (d, s, e - 1)  # cut short
    return pieces


def _brute(lengths: list[int], pieces: list[tuple[int, int, int]]):
    seen = collections.Counter((d, t) for d, s, e in pieces for t in range(s, e))
    due = collections.Counter((d, t) for d, n in enumerate(lengths) for t in range(n))
    lost = {d: 0 for d in range(len(lengths))}
    dup = dict(lost)
    for key in seen.keys() | due.keys():
        diff = seen[key] - due[key]
        if diff < 0:
            lost[key[0]] -= diff
        elif diff > 0:
            dup[key[0]] += diff
    return lost, dup


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 12), min_size=1, max_size=30))
def test_differences_equal_a_count_of_every_token(seed, lengths):
    rng = np.random.default_rng(seed)
    pieces = _random_pieces(rng, lengths)
    seen, due = Tally(compact_every=7), Tally()
    if pieces:
        d, s, e = (np.asarray(x) for x in zip(*pieces))
        seen.add(hash_ids(d), s, e)
    due.add(hash_ids(np.arange(len(lengths))), np.zeros(len(lengths)), np.asarray(lengths))
    diff = differences(seen.digest().merge(due.digest().negated()))
    lost, dup = _brute(lengths, pieces)
    by_key = dict(zip(hash_ids(np.arange(len(lengths))).tolist(), range(len(lengths))))
    got_lost = {by_key[k]: int(v) for k, v in zip(diff.keys.tolist(), diff.lost)}
    got_dup = {by_key[k]: int(v) for k, v in zip(diff.keys.tolist(), diff.duplicated)}
    assert {d: v for d, v in lost.items() if v} == {d: v for d, v in got_lost.items() if v}
    assert {d: v for d, v in dup.items() if v} == {d: v for d, v in got_dup.items() if v}
    assert seen.tokens == sum(e - s for _, s, e in pieces)
    counts = collections.Counter((d, t) for d, s, e in pieces for t in range(s, e))
    most = {d: max(counts[d, t] for t in range(n)) for d, n in enumerate(lengths) if dup[d]}
    assert most == {by_key[k]: int(c) for k, c in zip(diff.keys.tolist(), diff.copies) if by_key[k] in most}


def test_per_shard_digests_merge_to_the_whole_in_any_grouping():
    rng = np.random.default_rng(1)
    keys = hash_ids(rng.integers(0, 50, size=400))
    starts = rng.integers(0, 20, size=400)
    ends = starts + rng.integers(1, 5, size=400)
    whole = Tally(count_pieces=True)
    whole.add(keys, starts, ends)
    shards = []
    for part in np.array_split(np.arange(400), 7):
        t = Tally(count_pieces=True)
        t.add(keys[part], starts[part], ends[part])
        shards.append(t.digest())
    merged = shards[3].merge(*shards[:3], *shards[4:])
    nested = shards[0].merge(shards[1]).merge(Digest.empty().merge(*shards[2:]))
    for d in (merged, nested):
        for name, array in whole.digest().to_arrays().items():
            assert np.array_equal(array, d.to_arrays()[name])
    assert whole.digest().merge(whole.digest().negated()).zero


def test_a_split_document_cancels_in_tokens_but_not_in_pieces():
    key = hash_ids([5])
    seen, due = Tally(count_pieces=True), Tally(count_pieces=True)
    seen.add(np.r_[key, key], [0, 4], [4, 9])
    due.add(key, [0], [9])
    diff = seen.digest().merge(due.digest().negated())
    assert diff.positions.tolist() == [PIECES] and diff.counts.tolist() == [1]
    assert differences(diff).extra_pieces.tolist() == [1] and differences(diff).lost_tokens == 0


def test_ids_hash_the_same_from_python_numpy_and_strings():
    assert hash_ids([3, 4]).tolist() == hash_ids(np.asarray([3, 4], dtype=np.int32)).tolist()
    assert hash_ids(np.asarray([3, "a"], dtype=object))[0] == hash_ids([3])[0]
    assert len(set(hash_ids(np.arange(100_000)).tolist())) == 100_000
    with pytest.raises(TensorcadError, match=r"ids\[1\]"):
        hash_ids(np.asarray(["a", 1.5], dtype=object))
    with pytest.raises(TensorcadError, match="ids"):
        hash_ids(np.asarray([1.5]))


def test_first_named_reads_in_order_and_stops():
    ids = iter([f"d{i}" for i in range(10_000)] + [None])  # None would fail to hash: it must stop before
    wanted = [hash_ids(np.asarray(["d9", "d4000"], dtype=object)), hash_ids(np.asarray(["d2"], dtype=object))]
    assert first_named(ids, wanted, chunk=100) == ["d9", "d2"]
