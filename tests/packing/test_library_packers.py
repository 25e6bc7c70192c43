"""The libraries' packers (``trl-*``, ``torchtune*``) held to the libraries themselves, row by row, and to packers written here.

Every document is a run of token ids ``document * STRIDE + offset``, so a row
the library returns says, token by token, which document and which part of it
it holds; positions are read from what the library hands the model
(``seq_lengths`` or ``position_ids`` for TRL, ``input_pos`` for torchtune).
The packers written here work token by token over Python lists, as the
libraries' own loops do, sharing nothing with ``tensorcad.packing.library_packers``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorcad
from tensorcad.packing import Lengths, Packing
from tensorcad.packing.strategies import draw_packed, pack

STRIDE = 1 << 24
BUFFER = 1000


def lognormal(mean: float, spread: float, count: int, seed: int) -> np.ndarray:
    sigma2 = np.log1p(spread**2)
    draws = np.random.default_rng(seed).lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)
    return np.maximum(np.round(draws), 1).astype(np.int64)


def documents(lengths, seq=None):
    """Each document's token ids, cut to ``seq`` when given (a tokenizer's max_seq_len)."""
    return [[d * STRIDE + i for i in range(n if seq is None else min(n, seq))] for d, n in enumerate(lengths)]


def read_row(ids, positions, lengths):
    """A row as (document, offset, first position, tokens) of each piece its lengths mark."""
    ids, positions, row, at = np.asarray(ids), np.asarray(positions), [], 0
    for n in lengths:
        d, o = divmod(int(ids[at]), STRIDE)
        assert (ids[at:at + n] == d * STRIDE + o + np.arange(n)).all(), "a piece is one run of one document"
        row.append((d, o, int(positions[at]), int(n)))
        at += n
    return row


def runs(ids):
    """The lengths of the runs of consecutive tokens of one document (rows that carry no boundaries)."""
    ids = np.asarray(ids)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    return np.diff(np.concatenate(([0], breaks, [len(ids)]))).tolist()


# -- packers written here, token by token ------------------------------------------------


def trl_best_fit_here(pieces, seq):
    """Rows of (document, offset, tokens): longest first, into the smallest room that holds it, ties to the row
    that came to that room first; pieces as (length, document, offset) in document order."""
    order = sorted(range(len(pieces)), key=lambda i: -pieces[i][0])  # stable: ties in document order
    rows, room, since = [], [], []
    for step, i in enumerate(order):
        n, d, o = pieces[i]
        fits = [r for r in range(len(rows)) if room[r] >= n and room[r] < seq]
        if fits:
            r = min(fits, key=lambda r: (room[r], since[r]))
        else:
            rows.append([])
            room.append(seq)
            since.append(step)
            r = len(rows) - 1
        rows[r].append((d, o, 0, n))
        room[r] -= n
        since[r] = step
    return rows


def trl_here(lengths, seq, strategy):
    rows = []
    for first in range(0, len(lengths), BUFFER):
        batch = list(enumerate(lengths[first:first + BUFFER], start=first))
        if strategy == "trl-wrapped":
            tokens = [(d, o) for d, n in batch for o in range(n)]
            for at in range(0, len(tokens), seq):
                chunk, row = tokens[at:at + seq], []
                for k, (d, o) in enumerate(chunk):
                    if row and row[-1][0] == d:
                        row[-1] = (d, row[-1][1], row[-1][2], row[-1][3] + 1)
                    else:
                        row.append((d, o, k, 1))  # the collator's position_ids count through the row
                rows.append(row)
            continue
        pieces = []
        for d, n in batch:
            if strategy == "trl-bfd":
                pieces.append((min(n, seq), d, 0))
            else:
                pieces.extend((min(seq, n - o), d, o) for o in range(0, n, seq))
        rows.extend(trl_best_fit_here(pieces, seq))
    return rows


def torchtune_here(lengths, seq, split):
    """torchtune's loop over token lists: tokens and input_pos accumulate; a pack closes past max_seq_len."""
    packs, tokens, pos, lens, previous = [], [], [], [], 0
    for d, n in enumerate(lengths):
        n = n if split else min(n, seq)  # without split, the tokenizer has cut it to max_seq_len
        tokens += [(d, o) for o in range(n)]
        pos += [o % seq for o in range(n)]
        lens.append(n)
        while len(tokens) > seq:
            boundary = seq if split else previous
            packs.append((tokens[:boundary], pos[:boundary]))
            tokens, pos = tokens[boundary:], pos[boundary:]
        previous = len(tokens)
    packs.append((tokens, pos))
    rows = []
    for tokens, pos in packs:
        row = []
        for (d, o), p in zip(tokens, pos):
            if row and row[-1][0] == d:
                row[-1] = (d, row[-1][1], row[-1][2], row[-1][3] + 1)
            else:
                row.append((d, o, p, 1))
        rows.append(row)
    return rows


