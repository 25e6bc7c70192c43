"""Whole-block counts held to the proposal's tables, the exact phase average and dense evaluation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import scaled  # tests/: the profile's example counts

from tensorcad.packing import closed_form as cf
from tensorcad.analysis.blocks import block_counts
from tensorcad.analysis.tiles import count_row_blocks, tile_verdicts
from tensorcad.design import load
from tensorcad.design.expr import Env, evaluate
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, draw, positions_of

from helpers import attention  # tests/analysis, on sys.path (rootdir import mode)

LLAMA = load("llama-3-8b-documents").attentions()[0][0]


@pytest.mark.parametrize("length,kept,computed", [(1024, 524_800, 589_824), (256, 32_896, 49_152)])
def test_aligned_documents_table(length, kept, computed):
    documents = np.repeat(np.arange(8192 // length), length)
    counted = count_row_blocks(LLAMA, documents)
    per_document = 8192 // length
    assert counted.kept[0] == kept * per_document
    tiles = int(counted.full.sum() + counted.partial.sum())
    assert tiles * 128 * 128 == computed * per_document
    assert (kept, computed) == cf.aligned_document_blocks(length)


@pytest.mark.parametrize("length,table", [(2048, 1.19), (1024, 1.37), (512, 1.74), (256, 2.48),
                                          (128, 3.94)])
def test_stream_table(length, table):
    counted = block_counts(LLAMA, 8192, Packing(length, 0))
    exact = cf.fixed_phase_block_ratio(8192, length)
    # sampled tiles (no error reported by block_counts): measured within 0.16% of the exact
    # phase average over this table (largest at L = 128), so 0.2%
    assert counted.ratio == pytest.approx(exact, rel=2e-3)
    assert round(exact, 2) == pytest.approx(table, abs=0.01)


def test_long_rows_sample_query_blocks():
    # 131,072 tokens: 64 of 1,024 query blocks a row, stratified.
    counted = block_counts(LLAMA, 131072, Packing(1024, 0))
    kept, computed = cf.fixed_phase_blocks(131072, 1024)
    assert counted.kept == pytest.approx(kept, rel=0.001)
    assert counted.computed == pytest.approx(computed, rel=0.005)


def test_causal_and_window_blocks():
    causal = block_counts(load("llama-3-8b").attentions()[0][0], 8192, None)
    assert (causal.kept, causal.computed) == cf.causal_blocks(8192)
    mistral = block_counts(load("mistral-7b").attentions()[0][0], 32768, None, query_blocks=256)
    kept, computed = cf.window_blocks(32768, 4096)
    assert mistral.computed == computed
    assert mistral.kept == pytest.approx(kept)


def test_counts_and_tiles_equal_create_block_mask_on_drawn_rows():
    # Rows the packing draws (gamma lengths), two masks, held to FlexAttention's own
    # BlockMask tile by tile: test_blocks_oracle.py does the same over hand-made rows.
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    documents, positions = draw(6, 1024, 150, 1.0, seed=1)
    doc, pos = torch.from_numpy(documents), torch.from_numpy(positions)

    def document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx])

    def early_positions(b, h, q_idx, kv_idx):
        return document_causal(b, h, q_idx, kv_idx) & (pos[b, kv_idx] < 40 + 16 * h)

    early = attention("(doc(b, q) == doc(b, kv)) & (pos(b, kv) < 40 + 16 * h)",
                      roles={"doc": "documents", "pos": "positions"})
    for att, mask_mod, heads in ((LLAMA, document_causal, None), (early, early_positions, 4)):
        mask = create_block_mask(mask_mod, B=6, H=heads, Q_LEN=1024, KV_LEN=1024, device="cpu")
        counted = count_row_blocks(att, documents, positions)
        assert np.array_equal(counted.full, mask.full_kv_num_blocks.numpy())
        assert np.array_equal(counted.partial, mask.kv_num_blocks.numpy())
        full, partial = tile_verdicts(att, documents, positions)
        for tiles, indices, counts in ((full, mask.full_kv_indices, mask.full_kv_num_blocks),
                                       (partial, mask.kv_indices, mask.kv_num_blocks)):
            for b, h, i in np.ndindex(*counts.shape):
                assert set(np.flatnonzero(tiles[b, h, i])) == set(indices[b, h, i, : counts[b, h, i]].tolist())


def test_kept_is_counted_exactly():
    documents, positions = draw(4, 2048, 300, 1.0, seed=0)
    counted = count_row_blocks(LLAMA, documents)
    q, kv = np.arange(2048)[:, None], np.arange(2048)[None, :]
    dense = [int(((documents[r][:, None] == documents[r][None, :]) & (q >= kv)).sum())
             for r in range(4)]
    assert counted.kept.tolist() == dense


def test_rows_must_hold_documents_in_order():
    with pytest.raises(TensorcadError, match="documents"):
        count_row_blocks(LLAMA, np.array([[0, 1, 0, 1]]))
    with pytest.raises(TensorcadError, match="block"):
        block_counts(LLAMA, 1024, None, block=0)


# -- the property: intervals never miss a kept score and are never wrong about "full" ----

T, BLOCK, HEADS = 48, 8, 2

terms = st.sampled_from(["q", "kv", "h", "doc(b, q)", "doc(b, kv)", "pos(b, q)", "pos(b, kv)",
                         "b"])
constants = st.integers(-6, 40).map(str)


@st.composite
def numbers(draw_):
    left = draw_(st.one_of(terms, constants))
    if draw_(st.booleans()):
        op = draw_(st.sampled_from(["+", "-", "*", "//", "%"]))
        right = draw_(st.one_of(terms, st.integers(1, 9).map(str)))
        return f"({left} {op} {right})"
    return left


@st.composite
def masks(draw_, depth=2):
    if depth == 0 or draw_(st.integers(0, 2)) == 0:
        op = draw_(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        return f"({draw_(numbers())} {op} {draw_(numbers())})"
    op = draw_(st.sampled_from(["&", "|", "~"]))
    if op == "~":
        return f"~{draw_(masks(depth - 1))}"
    return f"({draw_(masks(depth - 1))} {op} {draw_(masks(depth - 1))})"


@st.composite
def rows(draw_):
    """Two rows of document ids that never fall, from random document lengths."""
    out = []
    for _ in range(2):
        lengths = draw_(st.lists(st.integers(1, 30), min_size=1, max_size=20))
        documents = np.repeat(np.arange(len(lengths)), lengths)
        tail = documents[-1] + 1 if len(documents) else 0
        out.append(np.concatenate([documents, np.full(T, tail)])[:T])
    return np.stack(out)


@settings(max_examples=scaled(250), suppress_health_check=[HealthCheck.too_slow])
@given(mask=masks(), causal=st.booleans(), documents=rows())
def test_intervals_never_miss_a_kept_score(mask, causal, documents):
    att = attention(mask, causal=causal, heads=HEADS, roles={"doc": "documents", "pos": "positions"})
    positions = positions_of(documents)
    full, partial = tile_verdicts(att, documents, positions, block=BLOCK)
    q = np.arange(T)[:, None]
    kv = np.arange(T)[None, :]
    blocks = T // BLOCK
    for b in range(2):
        for h in range(full.shape[1]):
            kept = np.broadcast_to(evaluate(att.keep, Env(
                b=b, h=h, q=q, kv=kv, tensors={"doc": documents, "pos": positions})), (T, T))
            tiles = kept.reshape(blocks, BLOCK, blocks, BLOCK)
            any_kept = tiles.any(axis=(1, 3))
            all_kept = tiles.all(axis=(1, 3))
            assert not (any_kept & ~(full[b, h] | partial[b, h])).any(), "a kept score was skipped"
            assert not (full[b, h] & ~all_kept).any(), "a tile called full drops a score"
            # the coarse-to-fine counter is sound against the points too (not only against tile_verdicts)
            counted = count_row_blocks(att, documents, positions, block=BLOCK)
            assert counted.full[b, h].sum() <= all_kept.sum()
            assert (counted.full + counted.partial)[b, h].sum() >= any_kept.sum()


# -- the rows' own noise and one document a row ------------------------------------------


@pytest.mark.parametrize("spread", [0.5, 1.0, 2.0])
def test_gamma_blocks_take_out_the_rows_noise(spread):
    # Scores kept are the exact mean over every window of the stream: the
    # edge-corrected form to the strata's rounding. The tiles computed are
    # estimated with that control, so draws of different seeds agree far more
    # closely than the rows' own 1.2% noise.
    counted = [block_counts(LLAMA, 8192, Packing(1024, spread), seed=seed) for seed in (0, 1, 2)]
    exact = cf.edge_corrected(8192, 1024, spread) * 8192
    for count in counted:
        assert count.kept == pytest.approx(exact, rel=0.005)
        assert count.computed == pytest.approx(counted[0].computed, rel=0.005)


def test_one_document_a_row_is_decided_once_a_head():
    att = attention("q - kv < 128 * (h + 1)")  # four heads, each a causal window of its own
    counted = block_counts(att, 2048, None)
    # head h is a sliding window of 128 (h + 1): its closed form, and its full tiles counted
    # from every point of the dense mask
    computed = [cf.window_blocks(2048, 128 * (h + 1), 128)[1] for h in range(4)]
    assert counted.computed == np.mean(computed)
    q, kv = np.arange(2048)[:, None], np.arange(2048)[None, :]
    full = [(((q >= kv) & (q - kv < 128 * (h + 1))).reshape(16, 128, 16, 128).all(axis=(1, 3))).sum()
            for h in range(4)]
    assert counted.full == np.mean(full)


def test_counts_are_cached():
    first = block_counts(LLAMA, 4096, Packing(512, 1.0), seed=3)
    assert block_counts(LLAMA, 4096, Packing(512, 1.0), seed=3) is first
