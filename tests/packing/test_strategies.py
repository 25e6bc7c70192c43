"""The packing strategies against brute-force packers written here, and against TRL's own.

The brute-force packers are plain Python over lists, one document at a time,
sharing nothing with ``tensorcad.packing.strategies``: best fit scans every open row for
the tightest, first fit for the first, split cuts what exceeds a row first.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorcad
from tensorcad.packing import closed_form as cf
from tensorcad.packing.corpus.histogram import Lengths
from tensorcad.packing.strategies import draw_packed, pack
from tensorcad.packing import STRATEGIES, Packing, draw

SEQ = 8192
BUFFER = 1000


def lognormal(mean: float, spread: float, count: int, seed: int) -> np.ndarray:
    """Whole-token log-normal lengths of the given mean and coefficient of variation."""
    sigma2 = np.log1p(spread**2)
    draws = np.random.default_rng(seed).lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)
    return np.maximum(np.round(draws), 1).astype(np.int64)


def brute_pack(lengths, seq, strategy, buffer=BUFFER):
    """Rows as lists of (document, tokens), packed one document at a time."""
    if strategy == "pad":
        return [[(d, min(n, seq))] for d, n in enumerate(lengths)]
    pieces = []
    for d, n in enumerate(lengths):
        if strategy == "split":
            while n > seq:
                pieces.append((d, seq))
                n -= seq
            if n:
                pieces.append((d, n))
        else:
            pieces.append((d, min(n, seq)))
    rows = []
    for start in range(0, len(lengths), buffer):
        mine = [p for p in pieces if start <= p[0] < start + buffer]
        mine.sort(key=lambda p: -p[1])  # stable: ties keep document order
        bins, room = [], []
        for d, n in mine:
            chosen = None
            for b, free in enumerate(room):
                if free >= n and (chosen is None or (strategy != "ffd" and free < room[chosen])):
                    chosen = b
                    if strategy == "ffd":
                        break
            if chosen is None:
                bins.append([])
                room.append(seq)
                chosen = len(bins) - 1
            bins[chosen].append((d, n))
            room[chosen] -= n
        rows.extend(bins)
    return rows


def rows_of(bins):
    """``pack``'s rows as ``brute_pack`` writes them: lists of (document, tokens), in row order."""
    rows = [[] for _ in range(bins.rows)]
    for r, d, n in zip(bins.row.tolist(), bins.document.tolist(), bins.length.tolist()):
        rows[r].append((d, n))
    return rows


