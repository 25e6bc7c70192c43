"""Tiny random configs of every supported family, built from transformers' own config classes."""

from __future__ import annotations

# No tokenizer ids: transformers warns (or, for Phi-3's pad id, refuses) when they lie outside a tiny vocabulary.
_NO_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
_LLAMA_SHAPES = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
WINDOW = 8  # Mistral's, Qwen2's and Phi-3's window, smaller than every document of the packed row
WINDOWED = ("mistral", "qwen2", "phi3", "gemma2", "gemma3_text", "starcoder2", "mixtral")


def tiny_config(transformers, family: str):
    t = transformers
    if family == "llama":
        return t.LlamaConfig(**_LLAMA_SHAPES, **_NO_TOKENS, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    if family == "llama-biased":  # every bias Llama can have, and a tied head
        return t.LlamaConfig(**_LLAMA_SHAPES, **_NO_TOKENS, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)
    if family == "mistral":
        return t.MistralConfig(**_LLAMA_SHAPES, **_NO_TOKENS, sliding_window=WINDOW)
    if family == "qwen2":  # every layer sliding (layer_types), the one pattern a stack can say
        return t.Qwen2Config(**_LLAMA_SHAPES, **_NO_TOKENS, use_sliding_window=True, sliding_window=WINDOW,
                             max_window_layers=0)
    if family == "qwen3":  # a head_dim other than hidden / heads, and a tied head
        return t.Qwen3Config(**{**_LLAMA_SHAPES, "head_dim": 32}, **_NO_TOKENS, tie_word_embeddings=True)
    if family == "phi3":
        return t.Phi3Config(**_LLAMA_SHAPES, **_NO_TOKENS, sliding_window=WINDOW)
    if family == "gemma2":
        return tiny_gemma2(t)
    if family == "gpt2":
        return t.GPT2Config(vocab_size=97, n_embd=64, n_layer=2, n_head=4, n_positions=128, **_NO_TOKENS)
    if family == "llama-3.1":  # Llama 3.1's rope scaling, its original context cut to 16 so that it acts in a row
        return t.LlamaConfig(**_LLAMA_SHAPES, **_NO_TOKENS, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    if family == "gemma3_text":  # two local layers then a global one, the last cycle cut short; a base each, scaled
        return t.Gemma3TextConfig(
            vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=128, sliding_window=WINDOW,
            query_pre_attn_scalar=24, layer_types=["sliding_attention"] * 2 + ["full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
            **_NO_TOKENS)
    if family == "olmo2":
        return t.Olmo2Config(**_LLAMA_SHAPES, **_NO_TOKENS)
    if family == "granite":
        return t.GraniteConfig(**_LLAMA_SHAPES, **_NO_TOKENS, embedding_multiplier=4.0, residual_multiplier=0.5,
                               attention_multiplier=0.25, logits_scaling=0.5)
    if family == "starcoder2":
        return t.Starcoder2Config(**_LLAMA_SHAPES, **_NO_TOKENS, sliding_window=WINDOW)
    if family == "smollm3":  # every second layer without rope
        return t.SmolLM3Config(**{**_LLAMA_SHAPES, "num_hidden_layers": 4}, **_NO_TOKENS, no_rope_layer_interval=2)
    if family == "cohere":
        return t.CohereConfig(**_LLAMA_SHAPES, **_NO_TOKENS, logit_scale=0.25)
    if family == "stablelm":  # a quarter of each head rotated, q/k/v biased
        return t.StableLmConfig(**_LLAMA_SHAPES, **_NO_TOKENS, partial_rotary_factor=0.25, use_qkv_bias=True)
    _experts = dict(num_experts_per_tok=2, output_router_logits=False)
    if family == "qwen3_moe":  # top-2 of 4 normalised, q/k normed per head
        return t.Qwen3MoeConfig(**_LLAMA_SHAPES, **_NO_TOKENS, **_experts, num_experts=4, moe_intermediate_size=32,
                                norm_topk_prob=True)
    if family == "qwen2_moe":  # a gated shared expert beside the routed ones, top-k not normalised
        return t.Qwen2MoeConfig(**_LLAMA_SHAPES, **_NO_TOKENS, **_experts, num_experts=4, moe_intermediate_size=32,
                                shared_expert_intermediate_size=48)
    if family == "mixtral":  # and a window
        return t.MixtralConfig(**_LLAMA_SHAPES, **_NO_TOKENS, **_experts, num_local_experts=4, sliding_window=WINDOW)
    if family == "olmoe":  # q/k normed over the whole projection
        return t.OlmoeConfig(**_LLAMA_SHAPES, **_NO_TOKENS, **_experts, num_experts=4)
    raise AssertionError(family)


# The families import-hf reads since issue 34, and Llama 3.1's rope scaling.
NEW_FAMILIES = ("llama-3.1", "gemma3_text", "olmo2", "granite", "starcoder2", "smollm3", "cohere", "stablelm",
                # and the mixtures of experts (issue 44)
                "qwen3_moe", "qwen2_moe", "mixtral", "olmoe")
FAMILIES = ("llama", "llama-biased", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gpt2") + NEW_FAMILIES
CONFIG_CLASSES = {"llama": "LlamaConfig", "llama-biased": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
                  "qwen3": "Qwen3Config", "phi3": "Phi3Config", "gemma2": "Gemma2Config", "gpt2": "GPT2Config",
                  "llama-3.1": "LlamaConfig", "gemma3_text": "Gemma3TextConfig", "olmo2": "Olmo2Config",
                  "granite": "GraniteConfig", "starcoder2": "Starcoder2Config", "smollm3": "SmolLM3Config",
                  "cohere": "CohereConfig", "stablelm": "StableLmConfig", "qwen3_moe": "Qwen3MoeConfig",
                  "qwen2_moe": "Qwen2MoeConfig", "mixtral": "MixtralConfig", "olmoe": "OlmoeConfig"}


def tiny_gemma2(transformers, layers=4):
    """Gemma 2 with its local and global layers in turn, soft caps, and a window of WINDOW."""
    return transformers.Gemma2Config(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, sliding_window=WINDOW,
        query_pre_attn_scalar=24, **_NO_TOKENS)


# The hybrids: layers that carry state (Mamba-2's scan, LFM2's short convolution) beside attention.
HYBRID_FAMILIES = ("mamba2", "bamba", "lfm2")
HYBRID_CONFIG_CLASSES = {"mamba2": "Mamba2Config", "bamba": "BambaConfig", "lfm2": "Lfm2Config"}
HYBRID_CHUNK = 8  # the scans' chunk, shorter than the packed documents
HYBRID_KERNEL = 4  # the convolutions' taps


def tiny_hybrid(transformers, family: str):
    t = transformers
    if family == "mamba2":
        return t.Mamba2Config(vocab_size=97, hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=2,
                              num_hidden_layers=2, chunk_size=HYBRID_CHUNK, conv_kernel=HYBRID_KERNEL, **_NO_TOKENS)
    if family == "bamba":  # attention in the middle layer, rotating half of each head
        return t.BambaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=4,
                             mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=HYBRID_KERNEL,
                             mamba_chunk_size=HYBRID_CHUNK, max_position_embeddings=128, **_NO_TOKENS)
    if family == "lfm2":
        return t.Lfm2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, layer_types=["conv", "full_attention", "conv"],
                            conv_L_cache=HYBRID_KERNEL, max_position_embeddings=128, **_NO_TOKENS)
    raise AssertionError(family)