LENGTHS = lognormal(1024, 3.0, 1200, seed=5)  # two map batches; 20 documents longer than 8,192


@pytest.mark.parametrize("strategy", ["trl-bfd", "trl-bfd-split", "trl-wrapped"])
@pytest.mark.parametrize("seq", [1000, 8193])
def test_trl_strategies_pack_as_the_packer_written_here(strategy, seq):
    lengths = LENGTHS if seq > 1000 else lognormal(300, 2.0, 2100, seed=6)
    bins = pack(lengths, seq, strategy, BUFFER)
    assert bins.as_rows() == trl_here(lengths.tolist(), seq, strategy)


@pytest.mark.parametrize("strategy", ["torchtune", "torchtune-split"])
@pytest.mark.parametrize("seq", [1000, 8193])
def test_torchtune_strategies_pack_as_its_loop_written_here(strategy, seq):
    lengths = LENGTHS if seq > 1000 else lognormal(300, 2.0, 2100, seed=6)
    bins = pack(lengths, seq, strategy, BUFFER)
    assert bins.as_rows() == torchtune_here(lengths.tolist(), seq, strategy == "torchtune-split")


@pytest.mark.parametrize("ours, theirs", [("trl-bfd", "bfd"), ("trl-bfd-split", "bfd_split"), ("trl-wrapped", "wrapped")])
@pytest.mark.parametrize("seq", [8192, 8193, 16385])  # 8192 n + 1: where TRL's segment tree once packed nothing
def test_trl_pack_dataset_makes_the_same_rows(ours, theirs, seq):
    pytest.importorskip("trl", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
    import pyarrow as pa
    from datasets import Dataset
    from trl import pack_dataset

    lengths = LENGTHS
    ids = np.concatenate([d * STRIDE + np.arange(n) for d, n in enumerate(lengths.tolist())])
    column = pa.ListArray.from_arrays(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32), pa.array(ids))
    packed = pack_dataset(Dataset(pa.table({"input_ids": column})), seq, strategy=theirs)  # batches of 1,000
    rows = []
    for example in packed:
        ids = example["input_ids"]
        if theirs == "wrapped":  # no seq_lengths: the collator's position_ids are 0, 1, ... through the row
            rows.append(read_row(ids, np.arange(len(ids)), runs(ids)))
        else:  # position_ids restart at each of seq_lengths
            positions = np.concatenate([np.arange(n) for n in example["seq_lengths"]])
            rows.append(read_row(ids, positions, example["seq_lengths"]))
    bins = pack(lengths, seq, ours, BUFFER)
    assert bins.as_rows() == rows
    held = sum(n for row in rows for *_, n in row)
    assert bins.dropped == int(lengths.sum()) - held  # what the rows lose, token for token
    assert (bins.dropped > 0) == (ours == "trl-bfd")


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("seq", [1000, 8193])
def test_torchtune_packed_dataset_makes_the_same_rows(split, seq):
    pytest.importorskip("torchtune.datasets", reason="torchtune 0.6.1 (the last release) imports only beside a "
                        "torchao built for an older torch than 2.13: not installed here (docs/packing.md)",
                        exc_type=ImportError)
    from torchtune.datasets import PackedDataset

    lengths = LENGTHS if seq > 1000 else lognormal(300, 2.0, 2100, seed=6)
    samples = [{"tokens": t, "labels": t} for t in documents(lengths.tolist(), None if split else seq)]
    rows = []
    for p in PackedDataset(samples, max_seq_len=seq, split_across_pack=split):
        real = int((p["labels"] != -100).sum())  # the padding's labels are ignored
        lens = p["seq_lens"].tolist()
        lens = lens[:len(lens) - 1] if sum(lens[:-1]) == real else lens  # the last is the padding's
        rows.append(read_row(p["tokens"][:real].numpy(), p["input_pos"].numpy(), lens))
    bins = pack(lengths, seq, "torchtune-split" if split else "torchtune", BUFFER)
    assert bins.as_rows() == rows
    assert bins.dropped == int(lengths.sum()) - sum(n for row in rows for *_, n in row)