def figures(rows, seq):
    """(padding, keys a query over real tokens) of packed rows, every token counted."""
    real = sum(n for row in rows for _, n in row)
    kept = sum(n * (n + 1) // 2 for row in rows for _, n in row)  # each piece begins a document
    return 1 - real / (len(rows) * seq), kept / real


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split", "pad"])
def test_pack_makes_the_brute_force_packers_rows(strategy):
    lengths = lognormal(1024, 3.0, 3000, seed=1)
    bins = pack(lengths, SEQ, strategy, BUFFER)
    brute = brute_pack(lengths.tolist(), SEQ, strategy)
    assert bins.rows == len(brute)
    assert rows_of(bins) == brute  # the same rows, in the same order, pieces in the same order


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split"])
def test_ties_of_room_go_to_the_lowest_row_as_the_brute_force_packer_puts_them(strategy):
    # Short rows and few lengths: most placements choose among rows left with equal room.
    lengths = np.random.default_rng(3).integers(1, 13, 2000)
    bins = pack(lengths, 16, strategy, 500)
    brute = brute_pack(lengths.tolist(), 16, strategy, buffer=500)
    assert rows_of(bins) == brute


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split"])
def test_pieces_about_half_a_row_go_where_the_brute_force_packer_puts_them(strategy):
    # Best and first fit place every piece over half a row at once (each opens a row); exactly half does not.
    lengths = np.random.default_rng(4).choice([1, 3, 7, 8, 9, 15, 16, 17, 40], 3000)
    bins = pack(lengths, 16, strategy, 700)
    brute = brute_pack(lengths.tolist(), 16, strategy, buffer=700)
    assert rows_of(bins) == brute


@pytest.mark.parametrize("seq", [16, 60, 1024])
@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split"])
def test_runs_of_equal_pieces_go_where_the_brute_force_packer_puts_them(strategy, seq):
    # Best and first fit place a run of equal pieces a bin at a time (as many as its room holds): runs that
    # fill a room exactly, leave a room that still fits the next run, and spill into bins opened for them.
    rng = np.random.default_rng(seq)
    short = np.arange(1, seq // 2 + 1)
    lengths = rng.choice(short, 4000, p=np.exp(-short / (seq / 8)) / np.exp(-short / (seq / 8)).sum())
    bins = pack(lengths, seq, strategy, 900)
    assert rows_of(bins) == brute_pack(lengths.tolist(), seq, strategy, buffer=900)


@pytest.mark.parametrize("strategy", ["bfd", "ffd"])
def test_bfd_and_ffd_never_split_a_document_shorter_than_a_row(strategy):
    lengths = lognormal(1024, 3.0, 5000, seed=2)
    bins = pack(lengths, SEQ, strategy, BUFFER)
    rows_of = {}
    for r, d in zip(bins.row.tolist(), bins.document.tolist()):
        rows_of.setdefault(d, set()).add(r)
    assert all(len(rows) == 1 for rows in rows_of.values())
    assert len(rows_of) == len(lengths)
    # Each is whole, or cut to a row when longer than one (truncated, not split).
    held = np.bincount(bins.document, weights=bins.length, minlength=len(lengths))
    assert (held == np.minimum(lengths, SEQ)).all()
    assert bins.truncated == int((lengths > SEQ).sum()) > 0 and bins.split == 0
    assert (bins.real <= SEQ).all()


def test_split_cuts_only_what_exceeds_a_row_and_loses_nothing():
    lengths = lognormal(1024, 3.0, 5000, seed=3)
    bins = pack(lengths, SEQ, "split", BUFFER)
    held = np.bincount(bins.document, weights=bins.length, minlength=len(lengths))
    assert (held == lengths).all()
    pieces = np.bincount(bins.document, minlength=len(lengths))
    assert (pieces[lengths <= SEQ] == 1).all()
    assert (pieces[lengths > SEQ] == -(-lengths[lengths > SEQ] // SEQ)).all()
    assert bins.split == int((lengths > SEQ).sum())


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split", "pad"])
def test_the_analysis_matches_brute_force_packing_of_independent_documents(strategy):
    """The report's padding and keys a query against documents drawn i.i.d., packed by brute force."""
    documents = lognormal(1024, 3.0, 20_000, seed=7)
    brute_padding, brute_keys = figures(brute_pack(documents.tolist(), SEQ, strategy), SEQ)
    histogram = Lengths.of(lognormal(1024, 3.0, 200_000, seed=8))
    op = tensorcad.OperatingPoint(seq=SEQ, packing=Packing(None, None, lengths=histogram, strategy=strategy))
    packed = tensorcad.analyze("llama-3-8b-documents", op).to_json()["flops"]["packed"]
    assert packed["keysPerQuery"] == pytest.approx(brute_keys, rel=0.03)
    if strategy == "pad":
        # The real share is E[min(L, T)] / T: 20,000 i.i.d. documents know it to 1.2% (one sigma).
        assert 1 - packed["packing"]["padding"] == pytest.approx(1 - brute_padding, rel=0.04)
    else:
        # Padding is what each buffer's last rows leave empty: its standard deviation
        # is 0.06 points for either side here (32 buffers and 20), so 3 sigma of the two.
        assert packed["packing"]["padding"] == pytest.approx(brute_padding, abs=2.5e-3)


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split", "pad"])
def test_the_sampler_holds_to_the_exact_boundary_form(strategy):
    """A bin-packed row begins on a boundary: keys are the mean of (position + 1) over real tokens."""
    histogram = Lengths.of(lognormal(1024, 3.0, 200_000, seed=8))
    packing = Packing(None, None, lengths=histogram, strategy=strategy)
    op = tensorcad.OperatingPoint(seq=SEQ, packing=packing)
    keys = tensorcad.analyze("llama-3-8b-documents", op).to_json()["flops"]["packed"]["keysPerQuery"]
    exact = cf.split_keys(SEQ, histogram) if strategy == "split" else cf.truncated_keys(SEQ, histogram)
    assert keys == pytest.approx(exact, rel=0.01)
    # And the rows drawn, counted token by token, are the packing's own.
    documents, positions = draw(64, 2048, packing=Packing(None, None, lengths=histogram, strategy=strategy))
    padded = draw_packed(Packing(None, None, lengths=histogram, strategy=strategy), 64, 2048).boundaries.padding
    for r in range(64):
        real = 2048 - padded[r]
        ids = documents[r, :real]
        assert (np.diff(ids) >= 0).all() and ids[0] == 0 and positions[r, 0] == 0
        if padded[r]:
            assert (documents[r, real:] == documents[r, real]).all() and documents[r, real] > documents[r, real - 1]


@pytest.mark.parametrize("strategy", ["bfd", "pad"])
def test_padded_rows_blocks_are_flex_attentions_own(strategy):
    """Bin-packed rows, padding a document of its own: the engine's tiles against create_block_mask."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    from tensorcad.analysis.tiles import count_row_blocks

    histogram = Lengths.of(lognormal(300, 2.0, 20_000, seed=4))
    documents, _ = draw(16, 2048, seed=2, packing=Packing(None, None, lengths=histogram, strategy=strategy))
    rows, seq = documents.shape
    flat = torch.from_numpy(documents).view(-1)

    def same_document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (flat[b * seq + q_idx] == flat[b * seq + kv_idx])

    mask = create_block_mask(same_document_causal, B=rows, H=None, Q_LEN=seq, KV_LEN=seq, device="cpu")
    engine = count_row_blocks(tensorcad.load("llama-3-8b-documents").attentions()[0][0], documents)
    assert (engine.partial[:, 0] == mask.kv_num_blocks[:, 0].numpy()).all()
    assert (engine.full[:, 0] == mask.full_kv_num_blocks[:, 0].numpy()).all()


def test_strategies_are_the_documented_ten():
    assert STRATEGIES == ("stream", "bfd", "ffd", "split", "pad",
                          "trl-bfd", "trl-bfd-split", "trl-wrapped", "torchtune", "torchtune-split")


@pytest.mark.parametrize("ours, theirs", [("bfd", "bfd"), ("split", "bfd_split")])
def test_trl_packs_the_same_rows(ours, theirs):
    """TRL's pack_dataset on the same documents: the same number of rows, padding and keys a query."""
    pytest.importorskip("trl", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
    from datasets import Dataset
    from trl import pack_dataset

    lengths = lognormal(1024, 3.0, 3000, seed=11)
    seq = 4096
    data = Dataset.from_dict({"input_ids": [list(range(n)) for n in lengths.tolist()]})
    packed = pack_dataset(data, seq, strategy=theirs)  # datasets.map batches 1,000 examples
    rows = [[(0, n) for n in row] for row in packed["seq_lengths"]]
    bins = pack(lengths, seq, ours, 1000)
    ours_rows = [[] for _ in range(bins.rows)]
    for r, n in zip(bins.row.tolist(), bins.length.tolist()):
        ours_rows[r].append((0, n))
    assert len(rows) == bins.rows
    assert figures(rows, seq) == pytest.approx(figures(ours_rows, seq), rel=1e-12)
