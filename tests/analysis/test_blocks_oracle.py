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
from tensorcad.analysis.tiles import count_row_blocks, tile_verdicts  # noqa: E402

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
}
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
    reads_h = name == "per-head"
    mask = block_mask(name, documents, positions, block, HEADS if reads_h else 1)
    full, partial = tile_verdicts(att, documents, positions, block=block)
    assert full.shape[1] == (HEADS if reads_h else 1)
    assert engine_sets(full) == sets(mask.full_kv_indices, mask.full_kv_num_blocks)
    assert engine_sets(partial) == sets(mask.kv_indices, mask.kv_num_blocks)
    counted = count_row_blocks(att, documents, positions, block=block)
    assert np.array_equal(counted.full, mask.full_kv_num_blocks.numpy())
    assert np.array_equal(counted.partial, mask.kv_num_blocks.numpy())


def test_the_cases_are_not_degenerate():
    # every mask has partial blocks at some length, and full ones where whole blocks fit
    for name in MASKS:
        documents, positions = rows(256, seed=256 + 64)
        mask = block_mask(name, documents, positions, 64, HEADS if name == "per-head" else 1)
        assert int(mask.kv_num_blocks.sum()) > 0, name
    documents, positions = rows(256, seed=256 + 64)
    assert int(block_mask("causal", documents, positions, 64, 1).full_kv_num_blocks.sum()) > 0


@pytest.mark.parametrize("seq,block", [(2000, 64), (1000, 128)])
@pytest.mark.parametrize("name", ["mixed", "positions", "banded", "per-head"])
def test_long_rows_decided_coarse_to_fine_equal_create_block_mask(name, seq, block):
    # 16-32 blocks a row: count_row_blocks decides runs of 4**k tiles first and splits only
    # the undecided ones, reading each row's pyramid of document and position ranges
    att = MASKS[name][0]()
    documents, positions = rows(seq, seed=seq + block)
    heads = HEADS if name == "per-head" else 1
    mask = block_mask(name, documents, positions, block, heads)
    counted = count_row_blocks(att, documents, positions, block=block)
    full, partial = mask.full_kv_num_blocks.numpy(), mask.kv_num_blocks.numpy()
    if name == "positions":
        # Sound, not exact: a tile across a document boundary reads positions from 0 to the
        # longer document's end, so pos(q) - pos(kv) < 50 "may" hold there although no pair of
        # one document is that close; the engine counts such tiles partial where the BlockMask
        # has none. It never drops a tile FlexAttention computes, never calls one full wrongly.
        assert (counted.full == full).all()
        assert (counted.full + counted.partial >= full + partial).all()
        assert (counted.partial > partial).any()  # the gap is real: see the comment
        return
    assert np.array_equal(counted.full, full)
    assert np.array_equal(counted.partial, partial)
