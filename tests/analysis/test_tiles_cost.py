"""What deciding tiles coarse to fine costs: the boxes the interval interpreter is asked about.

``count_row_blocks`` decides a row's tiles as runs of 4**k, one level below the whole row,
and splits a run in four only where the verdict is "maybe"; a causal mask never asks about
keys after its query block. Those are what make a 64k-token row cheap, so they are pinned
here by counting the boxes handed to the interpreter (the counts themselves are held to
``create_block_mask`` in test_blocks_oracle.py). One document fills each row, T = 8,192 at
128: 64 query blocks, a pyramid of 3 levels (4**3 = 64), the first boxes 16 tiles wide.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorcad.analysis.tiles as tiles
from tensorcad.analysis.tiles import row_tile_counts

from helpers import attention  # tests/analysis, on sys.path

ROLES = {"doc": "documents"}
SEQ, BLOCK, BLOCKS = 8192, 128, 64


@pytest.fixture
def boxes_asked(monkeypatch):
    """The number of boxes in each call of the interval interpreter."""
    asked: list[int] = []

    def counting(keep, box):
        asked.append(int(np.size(box.q[0])))
        return interval(keep, box)

    interval = tiles.interval
    monkeypatch.setattr(tiles, "interval", counting)
    return asked


def one_document():
    return np.zeros((1, SEQ), dtype=np.int64)


def test_a_row_kept_whole_is_decided_at_the_first_level(boxes_asked):
    # an or with sinks is not range-decidable: the interpreter decides it. Every run of 16
    # tiles is kept whole: 64 query blocks x 4 runs, one call, nothing split
    att = attention("(doc(b, q) == doc(b, kv)) | (kv < 2)", causal=False, roles=ROLES)
    full, partial = row_tile_counts(att, one_document())
    assert (full == BLOCKS).all() and (partial == 0).all()
    assert boxes_asked == [BLOCKS * 4]


def test_a_causal_row_asks_nothing_after_its_query_block(boxes_asked):
    # Query block i asks runs 0..i // 16 of 16 tiles (160 in all), splits the one holding its
    # diagonal into runs of 4 up to i // 4 (i // 4 % 4 + 1 each, 160), and that one into
    # tiles up to i (i % 4 + 1 each, 160). Without the causal short cut the first level alone
    # would ask 256.
    att = attention("(doc(b, q) == doc(b, kv)) | (kv < 2)", roles=ROLES)
    full, partial = row_tile_counts(att, one_document())
    assert (full == np.arange(BLOCKS)).all() and (partial == 1).all()
    per_level = [sum(i // span % 4 + 1 for i in range(BLOCKS)) for span in (16, 4, 1)]
    assert per_level == [160, 160, 160]
    assert boxes_asked == per_level


def test_a_padded_pyramid_level_leaves_the_short_run_decided(boxes_asked):
    # 24 blocks (T = 3,072): the first level's runs are tiles 0-15 and 16-23, the second
    # padded past the row, which must not widen its ranges. Documents of 1,024 and 2,048
    # tokens: every query block asks both runs (48); the first run holds both documents and
    # is split (24 x 4 = 96), where only the queries of the second document meet the sinks
    # undecided, in tiles 0-3 (16 x 4 = 64). The second run is decided whole for every query.
    att = attention("(doc(b, q) == doc(b, kv)) | (kv < 2)", causal=False, roles=ROLES)
    documents = np.repeat([0, 1], [1024, 2048])[None, :]
    full, partial = row_tile_counts(att, documents)
    second = np.arange(24) >= 8
    assert (full[0, 0] == np.where(second, 16, 8)).all()
    assert (partial[0, 0] == second).all()
    assert boxes_asked == [48, 96, 64]


def test_a_mask_the_ranges_decide_never_asks_the_interpreter(boxes_asked):
    # document-causal: decided from each tile's first and last document and position
    # (design.block_ranges), exactly and without a box
    att = attention("doc(b, q) == doc(b, kv)", roles=ROLES)
    full, partial = row_tile_counts(att, one_document())
    assert (full == np.arange(BLOCKS)).all() and (partial == 1).all()
    assert boxes_asked == []
