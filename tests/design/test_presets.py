"""The shipped presets, with parameter counts held against their published figures."""

import subprocess
import sys

import pytest

from tensorcad.analysis.params import count_params
from tensorcad.design import load, preset_names

PRESETS = ["gpt2-small", "gpt2-small-documents", "llama-3-70b", "llama-3-8b", "llama-3-8b-documents", "llama-3.1-405b",
           "mamba2-hybrid-documents", "mistral-7b", "nano-sort", "t5-bias"]


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
