"""The packing sampler: its arrays, its determinism, and its figures against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tensorcad.packing import closed_form as cf
from tensorcad.errors import TensorcadError
from tensorcad.packing import (
    Packing,
    Stream,
    document_lengths,
    draw,
    draw_boundaries,
    positions_of,
)


def positions_by_loop(documents: np.ndarray) -> np.ndarray:
    """The collator's rule, one token at a time: restart at each new id and each row."""
    out = np.zeros_like(documents, dtype=np.int64)
    for r in range(documents.shape[0]):
        for t in range(1, documents.shape[1]):
            out[r, t] = 0 if documents[r, t] != documents[r, t - 1] else out[r, t - 1] + 1
    return out


# --- Packing ---------------------------------------------------------------------------------


def test_packing_defaults_to_spread_one_and_normalises_to_floats():
    packing = Packing(1024)
    assert (packing.mean, packing.spread) == (1024.0, 1.0)
    assert Packing(96, 0) == Packing(96.0, 0.0)
    with pytest.raises(AttributeError):
        packing.mean = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("mean", "spread", "path"),
    [
        (0, 1, "packing.mean"),
        (-3, 1, "packing.mean"),
        (2**24 + 1, 1, "packing.mean"),
        (float("inf"), 1, "packing.mean"),
        (float("nan"), 1, "packing.mean"),
        (True, 1, "packing.mean"),
        ("1024", 1, "packing.mean"),
        (None, 1, "packing.mean"),
        (1024, -0.1, "packing.spread"),
        (1024, 10.5, "packing.spread"),
        (1024, float("nan"), "packing.spread"),
        (1024, False, "packing.spread"),
        (1024, "1", "packing.spread"),
    ],
)
def test_packing_refuses_bad_values(mean, spread, path):
    with pytest.raises(TensorcadError) as error:
        Packing(mean, spread)
    assert error.value.path == path


def test_packing_accepts_the_edges():
    assert Packing(2**24, 10).spread == 10.0
    assert Packing(0.5, 0).mean == 0.5


# --- document lengths ------------------------------------------------------------------------


def test_fixed_lengths_are_the_mean_rounded():
    assert document_lengths(1024, 0, 5, seed=3).tolist() == [1024] * 5
    assert document_lengths(95.5, 0, 3).tolist() == [96] * 3  # halves round up
    assert document_lengths(0.2, 0, 3).tolist() == [1] * 3  # at least one token


@pytest.mark.parametrize("spread", [0.5, 1.0, 2.0])
def test_lengths_are_one_per_stratum_shuffled(spread):
    count = 4096
    lengths = document_lengths(300, spread, count, seed=5)
    assert lengths.dtype == np.int64 and lengths.shape == (count,) and lengths.min() >= 1
    # Against scipy's gamma, independently: the sorted lengths are the stratum midpoints.
    shape = 1 / spread**2
    expected = stats.gamma(shape, scale=300 / shape).ppf((np.arange(count) + 0.5) / count)
    assert np.sort(lengths).tolist() == np.maximum(np.floor(expected + 0.5), 1).astype(int).tolist()
    assert not np.array_equal(lengths, np.sort(lengths))
    assert lengths.mean() == pytest.approx(300, rel=0.01)
    assert lengths.std() / lengths.mean() == pytest.approx(spread, rel=0.05)


def test_lengths_are_deterministic_in_the_seed():
    a, b = document_lengths(100, 1, 2000, seed=1), document_lengths(100, 1, 2000, seed=1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, document_lengths(100, 1, 2000, seed=2))


# --- the stream and its rows -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "seq", "mean", "spread"),
    [(1, 1, 1, 0), (4, 512, 96, 1), (64, 4096, 900.5, 2), (3, 100, 0.3, 1)],
)
def test_stream_holds_enough_documents_for_every_row(rows, seq, mean, spread):
    stream = Stream.build(rows, seq, mean, spread, seed=0)
    assert len(stream.lengths) >= max(1024, math.ceil(rows * seq / max(mean, 1)))
    assert stream.total >= rows * seq
    assert stream.starts.min() >= 0 and stream.starts.max() < stream.total
    # One start in each of ``rows`` equal slices of the stream, in shuffled order.
    slices = np.floor(np.sort(stream.starts) / stream.total * rows).astype(int)
    assert slices.tolist() == list(range(rows))


def test_draw_shapes_and_arrays():
    documents, positions = draw(rows=4, seq=512, mean=96, spread=1.0, seed=0)
    assert documents.shape == positions.shape == (4, 512)
    assert documents.dtype == positions.dtype == np.int64
    assert (documents[:, 0] == 0).all()
    assert set(np.unique(np.diff(documents, axis=1)).tolist()) == {0, 1}
    assert np.array_equal(positions, positions_by_loop(documents))


@pytest.mark.parametrize("spread", [0.0, 1.0, 2.0])
def test_draw_is_deterministic(spread):
    first = draw(16, 1000, 77, spread, seed=9)
    again = draw(16, 1000, 77, spread, seed=9)
    other = draw(16, 1000, 77, spread, seed=10)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0]) or not np.array_equal(first[1], other[1])


def test_positions_are_the_loop_for_drawn_and_arbitrary_ids():
    documents, positions = draw(32, 700, 30, 2.0, seed=3)
    assert np.array_equal(positions, positions_by_loop(documents))
    assert np.array_equal(positions_of(documents), positions)
    arbitrary = np.random.default_rng(0).integers(-2, 3, (6, 40)).astype(np.int32)
    assert np.array_equal(positions_of(arbitrary), positions_by_loop(arbitrary))
    assert np.array_equal(positions_of(arbitrary[2]), positions_by_loop(arbitrary[2:3])[0])
    assert positions_of(np.zeros((2, 0), dtype=np.int64)).shape == (2, 0)


