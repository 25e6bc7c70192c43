"""The report's figures, pinned against closed forms and published formulas."""

import json
import subprocess
import sys

import pytest

from tensorcad.packing import closed_form
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.analysis.report import analyze
from tensorcad.design import load
from tensorcad.packing import Packing

LLAMA_MATMUL = 7_504_658_432  # 8,030,261,248 less the embedding table and the 65 RMSNorm scales


def _attention(keys, layers=32, head_dim=128, heads=32):
    return layers * 4 * keys * head_dim * heads


@pytest.fixture(scope="module")
def llama():
    return analyze(load("llama-3-8b"), OperatingPoint(seq=8192)).to_json()


def test_llama_params(llama):
    assert llama["params"] == {"total": 8_030_261_248, "embedding": 525_336_576, "matmul": LLAMA_MATMUL}


def test_llama_keys_per_query_is_the_causal_closed_form(llama):
    # counted exactly where a closed form exists (the sampler is held to it in test_attention)
    assert llama["flops"]["keysPerQuery"] == closed_form.causal(8192) == 4096.5


def test_llama_attention_and_share(llama):
    expected = _attention(4096.5)
    assert expected == pytest.approx(2.147e9, rel=1e-3)
    assert llama["flops"]["fwdAttention"] == pytest.approx(expected, rel=1e-12)
    forward = 2 * LLAMA_MATMUL + expected
    assert llama["flops"]["fwdPerToken"] == pytest.approx(forward, rel=1e-12)
    assert llama["flops"]["attentionShare"] == pytest.approx(expected / forward, rel=1e-12)
    assert llama["flops"]["attentionShare"] == pytest.approx(0.125, abs=0.001)
    assert llama["flops"]["trainPerToken"] == pytest.approx(3 * llama["flops"]["fwdPerToken"])


def megatron_flops_per_token(layers, hidden, heads, groups, kv_channels, ffn, vocab, seq, swiglu=True):
    """Megatron-LM's `num_floating_point_operations` (megatron/training/training.py) divided by
    batch x seq: 12 L h^2 [ (1 + g/n + s/(2h)) (kv_channels n / h) + (ffn/h)(3/2 if swiglu) + V/(2 L h) ].
    The causal version halves the s/h term: it counts T/2 keys a query where tensorcad counts (T+1)/2."""
    ratio = kv_channels * heads / hidden
    gated = 1.5 if swiglu else 1.0
    return 12 * layers * hidden * hidden * (
        (1 + groups / heads + seq / hidden / 2) * ratio
        + (ffn / hidden) * gated
        + vocab / (2 * layers * hidden)
    )


def test_training_flops_agree_with_megatron(llama):
    megatron = megatron_flops_per_token(32, 4096, 32, 8, 128, 14336, 128256, 8192)
    assert megatron == pytest.approx(51.47e9, rel=1e-3)
    assert llama["flops"]["trainPerToken"] == pytest.approx(megatron, rel=0.001)


def test_mistral_window_matches_its_closed_form():
    report = analyze(load("mistral-7b"), OperatingPoint(seq=32768)).to_json()
    assert report["flops"]["keysPerQuery"] == pytest.approx(closed_form.window(32768, 4096), rel=1e-9)


def test_training_time_and_cost_follow_from_the_training_figure(llama):
    op = OperatingPoint(seq=8192)
    tokens = 20 * 8_030_261_248
    seconds = tokens * llama["flops"]["trainPerToken"] / (op.gpus * 989.5e12 * op.mfu)
    t = llama["training"]
    assert t["tokens"] == tokens
    assert t["seconds"] == pytest.approx(seconds)
    assert t["gpuHours"] == pytest.approx(seconds * op.gpus / 3600)
    assert t["cost"] == pytest.approx(t["gpuHours"] * op.price_per_gpu_hour)


