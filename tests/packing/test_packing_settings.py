"""A packing's settings: empirical lengths, the options that make a packing, their errors.

``test_packing.py`` holds the sampler's arrays and figures; this file holds what a user
types or hands in: a histogram of lengths (whose own mean and spread replace the two
numbers), the strategy and buffer, ``packing_of``'s optional settings as the CLI, MCP and
editor pass them, each refusal naming the setting it refuses and saying why, and the
seeded draw itself, pinned so that a golden made with one version's rows holds in the next.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tensorcad.packing.corpus.histogram import Lengths
from tensorcad.errors import TensorcadError
from tensorcad.packing import (
    MAX_MEAN,
    Packing,
    Stream,
    check_mean,
    check_spread,
    check_strategy,
    draw,
    draw_boundaries,
    packing_of,
)

# a histogram of two lengths: any other length in a row shows it was not drawn from it
TWO = Lengths((50, 300), (3, 1), "two.json")


def refused(call, *args, **kwargs) -> tuple[str, str]:
    with pytest.raises(TensorcadError) as error:
        call(*args, **kwargs)
    return error.value.path, error.value.message


# --- empirical lengths -----------------------------------------------------------------------


def test_a_histogram_brings_its_own_mean_and_spread():
    packing = Packing(None, None, lengths=TWO)
    values = np.repeat([50, 300], [3, 1])
    assert packing.mean == values.mean() == 112.5
    assert packing.spread == pytest.approx(values.std() / values.mean(), rel=1e-12)
    assert isinstance(packing.spread, float) and packing.strategy == "stream"


def test_a_mean_beside_the_histogram_must_be_its_own():
    assert Packing(112.5, lengths=TWO).mean == 112.5
    # a mean summed in another order agrees to far better than 1e-9
    assert Packing(112.5 * (1 + 1e-12), lengths=TWO).mean == 112.5
    path, message = refused(Packing, 112.6, lengths=TWO)
    assert path == "packing.mean"
    assert message == "112.6 disagrees with the lengths' own mean 112.5; give one or the other"


def test_lengths_must_be_a_histogram():
    assert refused(Packing, None, None, lengths=[50, 300]) == (
        "packing.lengths", "expected a Lengths (corpus.histogram.load_lengths)")


def test_nothing_to_pack_is_refused():
    assert refused(Packing, None) == ("packing.mean", "a packing needs a mean document length or lengths")


def test_the_histogram_is_drawn_stratum_by_stratum():
    # as many documents as the histogram holds: the strata are its lengths, each once
    packing = Packing(None, None, lengths=TWO)
    drawn = packing.document_lengths(4, seed=3)
    assert sorted(drawn.tolist()) == [50, 50, 50, 300] and drawn.dtype == np.int64
    many = packing.document_lengths(400, seed=3)
    assert np.bincount(many)[[50, 300]].tolist() == [300, 100]
    assert (packing.document_lengths(400, seed=3) == many).all()
    assert (packing.document_lengths(400, seed=4) != many).any()  # the seed shuffles
    assert refused(packing.document_lengths, 0) == ("count", "expected an integer in 1..2,147,483,648, got 0")
    assert refused(packing.document_lengths, 4, seed=-1)[0] == "seed"


def test_rows_of_a_histogram_hold_only_its_lengths():
    # whole documents inside the rows (not cut by a row's edge) are 50 or 300 tokens
    for packing in (Packing(None, None, lengths=TWO), Packing(None, None, lengths=TWO, strategy="bfd")):
        documents, _ = draw(64, 700, packing=packing)
        for row in documents:
            ids, counts = np.unique(row, return_counts=True)
            inner = counts[(ids != row[0]) & (ids != row[-1])]
            assert set(inner.tolist()) <= {50, 300}, packing.strategy
    stream = Stream.build(64, 700, None, lengths=TWO)
    assert set(np.unique(stream.lengths).tolist()) == {50, 300}


# --- strategies and the draw -----------------------------------------------------------------


def test_a_bin_packer_starts_every_row_with_a_whole_document_and_pads():
    for strategy in ("bfd", "ffd", "pad"):
        packing = Packing(300, 0.5, strategy=strategy)
        boundaries = draw_boundaries(32, 1024, packing=packing)
        _, positions = draw(32, 1024, packing=packing)
        assert (positions[:, 0] == 0).all() and (boundaries.first_age == 0).all(), strategy
        assert boundaries.padding is not None and (boundaries.padding > 0).any(), strategy
    # the stream cuts rows anywhere: most rows begin inside a document
    assert (draw_boundaries(32, 1024, packing=Packing(300, 0.5)).first_age > 0).mean() > 0.5


def test_a_stream_packing_draws_what_its_mean_and_spread_draw():
    by_packing = draw(8, 512, packing=Packing(40, 0.5), seed=2)
    by_numbers = draw(8, 512, 40, 0.5, seed=2)
    assert all((a == b).all() for a, b in zip(by_packing, by_numbers))
    assert (draw(8, 512, 40, seed=2)[0] == draw(8, 512, 40, 1.0, seed=2)[0]).all()  # spread 1


def fingerprint(arrays) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


# Recorded from this version's draw: a change to how rows are drawn (the strata, the
# shuffle, where rows begin) fails here, and must say so (it moves every seeded golden).
# numpy's generator is the same on every platform; numpy and scipy are pinned (constraints.txt)
PINNED = {
    "gamma": ((16, 256, 40, 1.0, 7), None),
    "fixed": ((16, 256, 40, 0.0, 7), None),
    "tiny-mean": ((32, 64, 1.5, 2.0, 1), None),  # more documents than the stream's least
    "many-documents": ((64, 2048, 40, 1.0, 3), None),
    "exact-fit": ((64, 1024, 64, 0.0, 2), None),      # the documents fill the rows exactly
    "rounded-short": ((128, 1024, 64.4, 0.0, 2), None),  # 64 a document: short, drawn again
    "histogram-grown": ((200, 2048, None, 1.0, 3), Packing(None, None, lengths=TWO)),  # short: grown
    "histogram": ((16, 256, None, 1.0, 7), Packing(None, None, lengths=TWO)),
}
DRAWN = {"fixed": "ca1a845c53d190a8", "gamma": "a5e163272b683c6e", "histogram": "23e411c0ab7184e7",
         "tiny-mean": "4ab36da374616ffd", "many-documents": "e0cac5e36466771e", "exact-fit": "305ade1fa79c79ee",
         "rounded-short": "3454d9cb011014f9", "histogram-grown": "21a8028144469599"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_seeded_draw_is_pinned_across_versions(name):
    (rows, seq, mean, spread, seed), packing = PINNED[name]
    arrays = draw(rows, seq, mean, spread, seed, packing=packing)
    assert fingerprint(arrays) == DRAWN[name]


def test_a_stream_refuses_rows_seq_and_seed_out_of_range():
    assert refused(Stream.build, 0, 64, 10)[0] == "rows"
    assert refused(Stream.build, 1, 0, 10)[0] == "seq"
    assert refused(Stream.build, 1, 64, 10, 1.0, -1)[0] == "seed"
    assert refused(Stream.build, 1, 64, 10, 1.0, 2**63)[0] == "seed"
    assert Stream.build(1, 64, 10, 1.0, 2**63 - 1).seq == 64


# --- the settings, as every front end passes them --------------------------------------------


def test_packing_of_makes_the_packing_the_settings_say(tmp_path):
    assert packing_of(None) is None
    assert packing_of(300) == Packing(300.0, 1.0)
    assert packing_of(300, 0.5, strategy="ffd") == Packing(300.0, 0.5, strategy="ffd")
    assert packing_of(None, lengths=TWO) == Packing(None, None, lengths=TWO)
    assert packing_of(None, lengths=TWO, strategy="split").strategy == "split"
    file = tmp_path / "two.json"
    file.write_text(json.dumps({"50": 3, "300": 1}))
    read = packing_of(None, lengths=str(file))
    assert (read.mean, read.lengths.arrays[0].tolist()) == (112.5, [50, 300])


def test_packing_of_names_the_setting_it_refuses():
    assert refused(packing_of, 300, lengths=TWO) == ("pack", "cannot be given with pack_lengths, which has its own")
    assert refused(packing_of, None, 0.5, lengths=TWO, spread_path="op.spread", lengths_path="op.lengths") == (
        "op.spread", "cannot be given with op.lengths, which has its own")
    assert refused(packing_of, None, lengths=7, lengths_path="--pack-lengths") == (
        "--pack-lengths", "expected a file of lengths")
    assert refused(packing_of, None, 0.5) == (
        "pack_spread", "needs pack (the mean document length) or pack_lengths")
    assert refused(packing_of, None, strategy="bfd", strategy_path="--pack-strategy", mean_path="--pack") == (
        "--pack-strategy", "needs --pack (the mean document length) or pack_lengths")
    assert refused(packing_of, 300, strategy="best", strategy_path="s") == (
        "s", "unknown strategy 'best' (strategies: stream, bfd, ffd, split, pad, trl-bfd, trl-bfd-split, "
        "trl-wrapped, torchtune, torchtune-split)")
    assert refused(packing_of, None, lengths=TWO, strategy="best")[0] == "pack_strategy"
    assert refused(packing_of, -3, mean_path="m")[0] == "m"
    assert refused(packing_of, 300, -1, spread_path="sp")[0] == "sp"


def test_each_number_is_refused_with_its_reason():
    assert refused(check_mean, "300") == ("packing.mean", "expected a number, got str")
    assert refused(check_mean, True)[1] == "expected a number, got bool"
    assert refused(check_mean, float("nan")) == ("packing.mean", "expected a finite number, got nan")
    assert refused(check_mean, 0)[1] == f"mean document length must be in (0, {MAX_MEAN}], got 0.0"
    assert check_mean(MAX_MEAN) == MAX_MEAN
    assert refused(check_spread, -0.5, "x") == ("x", "spread must be in [0, 10], got -0.5")
    assert refused(check_spread, 1e-9)[1] == "spread 1e-09 is below 0.0001, fixed lengths in effect: give 0"
    assert check_strategy("pad") == "pad"
    assert refused(check_strategy, None) == (
        "packing.strategy", "unknown strategy None (strategies: stream, bfd, ffd, split, pad, trl-bfd, "
        "trl-bfd-split, trl-wrapped, torchtune, torchtune-split)")


def test_a_packing_states_what_it_was_given():
    assert Packing(300, 0.5).to_json() == {"mean": 300.0, "spread": 0.5, "strategy": "stream"}
    for strategy in ("bfd", "ffd", "split"):
        assert Packing(300, 0.5, strategy=strategy, buffer=64).to_json() == {
            "mean": 300.0, "spread": 0.5, "strategy": strategy, "buffer": 64}
    assert "buffer" not in Packing(300, 0.5, strategy="pad").to_json()
    stated = Packing(None, None, lengths=TWO).to_json()
    assert stated["lengths"] == TWO.summary() and stated["mean"] == 112.5
    assert refused(Packing, 300, buffer=0)[0] == "packing.buffer"


def test_each_row_knows_how_far_into_its_first_document_it_begins():
    # 1,024 rows of 16 tokens over 1,024 documents of 64: a row a document, so rows begin in
    # the stream's first and second documents too. Counted here by walking the stream
    stream = Stream.build(1024, 16, 64, 0.0, seed=5)
    ages, begin, document = [], 0, 0
    for start in sorted(stream.starts.tolist()):
        while begin + int(stream.lengths[document]) <= start:
            begin += int(stream.lengths[document])
            document += 1
        ages.append(start - begin)
    order = np.argsort(stream.starts, kind="stable")
    assert stream.boundaries().first_age[order].tolist() == ages
    assert sorted(stream.starts.tolist())[0] < 64  # the first document holds a row's start


def test_the_defaults_are_spread_one_and_seed_zero():
    from tensorcad.packing import document_lengths

    assert fingerprint(draw(8, 512, 40)) == fingerprint(draw(8, 512, 40, 1.0, 0))
    built, given = Stream.build(8, 512, 40), Stream.build(8, 512, 40, 1.0, 0)
    assert (built.lengths == given.lengths).all() and (built.starts == given.starts).all()
    assert (document_lengths(40, 1.0, 64) == document_lengths(40, 1.0, 64, 0)).all()
    histogram = Packing(None, None, lengths=TWO)
    assert (histogram.document_lengths(64) == histogram.document_lengths(64, 0)).all()
    assert (draw_boundaries(8, 512, 40).cuts == draw_boundaries(8, 512, 40, 1.0, 0).cuts).all()
    assert draw(1, 1, 3)[0].tolist() == [[0]]


def test_a_draw_too_large_to_hold_is_refused_before_it_is_made():
    path, message = refused(draw, 2**15, 2**14, 40)
    assert path == "rows" and message.endswith("to materialise; use draw_boundaries")


def test_settings_are_normalised():
    packing = Packing(300, None, strategy=np.str_("bfd"), buffer=np.int64(1))
    assert (packing.mean, packing.spread, packing.buffer) == (300.0, 1.0, 1)
    assert type(packing.mean) is float and type(packing.strategy) is str and type(packing.buffer) is int
    assert check_spread(1e-4) == 1e-4
    assert refused(check_spread, 5e-5, "sp")[0] == "sp"


def test_document_lengths_name_what_they_refuse():
    from tensorcad.packing import document_lengths

    assert refused(document_lengths, 0, 1.0, 4)[0] == "mean"
    assert refused(document_lengths, 10, -1, 4)[0] == "spread"
    assert refused(document_lengths, 10, 1.0, 0)[0] == "count"
    assert document_lengths(10, 1.0, 1).shape == (1,)
    assert refused(document_lengths, 10, 1.0, 4, 2**63)[0] == "seed"
    assert document_lengths(10, 1.0, 4, 2**63 - 1).shape == (4,)
    lengths = Packing(None, None, lengths=TWO)
    assert refused(lengths.document_lengths, 4, 2**63)[0] == "seed"
    assert lengths.document_lengths(1, 2**63 - 1).shape == (1,)


def test_lengths_are_read_from_a_path_or_a_parquet_column(tmp_path):
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    file = tmp_path / "two.json"
    file.write_text(json.dumps({"50": 3, "300": 1}))
    assert packing_of(None, lengths=Path(file)).mean == 112.5
    table = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"tokens": [50, 50, 50, 300]}), table)
    assert packing_of(None, lengths=table, column="tokens").mean == 112.5


def test_packing_takes_lengths_alone_and_prints_them_as_a_summary():
    # Before: Packing(lengths=L, strategy="bfd") raised TypeError (missing 'mean'); print(L) printed every length.
    rng = np.random.default_rng(0)
    documents = rng.integers(1, 5000, size=20_000)
    lengths = Lengths.of(documents, source="corpus.jsonl")
    packing = Packing(lengths=lengths, strategy="bfd")
    assert packing.mean == pytest.approx(documents.mean(), rel=1e-12) and packing.strategy == "bfd"
    assert packing.spread == pytest.approx(documents.std() / documents.mean(), rel=1e-9)
    text = repr(lengths)
    assert text == (f"Lengths(20,000 documents, mean {documents.mean():,.1f}, spread "
                    f"{documents.std() / documents.mean():.3f}, lengths {documents.min():,}..{documents.max():,}, "
                    "source='corpus.jsonl')")
    assert len(repr(packing)) < 300