@pytest.mark.parametrize(
    "bad", [[0, 0, 1], np.zeros((2, 2, 2), dtype=int), np.zeros(4), np.zeros(3, dtype=bool)]
)
def test_positions_of_refuses_what_is_not_ids(bad):
    with pytest.raises(TensorcadError):
        positions_of(bad)


def test_boundaries_read_the_same_rows_without_materialising():
    boundaries = draw_boundaries(20, 900, 64, 1.0, seed=4)
    documents, positions = draw(20, 900, 64, 1.0, seed=4)
    t = np.random.default_rng(1).integers(0, 900, (20, 50))
    assert np.array_equal(boundaries.document_at(t), np.take_along_axis(documents, t, axis=1))
    assert np.array_equal(boundaries.position_at(t), np.take_along_axis(positions, t, axis=1))
    for r in range(20):
        cuts = boundaries.cuts[boundaries.offsets[r] : boundaries.offsets[r + 1]]
        assert cuts.tolist() == (np.flatnonzero(np.diff(documents[r])) + 1).tolist()


@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_rows_begin_inside_documents_at_every_phase(spread):
    # A row's first token has ``first_age`` tokens of its document before it.
    # For a stationary stream that is the backward recurrence time, whose
    # mean is E[L(L - 1)/2] / E[L] = mu (1 + c^2)/2 - 1/2: the size-biased
    # mean, not the row that begins on a boundary (age 0).
    boundaries = draw_boundaries(16384, 2048, 256, spread, seed=2)
    assert (boundaries.first_age == 0).mean() < 0.02
    expected = cf.size_biased(256, spread) - 1
    assert boundaries.first_age.mean() == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize(("spread", "rows", "tolerance"), [(0.0, 1024, 0.002), (1.0, 16384, 0.01)])
def test_pieces_are_as_many_as_a_renewal_stream_gives(spread, rows, tolerance):
    # Boundaries fall once every mu tokens, so a row of T holds 1 + (T - 1)/mu pieces.
    seq, mean = 2048, 256
    boundaries = draw_boundaries(rows, seq, mean, spread, seed=0)
    pieces = rows + len(boundaries.cuts)
    assert rows * seq / pieces == pytest.approx(seq / (1 + (seq - 1) / mean), rel=tolerance)


@pytest.mark.parametrize(("seq", "mean"), [(8192, 1024), (4096, 256), (2048, 512)])
def test_fixed_lengths_keep_the_phase_average(seq, mean):
    # Rows that begin on a boundary would give (L + 1)/2; stratified starts give the phase average.
    _, positions = draw(1024, seq, mean, 0.0, seed=0)
    # A query keeps the tokens before it in the row's piece of its document, plus itself.
    keys = float((positions + 1).mean())
    assert keys == pytest.approx(cf.fixed_phase_average(seq, mean), rel=0.005)
    assert abs(keys - cf.fixed_tiled(mean)) > 0.01 * cf.fixed_tiled(mean)


@pytest.mark.parametrize("spread", [0.5, 1.0, 2.0])
def test_gamma_rows_keep_the_edge_corrected_keys(spread):
    # 1,024 rows carry the noise of where long documents are cut: about 2% at c >= 1.
    _, positions = draw(1024, 8192, 1024, spread, seed=0)
    keys = float((positions + 1).mean())
    assert keys == pytest.approx(cf.edge_corrected(8192, 1024, spread), rel=0.04)


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"rows": 0}, "rows"),
        ({"rows": 1.5}, "rows"),
        ({"seq": 0}, "seq"),
        ({"seq": 2**24 + 1}, "seq"),
        ({"mean": 0}, "mean"),
        ({"spread": -1}, "spread"),
        ({"seed": -1}, "seed"),
        ({"seed": "0"}, "seed"),
        ({"rows": 2**20, "seq": 2**20}, "rows"),
    ],
)
def test_draw_refuses_bad_arguments(kwargs, path):
    arguments = {"rows": 2, "seq": 64, "mean": 16, "spread": 1.0, "seed": 0, **kwargs}
    with pytest.raises(TensorcadError) as error:
        draw(**arguments)
    assert error.value.path == path


@pytest.mark.parametrize("rows,seq,mean,spread,seed", [
    (4, 50, 7, 1.0, 0), (3, 40, 13, 2.0, 1), (2, 30, 5, 0.0, 2), (1, 200, 30, 0.5, 3),
])
def test_causal_keys_every_window_is_every_window(rows, seq, mean, spread, seed):
    # Every start of the circular stream, its row built token by token and
    # each query's position + 1 summed: what a document-causal mask keeps.
    stream = Stream.build(rows, seq, mean, spread, seed)
    documents = np.repeat(np.arange(len(stream.lengths)), stream.lengths)
    total = len(documents)
    windows = documents[(np.arange(total)[:, None] + np.arange(seq)[None, :]) % total]
    expected = float((positions_of(windows) + 1).mean())
    assert stream.causal_keys_every_window() == pytest.approx(expected, rel=1e-12)


def test_packing_of_optional_settings():
    from tensorcad.packing import packing_of

    assert packing_of(None) is None
    assert packing_of(512) == Packing(512, 1.0)  # a mean alone: spread 1, real corpora vary
    assert packing_of(512, 0) == Packing(512, 0.0)
    with pytest.raises(TensorcadError) as info:
        packing_of(None, 0.5, mean_path="--pack", spread_path="--pack-spread")
    assert info.value.path == "--pack-spread" and "--pack" in info.value.message
