"""Empirical length distributions through the analysis: against the gamma path, brute force and closed forms."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import tensorcad
from tensorcad.packing import closed_form as cf
from tensorcad.packing.corpus.histogram import Lengths, write_histogram
from tensorcad.packing import Packing

DOCS = "llama-3-8b-documents"


def lognormal(mean: float, spread: float, count: int, seed: int) -> np.ndarray:
    sigma2 = np.log1p(spread**2)
    draws = np.random.default_rng(seed).lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)
    return np.maximum(np.round(draws), 1).astype(np.int64)


def packed(packing: Packing, seq: int = 8192, **op) -> dict:
    return tensorcad.analyze(DOCS, tensorcad.OperatingPoint(seq=seq, packing=packing, **op)).to_json()


def brute_force_stream(lengths: np.ndarray, seq: int) -> float:
    """Documents end to end, cut into back-to-back rows: every token's keys counted.

    A piece between two breakpoints (a document's end or a row's) of n tokens
    keeps n(n + 1)/2 scores under a document-causal mask.
    """
    ends = np.cumsum(lengths)
    total = int(ends[-1]) // seq * seq  # whole rows only
    breaks = np.union1d(ends[ends < total], np.arange(seq, total + 1, seq))
    pieces = np.diff(np.concatenate(([0], breaks))).astype(np.float64)
    return float((pieces * (pieces + 1) / 2).sum() / pieces.sum())


def test_a_gamma_corpus_read_as_a_histogram_agrees_with_mean_and_spread():
    """Lengths drawn i.i.d. from a gamma: the histogram path and the two-number path agree."""
    mean, spread = 1024.0, 1.0
    draws = np.random.default_rng(5).gamma(1 / spread**2, mean * spread**2, 200_000)
    histogram = Lengths.of(np.maximum(np.round(draws), 1).astype(np.int64))
    by_table = packed(Packing(None, None, lengths=histogram))["flops"]["packed"]
    by_numbers = packed(Packing(mean, spread))["flops"]["packed"]
    # The corpus's own mean and spread differ from the gamma's by its draw (0.2%, 0.3%);
    # the sampler's error is well under 1%.
    assert histogram.mean == pytest.approx(mean, rel=0.01) and histogram.spread == pytest.approx(spread, rel=0.01)
    assert by_table["keysPerQuery"] == pytest.approx(by_numbers["keysPerQuery"], rel=0.01)
    assert by_table["fwdAttentionBlocks"] == pytest.approx(by_numbers["fwdAttentionBlocks"], rel=0.01)
    # Each against its own closed form, edge-corrected.
    assert by_table["keysPerQuery"] == pytest.approx(cf.empirical_edge_corrected(8192, histogram), rel=0.005)
    assert by_numbers["keysPerQuery"] == pytest.approx(cf.edge_corrected(8192, mean, spread), rel=0.005)


@pytest.mark.parametrize("seq", [8192, 32768])
def test_heavy_tailed_lengths_within_two_percent_of_a_brute_force_stream(seq):
    """Log-normal, c = 3: the sampler against 200,000 documents cut into rows, every token counted."""
    documents = lognormal(1024, 3.0, 200_000, seed=21)
    histogram = Lengths.of(documents)
    assert histogram.spread == pytest.approx(3.0, rel=0.15)  # a draw of a c = 3 log-normal
    report = packed(Packing(None, None, lengths=histogram), seq)["flops"]["packed"]
    keys = report["keysPerQuery"]
    stream = np.random.default_rng(22).permutation(documents)
    brute = brute_force_stream(stream, seq)
    assert keys == pytest.approx(brute, rel=0.02)
    # Documents a row's edge falls inside, counted on the same stream.
    ends = np.cumsum(stream)
    starts = ends - stream
    crossed = (starts // seq) != ((ends - 1) // seq)
    assert report["packing"]["split"] == pytest.approx(crossed.mean(), rel=0.03)
    assert keys == pytest.approx(cf.empirical_edge_corrected(seq, histogram), rel=0.01)


def test_the_empirical_closed_forms_equal_the_gamma_ones_on_the_gammas_own_table():
    """Fixed lengths: the empirical forms reduce to the exact fixed-length ones."""
    fixed = Lengths((1024,), (7,))
    assert cf.empirical_edge_corrected(8192, fixed) == pytest.approx(cf.fixed_phase_average(8192, 1024), rel=1e-12)
    assert cf.empirical_size_biased(fixed) == pytest.approx(cf.size_biased(1024, 0), rel=1e-12)
    assert cf.truncated_keys(512, fixed) == cf.boundary_keys([512]) == 513 / 2
    assert cf.split_keys(512, fixed) == 513 / 2


def test_the_report_echoes_what_was_read(tmp_path):
    histogram = Lengths.of(lognormal(1024, 3.0, 50_000, seed=3))
    report = packed(Packing(None, None, lengths=histogram, strategy="bfd"))
    assert report["operatingPoint"]["packing"] == {
        "mean": histogram.mean, "spread": histogram.spread, "strategy": "bfd", "buffer": 1000,
        "lengths": {"documents": 50_000, "mean": histogram.mean, "spread": histogram.spread,
                    "p50": int(np.quantile(lognormal(1024, 3.0, 50_000, seed=3), 0.5, method="inverted_cdf")),
                    "p90": int(np.quantile(lognormal(1024, 3.0, 50_000, seed=3), 0.9, method="inverted_cdf")),
                    "p99": int(np.quantile(lognormal(1024, 3.0, 50_000, seed=3), 0.99, method="inverted_cdf")),
                    "max": int(lognormal(1024, 3.0, 50_000, seed=3).max())}}
    write_histogram(histogram, tmp_path / "h.json")
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", DOCS, "--seq", "8192",
                          "--pack-lengths", str(tmp_path / "h.json"), "--pack-strategy", "bfd", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["operatingPoint"]["packing"] == report["operatingPoint"]["packing"]


@pytest.mark.parametrize("strategy", ["stream", "bfd", "pad"])
def test_count_blocks_moves_training_by_exactly_the_block_ratio_of_the_attention_term(strategy):
    packing = Packing(1024, 3.0, strategy=strategy)
    kept, blocks = packed(packing), packed(packing, count="blocks")
    assert blocks["operatingPoint"]["count"] == "blocks" and blocks["training"]["count"] == "blocks"
    assert "count" not in kept["training"]
    flops = kept["flops"]["packed"]
    attention = flops["trainPerToken"] / 3 - (flops["fwdPerToken"] - flops["fwdAttention"])
    matmul_seconds = kept["training"]["seconds"] * (1 - 3 * attention / flops["trainPerToken"])
    # Time is linear in FLOPs a token: the attention term's share of it is scaled by the ratio.
    for key in ("seconds", "gpuHours", "cost"):
        share = kept["training"][key] * 3 * attention / flops["trainPerToken"]
        rest = kept["training"][key] - share
        assert blocks["training"][key] == pytest.approx(rest + share * flops["blockRatio"], rel=1e-12)
    assert matmul_seconds > 0
    # And the block ratio is the blocks over the kept attention, as the report prints it.
    assert flops["blockRatio"] == pytest.approx(flops["fwdAttentionBlocks"] / flops["fwdAttention"], rel=1e-12)


@pytest.mark.parametrize("strategy", ["bfd", "pad"])
def test_a_windowed_document_mask_over_padded_rows_matches_its_exact_form(strategy):
    """The sampler's real-token weighting, on a mask that is not the control: a window inside documents.

    Rows begin on a boundary, so a piece of n tokens keeps sum_{p<n} min(p + 1, W) scores;
    over the table's documents truncated to a row, E[that] / E[n], independent of the sampler.
    """
    window, seq = 1024, 8192
    histogram = Lengths.of(lognormal(1024, 3.0, 200_000, seed=8))
    design = json.loads(json.dumps(tensorcad.load(DOCS).source, default=dict))
    design["nodes"][1]["params"]["block"]["params"]["attention"]["window"] = window
    op = tensorcad.OperatingPoint(seq=seq, packing=Packing(None, None, lengths=histogram, strategy=strategy))
    keys = tensorcad.analyze(design, op).to_json()["flops"]["packed"]["keysPerQuery"]
    v, c = (a.astype(np.float64) for a in histogram.arrays)
    n = np.minimum(v, seq)
    w = np.minimum(n, window)
    kept = w * (w + 1) / 2 + (n - w) * window
    assert keys == pytest.approx(float((c * kept).sum() / (c * n).sum()), rel=0.01)
