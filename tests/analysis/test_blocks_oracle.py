"""Which blocks the engine computes, held to PyTorch's ``create_block_mask`` block by block.

For document, causal, sliding and local windows, per-head windows, position windows
and a mixed (or-ed) mask, at lengths that are not whole blocks (232, 97, 130, as
attention-gym's tests use, and 256) and at FlexAttention's block sizes 64 and 128:

- ``tile_verdicts``: the *set* of full tiles and of partial tiles of every (row, head,
  query block) equals the BlockMask's ``full_kv_indices`` and ``kv_indices`` sets;
- ``count_row_blocks`` (the coarse-to-fine counter the report samples through):
  its counts equal ``full_kv_num_blocks`` and ``kv_num_blocks``.

The mask_mods are written by hand, attention-gym style, closing over the (B, T)
documents and positions; nothing here calls the engine to get an expected figure.
A tile hanging past the row's end is never full: FlexAttention pads it with masked
scores.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

from helpers import attention  # noqa: E402  (tests/analysis, on sys.path)
from tensorcad.analysis.tiles import count_row_blocks, row_tile_counts, tile_verdicts  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402

ROLES = {"doc": "documents", "pos": "positions"}
HEADS = 4


def rows(seq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two rows of ragged documents (ids that never fall) and positions restarting at each."""
    rng = np.random.default_rng(seed)
    starts = rng.random((2, seq)) < 4 / seq * rng.uniform(0.5, 3, (2, 1))
    starts[:, 0] = True
    documents = np.cumsum(starts, axis=1) - 1
    index = np.arange(seq)
    positions = index - np.maximum.accumulate(np.where(starts, index, 0), axis=1)
    return documents.astype(np.int64), positions.astype(np.int64)


# name -> (the engine's attention, the same mask as a torch mask_mod factory, reads h)
def _document(doc, pos):
    def document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx])
    return document_causal


def _causal(doc, pos):
    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    return causal


def _sliding(doc, pos):
    def sliding_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 70)
    return sliding_window


def _local(doc, pos):
    def local_window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() < 45
    return local_window


def _document_window(doc, pos):
    def document_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 40) & (doc[b, q_idx] == doc[b, kv_idx])
    return document_window


def _per_head(doc, pos):
    def per_head_windows(b, h, q_idx, kv_idx):
        reach = torch.where(h < 2, 16, 90)
        return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx - kv_idx < reach)
    return per_head_windows


def _positions(doc, pos):
    def position_window(b, h, q_idx, kv_idx):
        same = doc[b, q_idx] == doc[b, kv_idx]
        return (q_idx >= kv_idx) & same & (pos[b, q_idx] - pos[b, kv_idx] < 50)
    return position_window


def _mixed(doc, pos):
    def mixed(b, h, q_idx, kv_idx):
        return ((doc[b, q_idx] == doc[b, kv_idx]) & (kv_idx <= q_idx + 3)) | (kv_idx < 2)
    return mixed


def _banded(doc, pos):
    def banded_with_sinks(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + 3) | (kv_idx < 2)
    return banded_with_sinks


def _row_gated(doc, pos):
    def first_row_sees_everything(b, h, q_idx, kv_idx):
        return (b == 0) | (doc[b, q_idx] == doc[b, kv_idx])
    return first_row_sees_everything


def _query_gated(doc, pos):
    def document_heads_ask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (pos[b, q_idx] < 40)
    return document_heads_ask


# Distance bands that leave out 0, their edges on tile corners at block 64: a tile (i, i - 2)
# spans distances 65..191 exactly, and (i, i) keeps only its corner pair at distance 63
def _offset_band(doc, pos):
    def offset_band(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx >= 65) & (q_idx - kv_idx <= 191)
    return offset_band


def _offset_corners(doc, pos):
    def offset_corners(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx >= 63) & (q_idx - kv_idx <= 129)
    return offset_corners


def _bidirectional(doc, pos):
    def same_document(b, h, q_idx, kv_idx):
        return doc[b, q_idx] == doc[b, kv_idx]
    return same_document


# only later keys, at least 1 or 2 ahead by head: the tile just before the last key block is
# kept whole by every query but its last (2 ahead), or by all (1 ahead), unlike the next
# block's first queries
def _future(doc, pos):
    def future(b, h, q_idx, kv_idx):
        return kv_idx - q_idx >= torch.where(h < 2, 1, 2)
    return future


# keys up to 102 ahead: at T = 232 query block 128 keeps every key but the last (231)
def _near_future(doc, pos):
    def near_future_with_sinks(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + 102) | (kv_idx < 2)
    return near_future_with_sinks


