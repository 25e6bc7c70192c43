"""Context parallelism against closed forms and the engine's own tile decisions.

Closed forms (derived in docs/context-parallel.md): a causal row of T tokens
without documents, split contiguously over N ranks of s = T/N tokens, keeps
s((2N-1)s + 1)/2 scores on the last rank against a mean of s(Ns + 1)/2, so
max/mean = ((2N-1)s + 1)/(Ns + 1) -> (2N-1)/N; in blocks the same with
s = T/(N x 128). Head-tail gives every rank k(2Nk + 1) (k = T/2N), exactly 1.
PyTorch's balancers are the other reference: test_context_parallel_torch.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorcad
from tensorcad.analysis.context_parallel.ranks import (ContextParallel, ptrr_ranks, query_block_counts,
                                                 query_block_kept, rank_work)
from tensorcad.analysis.report import analyze
from tensorcad.analysis.rows import Rows, packed_rows
from tensorcad.analysis.tiles import _kept_per_row, count_row_blocks
from tensorcad.cli import main
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, draw
from tensorcad.rules import check

DESIGN = tensorcad.load("llama-3-8b-documents")
LLAMA = DESIGN.attentions()[0][0]


def _cp(seq, size, shard, packing=None):
    return analyze(DESIGN, tensorcad.OperatingPoint(seq=seq, packing=packing, cp=ContextParallel(size, shard))).cp


@pytest.mark.parametrize("seq,size", [(8192, 2), (16384, 8), (131072, 16)])
def test_contiguous_causal_row_closed_form(seq, size):
    cp = _cp(seq, size, "contiguous")
    s = seq / size
    assert cp.kept_max_over_mean == pytest.approx(((2 * size - 1) * s + 1) / (size * s + 1), rel=1e-12)
    b = s / 128
    assert cp.max_over_mean == pytest.approx(((2 * size - 1) * b + 1) / (size * b + 1), rel=1e-12)
    # Each rank's kept scores, from the first token of its share to the last.
    for r, kept in enumerate(cp.kept):
        assert kept == pytest.approx(s * (2 * r * s + s + 1) / 2, rel=1e-12)


def test_contiguous_tends_to_two_minus_one_over_n():
    # The finite-T term ((2N-1)s + 1)/(Ns + 1) - (2N-1)/N = (1 - (2N-1)/N)/(Ns + 1) vanishes as 1/T.
    work = rank_work(LLAMA, Rows.single_documents(1, 1 << 24), ContextParallel(4, "contiguous"), 128)
    assert work.kept.max() / work.kept.mean() == pytest.approx(7 / 4, abs=1e-6)
    assert work.blocks.max() / work.blocks.mean() == pytest.approx(7 / 4, abs=1e-4)


@pytest.mark.parametrize("seq,size", [(8192, 2), (131072, 16)])
def test_headtail_balances_a_causal_row_exactly(seq, size):
    cp = _cp(seq, size, "headtail")
    k = seq / (2 * size)
    assert cp.kept == pytest.approx([k * (2 * size * k + 1)] * size, rel=1e-12)
    assert cp.kept_max_over_mean == pytest.approx(1.0, rel=1e-12)
    assert cp.max_over_mean == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("mean,spread,seed", [(256, 1.0, 0), (700, 0.0, 1), (300, 2.0, 2)])
def test_per_query_block_closed_form_equals_the_tiles(mean, spread, seed):
    documents, _ = draw(8, 4096, mean, spread, seed)
    rows = Rows.from_arrays(documents)
    tiles = count_row_blocks(LLAMA, documents)
    assert (query_block_counts(LLAMA, rows, 128) == (tiles.full + tiles.partial)[:, 0]).all()
    kept = query_block_kept(LLAMA, rows, 128)
    assert kept.sum(axis=1).tolist() == tiles.kept.tolist()


def _attention_with(**attention):
    """llama-3-8b-documents' attention with some params replaced."""
    nodes = []
    for n in DESIGN.source["nodes"]:
        if n["id"] == "layers":
            block = n["params"]["block"]
            params = {**block["params"], "attention": {**block["params"]["attention"], **attention}}
            n = {**n, "params": {**n["params"], "block": {**block, "params": params}}}
        nodes.append(n)
    return tensorcad.load({**DESIGN.source, "nodes": nodes}).attentions()[0][0]


@pytest.mark.parametrize("window", [100, 512, 1000])
def test_windowed_closed_form_equals_the_tiles_and_brute_force(window):
    windowed = _attention_with(window=window)
    documents, _ = draw(4, 2048, 400, 1.0, 3)
    rows = Rows.from_arrays(documents)
    tiles = count_row_blocks(windowed, documents)  # kept: every score evaluated (a window is not countable there)
    assert (query_block_counts(windowed, rows, 128) == (tiles.full + tiles.partial)[:, 0]).all()
    assert query_block_kept(windowed, rows, 128).sum(axis=1).tolist() == tiles.kept.tolist()


