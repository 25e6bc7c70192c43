"""``Lengths.merge``: histograms of shards added up are the histogram of their concatenation, exactly."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.histogram import MAX_DOCUMENTS, MAX_LENGTH, Lengths


def counted(lengths) -> Lengths:
    table = Counter(lengths)
    return Lengths(tuple(sorted(table)), tuple(table[v] for v in sorted(table)))


@given(st.lists(st.lists(st.integers(1, MAX_LENGTH), min_size=1, max_size=40), min_size=1, max_size=8))
def test_any_shards_merged_in_any_grouping_are_their_concatenation(shards):
    whole = counted([n for shard in shards for n in shard])
    parts = [counted(shard) for shard in shards]
    assert parts[0].merge(*parts[1:]) == whole
    assert Lengths.merge(*reversed(parts)) == whole  # the unbound form, in the other order
    halves = (parts[0].merge(*parts[1:len(parts) // 2 + 1]),) + tuple(parts[len(parts) // 2 + 1:])
    assert halves[0].merge(*halves[1:]) == whole


def test_counts_up_to_the_most_a_histogram_holds_add_exactly():
    merged = Lengths((7,), (2**49,)).merge(Lengths((7, 9), (2**49 - 3, 3)))
    assert merged.counts == (2**50 - 3, 3) and merged.documents == MAX_DOCUMENTS


def test_merging_past_the_documents_a_histogram_holds_is_refused():
    half = Lengths((1,), (MAX_DOCUMENTS // 2 + 1,))
    with pytest.raises(TensorcadError, match="more than"):
        half.merge(half)
    with pytest.raises(TensorcadError, match="merges only Lengths"):
        half.merge({"1": 2})


def test_the_merge_names_what_it_merged():
    a, b = Lengths((1,), (1,), "a.json"), Lengths((2,), (1,), "b.json")
    assert a.merge(b).source == "a.json + b.json"
    assert a.merge(*[b] * 9).source == "a.json + 9 more"