# keys 104 to 200 ahead: at T = 232 query block 128 meets none in the last key block (103
# ahead at most), so a key past the row's end must not be counted in
def _ahead_band(doc, pos):
    def ahead_band(b, h, q_idx, kv_idx):
        return (kv_idx - q_idx >= 104) & (kv_idx - q_idx <= 200)
    return ahead_band


# keys up to 126 or 127 ahead, per head: at T = 256 the last key (255) is the first one not
# (or the last one) kept by query block 128, so the last key block's edge decides its tile
def _lookahead(doc, pos):
    def lookahead_with_sinks(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + torch.where(h < 2, 126, 127)) | (kv_idx < 2)
    return lookahead_with_sinks


MASKS = {
    "document": (lambda: attention("doc(b, q) == doc(b, kv)", roles=ROLES), _document),
    "causal": (lambda: attention(), _causal),
    "sliding-window": (lambda: attention(window=70), _sliding),
    "local-window": (lambda: attention(causal=False, window=45), _local),
    "document-window": (lambda: attention("doc(b, q) == doc(b, kv)", window=40, roles=ROLES),
                        _document_window),
    "per-head": (lambda: attention("(doc(b, q) == doc(b, kv)) & (q - kv < where(h < 2, 16, 90))",
                                   roles=ROLES, heads=HEADS), _per_head),
    "positions": (lambda: attention("(doc(b, q) == doc(b, kv)) & (pos(b, q) - pos(b, kv) < 50)",
                                    roles=ROLES), _positions),
    "mixed": (lambda: attention("((doc(b, q) == doc(b, kv)) & (kv <= q + 3)) | (kv < 2)",
                                causal=False, roles=ROLES), _mixed),
    # no documents, an or: decided by the interval interpreter, with many full tiles to get right
    "banded": (lambda: attention("(kv <= q + 3) | (kv < 2)", causal=False), _banded),
    # the interpreter's other inputs: the row (b), a read at the query alone, bounds off 0
    "row-gated": (lambda: attention("(b == 0) | (doc(b, q) == doc(b, kv))", causal=False,
                                    roles=ROLES), _row_gated),
    "query-gated": (lambda: attention("pos(b, q) < 40", roles=ROLES), _query_gated),
    "offset-band": (lambda: attention("(q - kv >= 65) & (q - kv <= 191)", causal=False),
                    _offset_band),
    "offset-corners": (lambda: attention("(q - kv >= 63) & (q - kv <= 129)", causal=False),
                       _offset_corners),
    "bidirectional": (lambda: attention("doc(b, q) == doc(b, kv)", causal=False, roles=ROLES),
                      _bidirectional),
    "future": (lambda: attention("kv - q >= where(h < 2, 1, 2)", causal=False, heads=HEADS),
               _future),
    "near-future": (lambda: attention("(kv <= q + 102) | (kv < 2)", causal=False), _near_future),
    "ahead-band": (lambda: attention("(kv - q >= 104) & (kv - q <= 200)", causal=False),
                   _ahead_band),
    "lookahead": (lambda: attention("(kv <= q + where(h < 2, 126, 127)) | (kv < 2)",
                                    causal=False, heads=HEADS), _lookahead),
}
PER_HEAD = {"per-head", "lookahead", "future"}
LENGTHS = [232, 97, 130, 256]
BLOCKS = [64, 128]


def block_mask(name: str, documents: np.ndarray, positions: np.ndarray, block: int, heads: int):
    doc, pos = torch.from_numpy(documents), torch.from_numpy(positions)
    seq = documents.shape[1]
    mask_mod = MASKS[name][1](doc, pos)
    return create_block_mask(mask_mod, B=len(documents), H=heads if heads > 1 else None,
                             Q_LEN=seq, KV_LEN=seq, device="cpu", BLOCK_SIZE=block)


def sets(indices: torch.Tensor, counts: torch.Tensor) -> list:
    """The BlockMask's kv blocks of every (b, h, query block), as sets."""
    rows, heads, blocks = counts.shape
    return [[[set(indices[b, h, i, : counts[b, h, i]].tolist()) for i in range(blocks)]
             for h in range(heads)] for b in range(rows)]