def test_serving_is_one_document_with_a_cache(llama):
    s = llama["serving"]
    assert s["fwdPerToken"] == llama["flops"]["fwdPerToken"]
    # 2 (k and v) x 8,192 positions x 8 kv heads x 128 x 32 layers x 2 bytes (bf16)
    assert s["perStream"]["kvCacheBytes"] == 2 * 8192 * 8 * 128 * 32 * 2
    # The last query keeps all 8,192 keys.
    assert s["perStream"]["decodeFlopsPerToken"] == 2 * LLAMA_MATMUL + _attention(8192)


def test_a_window_caches_only_its_window():
    s = analyze(load("mistral-7b"), OperatingPoint(seq=32768)).to_json()["serving"]["perStream"]
    assert s["kvCacheBytes"] == 2 * 4096 * 8 * 128 * 32 * 2


def test_packing_gives_the_phase_averaged_keys_and_lowers_training():
    op = OperatingPoint(seq=8192, packing=Packing(1024, 0))
    report = analyze(load("llama-3-8b-documents"), op).to_json()
    packed = report["flops"]["packed"]
    exact = closed_form.fixed_phase_average(8192, 1024)
    assert exact == pytest.approx(491.1667, abs=1e-4)
    assert packed["keysPerQuery"] == pytest.approx(exact, rel=1e-6)  # the issue asks 0.1%
    unpacked_train = 3 * (2 * LLAMA_MATMUL + _attention(4096.5))
    packed_train = 3 * (2 * LLAMA_MATMUL + _attention(exact))
    assert packed["trainPerToken"] == pytest.approx(packed_train, rel=1e-9)
    fall = 1 - packed["trainPerToken"] / report["flops"]["trainPerToken"]
    assert fall == pytest.approx(1 - packed_train / unpacked_train, abs=1e-4)
    assert 0.10 < fall < 0.12  # the proposal's "about 11%"
    # Training is counted from the packed figure; serving stays one document a sequence.
    assert report["training"]["seconds"] == pytest.approx(
        report["training"]["tokens"] * packed["trainPerToken"] / (op.gpus * 989.5e12 * op.mfu))
    assert report["serving"]["fwdPerToken"] == report["flops"]["fwdPerToken"]


def test_packing_a_design_without_a_document_mask_changes_nothing():
    plain = analyze(load("llama-3-8b"), OperatingPoint(seq=8192)).to_json()
    packed = analyze(load("llama-3-8b"), OperatingPoint(seq=8192, packing=Packing(1024))).to_json()
    assert "packed" not in packed["flops"]
    plain.pop("operatingPoint"), packed.pop("operatingPoint")
    assert plain == packed


def test_the_same_seed_gives_the_same_figures():
    op = OperatingPoint(seq=4096, packing=Packing(300, 1.0))
    a = analyze(load("llama-3-8b-documents"), op).to_json()
    b = analyze(load("llama-3-8b-documents"), op).to_json()
    assert a == b


def test_cli_json_carries_the_report_names():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "llama-3-8b-documents", "--seq", "8192",
                          "--pack", "1024", "--pack-spread", "0", "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["params"]["total"] == 8_030_261_248
    assert set(report["flops"]["packed"]) >= {"fwdPerToken", "trainPerToken", "fwdAttention", "keysPerQuery",
                                              "attentionShare", "fwdAttentionBlocks", "blockRatio"}
    assert report["operatingPoint"]["packing"] == {"mean": 1024.0, "spread": 0.0, "strategy": "stream"}


def test_cli_pack_without_spread_defaults_to_one():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "nano-sort", "--pack", "64", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["operatingPoint"]["packing"] == {"mean": 64.0, "spread": 1.0, "strategy": "stream"}


def test_cli_writes_the_report_with_out(tmp_path):
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "gpt2-small", "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["params"]["total"] == 124_439_808


def test_cli_prints_a_readable_table():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "llama-3-8b"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert "8,030,261,248" in run.stdout and "4,096.5 keys a query" in run.stdout
