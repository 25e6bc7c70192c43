"""A JSON histogram's keys are lengths in ASCII digits (issue 47).

Before this round (049439c, run here): the keys " 5 ", "+5", "1_0" (read as 10), "1e3" and "5.0" were accepted
where docs/security.md says ASCII digits.
"""

from __future__ import annotations

import json

import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.histogram import lengths_from_bytes


@pytest.mark.parametrize("key", [" 5 ", "+5", "1_0", "1e3", "5.0", "-5", "-0", "0x10", "", "5 ", "\u0665", "9" * 5000])
def test_a_key_that_is_not_ascii_digits_is_one_line(key):
    with pytest.raises(TensorcadError) as refused:
        lengths_from_bytes(json.dumps({key: 3, "7": 1}).encode(), "h.json")
    text = str(refused.value)
    assert text.startswith("h.json:") and "\n" not in text and len(text) <= 300, text


def test_digit_keys_are_read():
    lengths = lengths_from_bytes(json.dumps({"5": 3, "12": 1, "007": 2}).encode(), "h.json")
    assert dict(zip(lengths.values, lengths.counts)) == {5: 3, 7: 2, 12: 1}