HISTOGRAM = Lengths.of(lognormal(1024, 3.0, 200_000, seed=8))


@pytest.mark.parametrize("strategy", ["stream", "bfd", "ffd", "split", "pad", "trl-bfd", "trl-bfd-split",
                                      "trl-wrapped", "torchtune", "torchtune-split"])
def test_tokens_dropped_are_what_truncation_cuts_off_the_histogram(strategy):
    """Dropped tokens: sum over the histogram of count * (length - seq)+, over its tokens; 0 where nothing is cut."""
    values, counts = (np.array(a, dtype=np.float64) for a in (HISTOGRAM.values, HISTOGRAM.counts))
    cut = (counts * np.maximum(values - 8192, 0)).sum() / (counts * values).sum()
    packed = draw_packed(Packing(None, None, lengths=HISTOGRAM, strategy=strategy), 256, 8192)
    truncates = strategy in ("bfd", "ffd", "pad", "trl-bfd", "torchtune")
    assert packed.dropped == pytest.approx(cut if truncates else 0.0, rel=1e-12, abs=0)
    assert cut > 0.1  # a heavy tail: 1.7% of documents hold 13% of the tokens past a row
    assert packed.truncated == pytest.approx(float((HISTOGRAM.arrays[0] > 8192) @ HISTOGRAM.arrays[1])
                                             / HISTOGRAM.documents if truncates else 0.0, rel=0.05)


@pytest.mark.parametrize("mean, spread, seq", [(1024, 2.0, 8192), (3000, 1.0, 4096), (512, 0.5, 1024)])
def test_tokens_dropped_from_gamma_lengths_are_what_a_million_documents_lose(mean, spread, seq):
    """The gamma's closed form against a million i.i.d. gamma lengths rounded to whole tokens, cut at the row."""
    draws = np.random.default_rng(0).gamma(1 / spread**2, mean * spread**2, 1_000_000)
    every = np.maximum(np.floor(draws + 0.5), 1)
    lost = np.maximum(every - seq, 0).sum() / every.sum()
    assert draw_packed(Packing(mean, spread, strategy="trl-bfd"), 64, seq).dropped == pytest.approx(lost, rel=0.03)
    assert draw_packed(Packing(10_000, 0, strategy="pad"), 64, seq).dropped == (10_000 - seq) / 10_000


def test_positions_continue_where_torchtune_splits_across_packs():
    """torchtune-split continues a document's positions into the next pack; its mask still keeps pieces apart."""
    lengths = lognormal(1024, 3.0, 1500, seed=9)
    bins = pack(lengths, 8192, "torchtune-split", BUFFER)
    rows = torchtune_here(lengths.tolist(), 8192, split=True)
    continued = {d for row in rows for d, _, p, _ in row if p != 0}
    crossing = {d for row in rows[1:] for d, o, _, _ in row[:1] if o % 8192}
    assert bins.continued == len(continued) == len(crossing) > 0
    assert bins.split == len({d for row in rows for d, o, _, _ in row if o})  # pieces past a document's start


def test_trl_wrapped_rows_are_one_document_to_the_model():
    """No seq_lengths: attention under the document mask sees each row whole, as without one."""
    histogram = Lengths.of(lognormal(300, 2.0, 50_000, seed=3))
    op = tensorcad.OperatingPoint(seq=2048, packing=Packing(None, None, lengths=histogram, strategy="trl-wrapped"))
    packed = tensorcad.analyze("llama-3-8b-documents", op).to_json()["flops"]["packed"]
    # Full rows keep (T + 1) / 2 keys a query; each batch's last row is shorter.
    rows = [sum(n for *_, n in row) for row in trl_here(histogram.strata(8000).tolist(), 2048, "trl-wrapped")]
    brute = sum(n * (n + 1) / 2 for n in rows) / sum(rows)
    assert packed["keysPerQuery"] == pytest.approx(brute, rel=0.01)
    assert packed["packing"]["positionsContinued"] > 0.9 and packed["packing"]["tokensDropped"] == 0