def test_other_masks_go_through_the_interval_interpreter():
    # Not causal, with a window: |q - kv| < W within documents, decided by tiles._decide.
    both_ways = _attention_with(causal=False, window=300)
    documents, _ = draw(3, 1024, 300, 1.0, 4)
    rows = Rows.from_arrays(documents)
    tiles = count_row_blocks(both_ways, documents)
    assert (query_block_counts(both_ways, rows, 128) == (tiles.full + tiles.partial)[:, 0]).all()
    assert query_block_kept(both_ways, rows, 128) is None
    work = rank_work(both_ways, rows, ContextParallel(4, "ptrr"), 128)
    assert work.kept is None and (work.blocks.sum(axis=1) == (tiles.full + tiles.partial)[:, 0].sum(axis=1)).all()


def test_ranks_sum_to_the_row_for_whole_block_shardings():
    rows = packed_rows(16384, Packing(1024, 1.0), 0, 64)
    whole = query_block_counts(LLAMA, rows, 128).sum(axis=1)
    kept = _kept_per_row(LLAMA.keep, {"doc": "documents"}, rows)
    for shard in ("contiguous", "headtail", "ptrr"):
        work = rank_work(LLAMA, rows, ContextParallel(8, shard), 128)
        assert (work.blocks.sum(axis=1) == whole).all()
        assert work.kept.sum(axis=1) == pytest.approx(kept, rel=1e-12)


def test_per_document_keeps_every_kept_score():
    # Reordering moves queries between ranks but keeps the scores kept; padding keeps none.
    rows = packed_rows(16384, Packing(1024, 1.0), 0, 32)
    kept = _kept_per_row(LLAMA.keep, {"doc": "documents"}, rows)
    work = rank_work(LLAMA, rows, ContextParallel(8, "per-document"), 128)
    assert work.kept.sum(axis=1) == pytest.approx(kept, rel=1e-12)
    assert (work.tokens % (8 * 128) == 0).all() and (work.tokens > 16384).all()
    # Each document takes 0..15 tokens to a multiple of 16; the row's own rounding is the rest.
    lengths, piece_row = rows.piece_lengths()
    expected = np.bincount(piece_row, weights=-lengths % 16, minlength=rows.count)
    assert work.document_padding.tolist() == expected.tolist()
    assert (work.tokens - 16384 - work.document_padding < 8 * 128).all()


def test_ptrr_deals_in_a_snake():
    counts = np.array([[9, 14, 2, 20, 10, 15, 8, 14, 16, 19, 15, 3, 12, 1, 12, 10]])
    ranks = ptrr_ranks(counts, 4)[0]
    groups = [sorted(np.flatnonzero(ranks == r).tolist()) for r in range(4)]
    # PyTorch's ptrr_scheduling docstring lists these four groups.
    assert sorted(groups) == sorted([[3, 12, 13, 14], [2, 4, 7, 9], [1, 8, 11, 15], [0, 5, 6, 10]])


def test_kv_gathered_and_training_from_the_slowest_rank():
    op = tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0), cp=ContextParallel(8, "contiguous"))
    report = analyze(DESIGN, op)
    cp = report.cp
    # Llama-3-8B: 8 KV heads of 128, bf16: K and V of the other 7/8 of the row.
    assert cp.kv_gather_bytes_per_layer == 2 * 7 / 8 * 32768 * 8 * 128 * 2
    packed = report.packed
    matmul = packed.fwd_per_token - packed.fwd_attention
    assert cp.train_per_token == pytest.approx(3 * (matmul + packed.fwd_attention * cp.slowest_over_balanced))
    plain = analyze(DESIGN, tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0)))
    assert report.training_seconds / plain.training_seconds == pytest.approx(
        cp.train_per_token / packed.train_per_token)
    section = report.to_json()["contextParallel"]
    assert [r["rank"] for r in section["ranks"]] == list(range(8))
    assert section["maxOverMean"] == cp.max_over_mean and section["shard"] == "contiguous"


@pytest.mark.parametrize("kwargs,path,text", [
    ({"seq": 1000, "cp": (3, "contiguous")}, "cp.size", "3 ranks do not divide the row of 1,000 tokens"),
    ({"seq": 8192, "cp": (64, "headtail")}, "cp.size", "chunks of 64 tokens are not whole 128-token blocks"),
    ({"seq": 8192, "cp": (128, "ptrr")}, "cp.size", "each rank's 64 tokens are not whole"),
])
def test_rows_that_do_not_split(kwargs, path, text):
    with pytest.raises(TensorcadError) as e:
        tensorcad.OperatingPoint(seq=kwargs["seq"], cp=ContextParallel(*kwargs["cp"]))
    assert e.value.path == path and text in e.value.message


@pytest.mark.parametrize("seq,cp,fit", [
    # 8,192 tokens in 2n head-tail chunks of whole 128-token blocks: 2n in 2..64.
    (8192, (64, "headtail"), "; headtail splits 8,192 tokens over 2, 4, 8, 16, 32 ranks"),
    # n ranks of whole 128-token blocks: 8,192 / n in {128, 256, ..., 4,096} (64 blocks, n a power of 2).
    (8192, (128, "ptrr"), "; ptrr splits 8,192 tokens over 2, 4, 8, 16, 32, 64 ranks"),
    (1000, (3, "contiguous"), "; no rank count splits 1,000 tokens contiguous into whole 128-token blocks"),
])
def test_a_refused_size_names_the_sizes_that_fit(seq, cp, fit):
    with pytest.raises(TensorcadError) as e:
        tensorcad.OperatingPoint(seq=seq, cp=ContextParallel(*cp))
    assert e.value.message.endswith(fit)


