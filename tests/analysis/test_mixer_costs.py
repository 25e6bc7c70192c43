"""The analysis of stateful mixers: parameters counted by hand, FLOPs that the document length
does not move (unlike attention's), each block's FLOPs, the state a stream keeps, and the whole
generated model's FLOPs held to FlopCounterMode."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.analysis.params import count_params

HYBRID = "mamba2-hybrid-documents"
D, VOCAB, HIDDEN, LAYERS = 4096, 128256, 14336, 48
H, P, N, G, K = 128, 64, 128, 8, 4  # the scan: heads, head dim, state, groups, kernel


def test_the_hybrid_preset_counted_by_hand():
    inner, channels = H * P, H * P + 2 * G * N
    mamba = (D * (inner + channels + H) + inner * D  # in_proj (z, x B C, dt) and out_proj
             + channels * K + channels  # the convolution's taps and bias
             + 3 * H + inner  # dt_bias, A_log, D; the gated norm
             + 3 * D * HIDDEN + 2 * D)  # the SwiGLU and two norms
    attention = D * 128 * (2 * 32 + 2 * 8) + 3 * D * HIDDEN + 2 * D
    total = 42 * mamba + 6 * attention + 2 * VOCAB * D + D
    assert count_params(tensorcad.load(HYBRID)).total == total


def _report(mean=None):
    packing = tensorcad.Packing(mean=mean, spread=0) if mean is not None else None
    return tensorcad.analyze(HYBRID, tensorcad.OperatingPoint(seq=8192, packing=packing)).to_json()


def test_the_document_length_moves_attention_and_no_mixer():
    alone = _report()
    layers = {layer["block"]: layer for layer in alone["layers"]}
    assert (layers["mamba"]["layers"], layers["attention"]["layers"]) == (42, 6)
    assert not layers["mamba"]["movesWithDocumentLength"] and layers["attention"]["movesWithDocumentLength"]
    for mean in (64, 1024, 8192):
        packed = {layer["block"]: layer for layer in _report(mean)["layers"]}
        # the stream packs without padding: a mixer's FLOPs a token are its FLOPs alone, at any length
        assert packed["mamba"]["packedFwdPerToken"] == layers["mamba"]["fwdPerToken"]
        assert _report(mean)["flops"]["packed"]["fwdMixing"] == alone["flops"]["fwdMixing"]
        if mean < 8192:
            assert packed["attention"]["packedFwdPerToken"] < layers["attention"]["fwdPerToken"]


def test_the_forward_is_its_weights_its_attention_and_its_mixing():
    report = _report()
    f, p = report["flops"], report["params"]
    assert f["fwdPerToken"] == pytest.approx(2 * p["matmul"] + f["fwdAttention"] + f["fwdMixing"])
    layers = {layer["block"]: layer for layer in report["layers"]}
    embed_and_head = 2 * VOCAB * D  # the head's matmul (the embedding looks up)
    blocks = 42 * layers["mamba"]["fwdPerToken"] + 6 * layers["attention"]["fwdPerToken"]
    assert blocks + embed_and_head == pytest.approx(f["fwdPerToken"])


def test_a_stream_keeps_a_cache_for_attention_and_a_fixed_state_for_the_scans():
    stream = tensorcad.analyze(HYBRID).to_json()["serving"]["perStream"]
    bf16 = 2
    assert stream["kvCacheBytes"] == 6 * 2 * 8192 * 8 * 128 * bf16
    assert stream["stateBytes"] == 42 * (H * P * N + (K - 1) * (H * P + 2 * G * N)) * bf16
    longer = tensorcad.analyze(HYBRID, tensorcad.OperatingPoint(seq=4096)).to_json()["serving"]["perStream"]
    assert longer["stateBytes"] == stream["stateBytes"] and longer["kvCacheBytes"] == stream["kvCacheBytes"] / 2


def test_a_decoded_token_steps_each_scan_once_whatever_the_context():
    # the weights once, the last query's 8,192 keys in each attention layer, and in each scan
    # layer the taps over the carried inputs and one step of each head's state: write k vᵀ, read Sᵀ q
    report = tensorcad.analyze(HYBRID).to_json()
    attention = 6 * 4 * 8192 * 128 * 32
    step = 42 * (2 * K * (H * P + 2 * G * N) + H * 2 * 2 * N * P)
    assert report["serving"]["perStream"]["decodeFlopsPerToken"] == 2 * report["params"]["matmul"] + attention + step


def test_designs_without_mixers_report_as_before():
    report = tensorcad.analyze("llama-3-8b").to_json()
    assert "layers" not in report and "fwdMixing" not in report["flops"]
    assert "stateBytes" not in report["serving"]["perStream"]


def test_the_generated_model_counts_what_the_analysis_says():
    torch = pytest.importorskip("torch")
    from tensorcad.runtime import build, scale
    from tensorcad.runtime.building.profile import profile

    design = scale(tensorcad.load(HYBRID), 400_000)
    model = build(design, form="eager")
    assert sum(p.numel() for p in model.parameters()) == count_params(design).total
    ids = torch.randint(0, 100, (2, 72))
    documents = torch.tensor([[0] * 30 + [1] * 42, [0] * 72])
    p = profile(model, design, {"ids": ids, "documents": documents})
    assert p.mixing > 0 and p.matmul == p.expected_matmul
    assert p.attention == p.dense_attention + p.mixing and p.other == 0 and p.passed
