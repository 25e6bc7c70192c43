"""Rows' boundary lookup (#32): each point's document and position, from a table sized by the boundaries.

The table held one entry every 64 tokens of every row: at 1,024 rows of 2^22 tokens, 2^26 entries built by an
arange and a searchsorted of 512 MiB each, over half of `walkthrough --seq 4194304 --pack 1024`. It now holds
about two entries a boundary. Expected values are counted per point from the dense ids, in the test.
"""

from __future__ import annotations

import numpy as np

from tensorcad.analysis.rows import Rows
from tensorcad.packing import RowBoundaries


def test_documents_and_positions_agree_with_a_count_over_the_dense_row():
    rng = np.random.default_rng(32)
    for _ in range(20):
        rows, seq = int(rng.integers(1, 6)), int(rng.integers(1, 3000))
        ids = np.sort(rng.integers(0, int(rng.integers(1, 400)), size=(rows, seq)), axis=1)
        r, t = rng.integers(0, rows, 2000), rng.integers(0, seq, 2000)
        changes = [np.flatnonzero(np.diff(ids[a, :b + 1])) for a, b in zip(r, t)]
        rows_of = Rows.from_arrays(ids)
        assert (rows_of.at("documents", r, t) == [len(c) for c in changes]).all()
        assert (rows_of.at("positions", r, t) == [b - (c[-1] + 1 if len(c) else 0) for b, c in zip(t, changes)]).all()


def test_the_table_is_sized_by_the_boundaries_not_the_tokens():
    rows, seq, mean = 64, 1 << 22, 1024  # 64-token buckets: 2^22 entries; about two a boundary: 2^19
    cuts = np.tile(np.arange(mean, seq, mean, dtype=np.int64), rows)
    offsets = np.arange(rows + 1, dtype=np.int64) * (seq // mean - 1)
    table = Rows(RowBoundaries(seq=seq, cuts=cuts, offsets=offsets, first_age=np.zeros(rows, dtype=np.int64)))
    r, t = np.array([0, 5, 63, 63]), np.array([0, 1024 * 7 + 3, seq - 1, 1023])
    assert table.at("documents", r, t).tolist() == [0, 7, seq // mean - 1, 0]
    assert len(table._buckets) <= 4 * len(cuts), len(table._buckets)  # 64-token buckets: 16x that