def test_unknown_sharding_and_per_document_without_packing():
    with pytest.raises(TensorcadError, match="unknown sharding 'zigzag'"):
        ContextParallel(4, "zigzag")
    with pytest.raises(TensorcadError, match="per-document sharding splits each document, but packing is off"):
        _cp(8192, 4, "per-document")


@pytest.mark.parametrize("argv,line", [
    (["--cp", "64"], "tensorcad: --cp: head-tail chunks of 64 tokens are not whole 128-token blocks"),
    (["--cp", "4", "--cp-shard", "zigzag"], "tensorcad: --cp-shard: unknown sharding 'zigzag'"),
    (["--cp-shard", "ptrr"], "tensorcad: --cp-shard: needs --cp (the number of ranks)"),
    (["--cp", "4", "--cp-shard", "per-document"], "tensorcad: cp.shard: per-document sharding splits each document"),
])
def test_cli_bad_cp_is_one_line(argv, line, capsys):
    assert main(["analyze", "llama-3-8b-documents", "--seq", "8192", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_cli_json_has_the_section(capsys):
    assert main(["analyze", "llama-3-8b-documents", "--seq", "8192", "--pack", "1024",
                 "--cp", "4", "--cp-shard", "ptrr", "--json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    assert report["operatingPoint"]["cp"] == {"size": 4, "shard": "ptrr"}
    assert set(report["contextParallel"]) >= {"ranks", "maxOverMean", "paddingTokens", "kvGatherBytesPerLayer",
                                              "trainPerToken"}


def test_rule_names_the_better_sharding():
    op = tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0), cp=ContextParallel(8, "contiguous"))
    found = [d for d in check(DESIGN, op) if d.rule == "cp-imbalance"]
    assert len(found) == 1 and found[0].severity == "warn"
    contiguous = analyze(DESIGN, op).cp
    ptrr = analyze(DESIGN, tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0),
                                                    cp=ContextParallel(8, "ptrr"))).cp
    # Before: "ptrr would give 1.01 and 1.01x less training compute a token".
    assert found[0].message.endswith(
        f"; ptrr sharding would bring the slowest rank to {ptrr.max_over_mean:.2f}x the mean and cut the training "
        f"compute a token by {1 - ptrr.train_per_token / contiguous.train_per_token:.1%}")
    balanced = tensorcad.OperatingPoint(seq=32768, packing=Packing(4096, 1.0), cp=ContextParallel(8, "ptrr"))
    assert not [d for d in check(DESIGN, balanced) if d.rule == "cp-imbalance"]


def test_the_samplers_error_is_the_spread_over_seeds():
    # The reported standard error (delta method over rows) against the spread of
    # max/mean over independent draws of the same size.
    from tensorcad.analysis.context_parallel.report import _ratio_of_means

    figures, errors = [], []
    for seed in range(16):
        work = rank_work(LLAMA, packed_rows(4096, Packing(400, 1.0), seed, 256), ContextParallel(4, "contiguous"), 128)
        ratio, error = _ratio_of_means(work.blocks.max(axis=1).astype(float), work.blocks.mean(axis=1))
        figures.append(ratio)
        errors.append(error)
    spread = float(np.std(figures, ddof=1))
    assert 0.6 < spread / float(np.mean(errors)) < 1.6, (spread, np.mean(errors))


@pytest.mark.parametrize("shard", ["contiguous", "headtail", "ptrr"])
def test_whole_block_shardings_lose_nothing_to_padding(shard):
    cp = _cp(16384, 8, shard, Packing(1024, 1.0))
    assert cp.padding_tokens == 0 and cp.document_padding_tokens == 0
    # The ranks' blocks sum to the row's own, so N x the slowest over the row is max/mean.
    assert cp.slowest_over_balanced == pytest.approx(cp.max_over_mean, rel=1e-12)


def test_rule_warns_when_the_ranks_together_compute_more_than_the_row():
    # Per-document chunks of 1,024-token documents over 8 ranks are 64 tokens: they cut blocks.
    op = tensorcad.OperatingPoint(seq=16384, packing=Packing(1024, 1.0), cp=ContextParallel(8, "per-document"))
    cp = analyze(DESIGN, op).cp
    assert cp.max_over_mean < 1.10 < cp.slowest_over_balanced / cp.max_over_mean
    # Two cp-imbalance notes here: PyTorch's per-document balancer refusing these documents, and this one.
    found = [d for d in check(DESIGN, op) if d.rule == "cp-imbalance" and "the ranks together compute" in d.message]
    assert len(found) == 1 and "ptrr sharding would bring the slowest rank to" in found[0].message