def engine_sets(tiles: np.ndarray) -> list:
    return [[[set(np.flatnonzero(tiles[b, h, i]).tolist()) for i in range(tiles.shape[2])]
             for h in range(tiles.shape[1])] for b in range(tiles.shape[0])]


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("seq", LENGTHS)
@pytest.mark.parametrize("name", sorted(MASKS))
def test_which_blocks_and_how_many_equal_create_block_mask(name, seq, block):
    att = MASKS[name][0]()
    documents, positions = rows(seq, seed=seq + block)
    heads = HEADS if name in PER_HEAD else 1
    mask = block_mask(name, documents, positions, block, heads)
    full, partial = tile_verdicts(att, documents, positions, block=block)
    assert full.shape[1] == heads
    assert engine_sets(full) == sets(mask.full_kv_indices, mask.full_kv_num_blocks)
    assert engine_sets(partial) == sets(mask.kv_indices, mask.kv_num_blocks)
    counted = count_row_blocks(att, documents, positions, block=block)
    assert np.array_equal(counted.full, mask.full_kv_num_blocks.numpy())
    assert np.array_equal(counted.partial, mask.kv_num_blocks.numpy())
    assert np.array_equal(counted.kept, kept_scores(name, documents, positions, heads))
    assert all(np.array_equal(mine, theirs) for mine, theirs in zip(
        row_tile_counts(att, documents, positions, block=block), (counted.full, counted.partial)))


def kept_scores(name: str, documents: np.ndarray, positions: np.ndarray, heads: int) -> np.ndarray:
    """Scores the mask_mod keeps in each row, every (head, query, key) evaluated; mean over heads."""
    mask_mod = MASKS[name][1](torch.from_numpy(documents), torch.from_numpy(positions))
    index = torch.arange(documents.shape[1])
    return np.array([sum(int(mask_mod(torch.tensor(b), torch.tensor(h), index[:, None],
                                      index[None, :]).sum()) for h in range(heads)) / heads
                     for b in range(len(documents))])


def test_the_cases_are_not_degenerate():
    # every mask has partial blocks at some length, and full ones where whole blocks fit
    for name in MASKS:
        documents, positions = rows(256, seed=256 + 64)
        mask = block_mask(name, documents, positions, 64, HEADS if name in PER_HEAD else 1)
        assert int(mask.kv_num_blocks.sum()) > 0, name
    documents, positions = rows(256, seed=256 + 64)
    assert int(block_mask("causal", documents, positions, 64, 1).full_kv_num_blocks.sum()) > 0


def with_long_last_document(documents: np.ndarray, positions: np.ndarray, share: float = 0.6):
    """The rows with the second's last ``share`` of tokens one document: runs of tiles at its
    end are kept whole, so the coarse levels decide them (random rows rarely hold such a run)."""
    documents, positions = documents.copy(), positions.copy()
    start = int(documents.shape[1] * (1 - share))
    documents[1, start:] = documents[1, start - 1] + 1
    positions[1, start:] = np.arange(documents.shape[1] - start)
    return documents, positions


# 6 to 32 blocks a row; 24, 17 and 6 are not whole runs of 16 or 4 tiles, so a row's last run
# is short (17: one tile) and its pyramid padded
@pytest.mark.parametrize("seq,block", [(2000, 64), (1000, 128), (1500, 64), (1088, 64),
                                       (700, 128)])
@pytest.mark.parametrize("name", ["mixed", "positions", "banded", "per-head", "row-gated",
                                  "query-gated", "offset-band"])
def test_long_rows_decided_coarse_to_fine_equal_create_block_mask(name, seq, block):
    # count_row_blocks decides runs of 4**k tiles first and splits only the undecided ones,
    # reading each row's pyramid of document and position ranges
    att = MASKS[name][0]()
    documents, positions = with_long_last_document(*rows(seq, seed=seq + block))
    heads = HEADS if name in PER_HEAD else 1
    mask = block_mask(name, documents, positions, block, heads)
    counted = count_row_blocks(att, documents, positions, block=block)
    full, partial = mask.full_kv_num_blocks.numpy(), mask.kv_num_blocks.numpy()
    if name == "positions":  # sound, not exact: see the test below
        assert (counted.full == full).all()
        assert (counted.full + counted.partial >= full + partial).all()
        return
    assert np.array_equal(counted.full, full)
    assert np.array_equal(counted.partial, partial)


