"""`replica` for every family `import-hf` knows, and the certificates' verdicts equal on it and on a larger model.

The large configs are transformers' own config classes at a production shape
(24 layers, hidden 1024, 16 query heads over 4 key/value heads, 4096-token
windows); only the configs are built, never their weights. What the replica
keeps is read back from transformers' own objects.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from guard_setups import (
    all_ones_mask,
    block_diagonal_mask,
    labels_across,
    straight_positions,
    tiny_model,
)
from hf_families import HYBRID_FAMILIES
from hf_setups import collated

from tensorcad.guard import check_batch, replica
from tensorcad.hf import SUPPORTED

# Layers the replica keeps where 2 would drop a kind of layer: Bamba's first attention is layer 9, LFM2's layer 2,
# Gemma 3's first global layer 5, SmolLM3's first layer without rope 3 (every fourth).
LAYERS = {"bamba": 11, "lfm2": 3, "gemma3_text": 6, "smollm3": 4}
LARGE = dict(vocab_size=1000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
             num_key_value_heads=4, max_position_embeddings=8192, attn_implementation="sdpa")


def large_config(family: str):
    t = transformers
    if family == "gpt2":
        return t.GPT2Config(vocab_size=1000, n_embd=1024, n_layer=24, n_head=16, n_positions=1024,
                            attn_implementation="sdpa")
    if family == "gemma2":
        return t.Gemma2Config(**{**LARGE, "attn_implementation": "eager"}, head_dim=64, sliding_window=4096)
    if family == "mamba2":
        return t.Mamba2Config(vocab_size=1000, hidden_size=1024, num_heads=32, head_dim=64, state_size=128, n_groups=8,
                              num_hidden_layers=24)
    if family == "bamba":
        return t.BambaConfig(**{**LARGE, "num_hidden_layers": 32}, attn_layer_indices=[9, 18, 27], mamba_n_heads=32,
                             mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128)
    if family == "lfm2":
        types = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv", "full_attention",
                 "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"]
        return t.Lfm2Config(**{**LARGE, "num_hidden_layers": 16}, layer_types=types)
    if family == "gemma3_text":  # five local layers, then one global, each kind its own rope base
        return t.Gemma3TextConfig(**LARGE, head_dim=64, sliding_window=4096)
    classes = {"llama": t.LlamaConfig, "mistral": t.MistralConfig, "qwen2": t.Qwen2Config, "qwen3": t.Qwen3Config,
               "phi3": t.Phi3Config, "olmo2": t.Olmo2Config, "granite": t.GraniteConfig,
               "starcoder2": t.Starcoder2Config, "smollm3": t.SmolLM3Config, "cohere": t.CohereConfig,
               "stablelm": t.StableLmConfig, "qwen3_moe": t.Qwen3MoeConfig, "qwen2_moe": t.Qwen2MoeConfig,
               "mixtral": t.MixtralConfig, "olmoe": t.OlmoeConfig}
    experts = dict(num_experts_per_tok=2, moe_intermediate_size=512)
    extra = {"mistral": dict(sliding_window=4096), "qwen3": dict(head_dim=128, tie_word_embeddings=True),
             "phi3": dict(sliding_window=2047, pad_token_id=0),
             "smollm3": dict(pad_token_id=0, bos_token_id=1, eos_token_id=2),  # within the 1,000 ids
             "qwen3_moe": dict(num_experts=8, **experts), "olmoe": dict(num_experts=8, num_experts_per_tok=2),
             "qwen2_moe": dict(num_experts=8, shared_expert_intermediate_size=1024, **experts),
             "mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
             "llama": dict(rope_parameters={
                 "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})}
    return classes[family](**LARGE, **extra.get(family, {}))


@pytest.mark.parametrize("family", SUPPORTED)
def test_the_replica_keeps_the_architecture_and_code_path(family):
    config = large_config(family)
    small = replica(config)
    c = small.config
    assert type(c) is type(config) and c.model_type == config.model_type == family
    if config._attn_implementation is not None:  # Mamba-2 has no attention to choose an implementation for
        assert c._attn_implementation == config._attn_implementation
    assert c.num_hidden_layers == LAYERS.get(family, 2) and c.hidden_size == 64
    if getattr(config, "num_attention_heads", None):
        heads, kv = c.num_attention_heads, getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        assert heads // kv == (config.num_attention_heads // (getattr(config, "num_key_value_heads", None)
                                                              or config.num_attention_heads))
    types = getattr(config, "layer_types", None)
    if types:
        assert list(c.layer_types) == list(types[:c.num_hidden_layers])
        assert set(c.layer_types) == set(types)  # every kind of layer the model has, the replica has
    if family == "bamba":
        assert c.attn_layer_indices == [9]  # the first attention layer, and a mixer after it
    if family == "smollm3":  # a cycle of its own, one entry a layer: layers with rope and one without
        assert c.no_rope_layers == [1, 1, 1, 0] == config.no_rope_layers[:4]
    small(input_ids=torch.randint(0, 1000, (1, 24)), use_cache=False)  # it runs
    if getattr(config, "sliding_window", None):
        assert c.sliding_window == 16
    assert c.tie_word_embeddings == config.tie_word_embeddings
    for key in ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"):
        assert getattr(c, key, None) == getattr(config, key, None), key
    if getattr(config, "head_dim", None) and getattr(config, "num_attention_heads", None):
        assert c.head_dim * c.num_attention_heads == 64
    for heads, dim, expand in (("num_heads", "head_dim", "expand"), ("mamba_n_heads", "mamba_d_head", "mamba_expand")):
        if heads in config.to_dict():  # a state-space mixer's heads span its expanded width
            assert getattr(c, heads) * getattr(c, dim) == getattr(c, expand) * 64
    assert sum(p.numel() for p in small.parameters()) < 1_000_000  # certifies in seconds on CPU (Bamba's 11 layers: 0.85M)


def test_a_cycle_of_layer_types_is_kept_whole():
    config = transformers.Gemma2Config(**{**LARGE, "attn_implementation": "eager"}, head_dim=64,
                                       layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 4)
    small = replica(config)
    assert small.config.num_hidden_layers == 6 and small.config.layer_types[-1] == "full_attention"


def _causal_only(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)


FAULTS = {"clean": ("llama", "sdpa", None), "all-ones attention_mask": ("llama", "sdpa", all_ones_mask),
          "positions that do not restart": ("llama", "sdpa", straight_positions),
          "4D mask losing the window": ("mistral", "sdpa", block_diagonal_mask),
          "labels across boundaries": ("llama", "sdpa", labels_across),
          "an implementation ignoring position_ids": ("llama", "tensorcad_test_causal_only", None)}


# Every other family import-hf knows with attention (the hybrids' own packing is docs/hybrid.md's), under the
# faults that apply to any of them; -m slow but for one family, which found SmolLM3's replica of 4 layers
# raising (its no_rope_layers list was not resized with the layers).
PLANTS = {"clean": None, "all-ones attention_mask": all_ones_mask,
          "positions that do not restart": straight_positions, "labels across boundaries": labels_across}
FAMILIES = [pytest.param(family, fault, marks=() if family == "smollm3" else pytest.mark.slow)
            for family in SUPPORTED if family not in ("llama", *HYBRID_FAMILIES) for fault in PLANTS]


@pytest.mark.parametrize("family, fault", FAMILIES)
def test_every_familys_replica_and_a_larger_one_say_the_same(family, fault):
    _same_verdicts(family, "eager" if family == "gemma2" else "sdpa", PLANTS[fault], fault == "clean")


@pytest.mark.parametrize("fault", FAULTS)
def test_the_certificates_say_the_same_on_the_replica_and_on_a_larger_model(fault):
    family, implementation, plant = FAULTS[fault]
    _same_verdicts(family, implementation, plant, fault == "clean")


def _same_verdicts(family, implementation, plant, clean):
    transformers.AttentionInterface.register("tensorcad_test_causal_only", _causal_only)
    ids, documents, positions, batch = collated()
    batch = dict(batch, labels=batch["labels"] if "labels" in batch else torch.where(
        torch.cat([torch.ones(1, 1, dtype=torch.bool), documents[:, 1:] != documents[:, :-1]], 1), -100, ids))
    batch = plant(batch) if plant else batch
    model = tiny_model(family, implementation)
    verdicts = {}
    for name, size in (("replica", dict(layers=2, hidden=64)), ("larger", dict(layers=4, hidden=256))):
        report = check_batch(model, batch, certify_on=replica(model, **size))
        verdicts[name] = {n: r.passed for n, r in report.certificates.items()}
    assert verdicts["replica"] == verdicts["larger"]
    assert all(verdicts["replica"].values()) == clean
