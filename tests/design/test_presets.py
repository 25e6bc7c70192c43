"""The shipped presets, with parameter counts held against their published figures."""

import subprocess
import sys

import pytest

from tensorcad.analysis.params import count_params
from tensorcad.design import load, preset_names

PRESETS = ["gpt2-small", "gpt2-small-documents", "llama-3-70b", "llama-3-8b", "llama-3-8b-documents", "llama-3.1-405b",
           "mamba2-hybrid-documents", "mistral-7b", "mixtral-8x7b", "nano-sort", "qwen3-30b-a3b", "t5-bias",
           "deepseek-v3"]


def test_every_preset_ships():
    assert preset_names() == sorted(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads(name):
    assert load(name).name == name


def _llama(dim, layers, kv, hidden, vocab=128_256):
    # Counted by hand from the paper's shapes: embedding and head, and per layer
    # q and o (dim^2 each), k and v (dim x kv x 128 each), the SwiGLU's three
    # matrices and two RMSNorm scales; one final norm.
    per_layer = 2 * dim * dim + 2 * dim * kv * 128 + 3 * dim * hidden + 2 * dim
    return 2 * vocab * dim + layers * per_layer + dim


def test_llama_3_8b_has_exactly_its_published_count():
    assert count_params(load("llama-3-8b")).total == 8_030_261_248 == _llama(4096, 32, 8, 14336)


def test_the_documents_variant_has_the_same_params():
    assert count_params(load("llama-3-8b-documents")) == count_params(load("llama-3-8b"))


def test_the_larger_llamas_follow_the_paper_shapes():
    assert count_params(load("llama-3-70b")).total == _llama(8192, 80, 8, 28672)
    assert count_params(load("llama-3.1-405b")).total == _llama(16384, 126, 8, 53248)


def test_gpt2_small_counts_its_tied_embeddings_once():
    # Hugging Face's GPT2LMHeadModel reports 124,439,808 parameters.
    params = count_params(load("gpt2-small"))
    assert params.total == 124_439_808
    assert params.matmul - 50257 * 768 == 12 * (4 * 768 * 768 + 2 * 768 * 3072)


def test_mistral_has_its_window_and_nano_sort_is_about_a_million():
    [(attention, _)] = load("mistral-7b").attentions()
    assert attention.window == 4096
    assert 900_000 <= count_params(load("nano-sort")).total <= 1_200_000


def test_cli_lists_presets_with_their_counts():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "presets"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "8,030,261,248" in run.stdout and "124,439,808" in run.stdout


def _moe(vocab, dim, layers, heads, kv, experts, top_k, hidden, qk_norm):
    """(total, active) of a dropless MoE decoder, shape by shape: untied embedding and head, per layer
    q and o (dim x heads x 128), k and v (dim x kv x 128), q/k norms of 128, the router (dim x experts),
    every expert's three matrices (3 x dim x hidden) and two RMSNorm scales; one final norm. Active keeps
    top_k of the experts."""
    attention = 2 * dim * heads * 128 + 2 * dim * kv * 128 + (2 * 128 if qk_norm else 0)
    expert = 3 * dim * hidden
    per_layer = attention + dim * experts + experts * expert + 2 * dim
    total = 2 * vocab * dim + layers * per_layer + dim
    return total, total - layers * (experts - top_k) * expert


def test_mixtral_8x7b_has_its_published_total_and_active_params():
    # Mistral AI, "Mixtral of experts" (2024): 46.7B total, 12.9B active a token
    p = count_params(load("mixtral-8x7b"))
    assert (p.total, p.active) == _moe(32_000, 4096, 32, 32, 8, 8, 2, 14_336, False)
    assert abs(p.total / 46.7e9 - 1) < 0.01 and abs(p.active / 12.9e9 - 1) < 0.01


def test_qwen3_30b_a3b_has_its_published_total_and_active_params():
    # Qwen3-30B-A3B's model card: 30.5B total, 3.3B activated. The count from its config's shapes is 3.353B
    # active, 1.6% over 3.3B: the card's figure is cut to one decimal, not rounded (3.35 -> 3.3), so active is
    # held to 3.35B within 1% and to the card's 3.3B within 2%.
    p = count_params(load("qwen3-30b-a3b"))
    assert (p.total, p.active) == _moe(151_936, 2048, 48, 32, 4, 128, 8, 768, True)
    assert abs(p.total / 30.5e9 - 1) < 0.01
    assert abs(p.active / 3.35e9 - 1) < 0.01 and abs(p.active / 3.3e9 - 1) < 0.02


def _deepseek_v3_config():
    transformers = pytest.importorskip("transformers")
    return transformers.DeepseekV3Config(  # DeepSeek-V3's config.json, the shapes
        vocab_size=129_280, hidden_size=7168, intermediate_size=18_432, moe_intermediate_size=2048,
        num_hidden_layers=61, first_k_dense_replace=3, num_attention_heads=128, num_key_value_heads=128,
        n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8, q_lora_rank=1536, kv_lora_rank=512,
        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, tie_word_embeddings=False)


def test_deepseek_v3_has_transformers_params_and_its_published_total_and_active():
    # DeepSeek-V3's model card: 671B total, 37B activated a token. transformers' own DeepseekV3ForCausalLM,
    # built on the meta device from the config's shapes (its MTP layer is not built), has every parameter;
    # a token skips 248 of the 256 routed experts of each of the 58 MoE layers. The count is 37.55B active:
    # the card's 37B is cut to a whole billion, as Qwen3's 3.35B is cut to 3.3B.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        reference = transformers.DeepseekV3ForCausalLM(_deepseek_v3_config())
    # and the score-correction biases, which transformers keeps as buffers (the aux-loss-free update moves
    # them, no optimiser) and the checkpoint stores: the design counts them as the router's
    total = sum(p.numel() for p in reference.parameters()) + sum(
        b.numel() for n, b in reference.named_buffers() if n.endswith("e_score_correction_bias"))
    expert = sum(p.numel() for p in reference.model.layers[3].mlp.experts.parameters()) // 256
    p = count_params(load("deepseek-v3"))
    assert p.total == total
    assert p.active == total - 58 * 248 * expert
    assert abs(p.total / 671e9 - 1) < 0.01
    assert abs(p.active / 37.55e9 - 1) < 0.01 and abs(p.active / 37e9 - 1) < 0.02


def test_deepseek_v3s_multi_token_prediction_is_counted_apart_and_named():
    # The card: 685B in the checkpoint, 671B of the main model and 14B of the MTP module. The module is one
    # MoE block like the last, the 2 x 7168 -> 7168 projection of [norm(h); norm(emb)] and three norms; it
    # shares the embedding and the head, which the checkpoint stores again (2 x 129,280 x 7168).
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tensorcad.analysis.params import mtp_params

    with torch.device("meta"):
        reference = transformers.DeepseekV3ForCausalLM(_deepseek_v3_config())
    layer = reference.model.layers[60]
    block = sum(p.numel() for p in layer.parameters()) + layer.mlp.gate.e_score_correction_bias.numel()
    mtp = mtp_params(load("deepseek-v3"), 1)
    assert mtp.total == block + 2 * 7168 * 7168 + 3 * 7168
    assert mtp.embedding == 0
    stored = mtp.total + 2 * 129_280 * 7168
    assert abs((count_params(load("deepseek-v3")).total + stored) / 685e9 - 1) < 0.01
    assert load("deepseek-v3").mtp == 1 and "multi-token prediction module (depth 1)" in load("deepseek-v3").source[
        "description"]