@pytest.mark.parametrize("seq,block", [(2000, 64), (1000, 128)])
def test_position_windows_on_long_rows_are_sound_not_exact(seq, block):
    # A tile across a document boundary reads positions from 0 to the longer document's end,
    # so pos(q) - pos(kv) < 50 "may" hold there although no pair of one document is that
    # close: the engine counts such tiles partial where the BlockMask has none. It never drops
    # a tile FlexAttention computes (above), never calls one full wrongly; the gap is real.
    documents, positions = rows(seq, seed=seq + block)
    mask = block_mask("positions", documents, positions, block, 1)
    counted = count_row_blocks(MASKS["positions"][0](), documents, positions, block=block)
    assert (counted.partial > mask.kv_num_blocks.numpy()).any()


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("seq", [232, 256])
def test_positions_that_run_on_across_documents(seq, block):
    # Packers that keep one position counter for the whole row (no reset at a document's
    # start): the positions handed in, not ones restarting at each document, decide a window
    # on positions alone, which is then the sliding window and exact
    documents, _ = rows(seq, seed=seq + block)
    positions = np.tile(np.arange(seq), (len(documents), 1))
    att = attention("pos(b, q) - pos(b, kv) < 50", roles={"pos": "positions"})

    def position_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (pos[b, q_idx] - pos[b, kv_idx] < 50)

    pos = torch.from_numpy(positions)
    mask = create_block_mask(position_window, B=len(documents), H=None, Q_LEN=seq, KV_LEN=seq,
                             device="cpu", BLOCK_SIZE=block)
    full, partial = tile_verdicts(att, documents, positions, block=block)
    assert engine_sets(full) == sets(mask.full_kv_indices, mask.full_kv_num_blocks)
    assert engine_sets(partial) == sets(mask.kv_indices, mask.kv_num_blocks)
    counted = count_row_blocks(att, documents, positions, block=block)
    for full_counts, partial_counts in (row_tile_counts(att, documents, positions, block=block),
                                        (counted.full, counted.partial)):
        assert np.array_equal(full_counts, mask.full_kv_num_blocks.numpy())
        assert np.array_equal(partial_counts, mask.kv_num_blocks.numpy())


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("seq", LENGTHS)
def test_reads_at_the_query_and_at_the_key_stay_apart_at_the_row_end(seq, block):
    # keys at or after the query's own position in its document: a tile in the last key
    # block is decided from the queries' positions and the keys' own, never the other way
    # round; rows with a long last document, so such tiles are kept whole. Sound, not exact
    # (as the position window on long rows): a tile across a document boundary reads
    # positions from 0 up, so it may be partial here where the BlockMask skips it; full
    # tiles are exact
    att = attention("(doc(b, q) == doc(b, kv)) & (pos(b, kv) >= pos(b, q))", causal=False,
                    roles=ROLES)
    documents, positions = with_long_last_document(*rows(seq, seed=seq + block), share=0.9)
    doc, pos = torch.from_numpy(documents), torch.from_numpy(positions)

    def later_in_the_document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (pos[b, kv_idx] >= pos[b, q_idx])

    mask = create_block_mask(later_in_the_document, B=len(documents), H=None, Q_LEN=seq,
                             KV_LEN=seq, device="cpu", BLOCK_SIZE=block)
    counted = count_row_blocks(att, documents, positions, block=block)
    assert np.array_equal(counted.full, mask.full_kv_num_blocks.numpy())
    full, partial = mask.full_kv_num_blocks.numpy(), mask.kv_num_blocks.numpy()
    assert (counted.full + counted.partial >= full + partial).all()
    # where three whole blocks fit, some tiles are kept whole (the case is not empty)
    assert full.sum() > 0 or seq // block < 3


def test_a_row_shorter_than_a_block_is_one_partial_tile():
    # 97 tokens at 128: the one tile hangs past the row's end, so it is partial however much
    # of it the mask keeps (here all of it)
    att = MASKS["row-gated"][0]()
    documents = np.zeros((1, 97), dtype=np.int64)
    counted = count_row_blocks(att, documents, block=128)
    mask = block_mask("row-gated", documents, np.arange(97)[None, :], 128, 1)
    assert (int(mask.full_kv_num_blocks.sum()), int(mask.kv_num_blocks.sum())) == (0, 1)
    assert (int(counted.full.sum()), int(counted.partial.sum())) == (0, 1)
    assert counted.kept.tolist() == [97 * 97]


def test_a_mask_that_keeps_everything_and_blocks_of_one_score():
    # no mask and no causality (keep is None): every tile is full but the ragged ones, and a
    # block of one score is full exactly where the mask keeps it
    documents, positions = rows(97, seed=1)
    counted = count_row_blocks(attention(causal=False), documents, block=64)
    assert counted.full.tolist() == [[[1, 0]]] * 2 and counted.partial.tolist() == [[[1, 2]]] * 2
    assert counted.kept.tolist() == [97 * 97] * 2
    one = count_row_blocks(MASKS["document"][0](), documents, positions, block=1)
    assert (one.partial == 0).all() and (one.full.sum(axis=(1, 2)) == one.kept).all()
    with pytest.raises(TensorcadError) as error:
        count_row_blocks(MASKS["document"][0](), documents, positions, block=0)
    assert error.value.path == "block"
