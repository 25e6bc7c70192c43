"""Tiny random models of the families the docs did not name (issue 42's matrix): MoE, hybrid and attention.

Each is ``AutoModelForCausalLM.from_config`` of its own config class, shrunk to 2-3 layers of width 64 over a
vocabulary of 128 (float32, CPU), seeded; the sizes each family needs besides are in ``_EXTRA``.
"""

from __future__ import annotations

VOCAB = 128
_BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
             pad_token_id=None, attention_dropout=0.0, residual_dropout=0.0)
_MOE = dict(num_experts=4, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_routed_experts=4,
            shared_expert_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=0, n_group=1, topk_group=1)
_MAMBA2 = dict(mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_chunk_size=8)
WINDOW = 8  # the sliding windows and chunks below: shorter than most packed documents
_EXTRA = {
    "deepseek_v3": dict(num_key_value_heads=4, head_dim=8, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
                        qk_nope_head_dim=8, v_head_dim=16),
    "gpt_oss": dict(sliding_window=WINDOW, attn_implementation="eager"),  # no sdpa path in transformers
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                  mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, use_mamba_kernels=False),
    "falcon_h1": dict(mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8,
                      mamba_chunk_size=8),
    "zamba2": dict(mamba_d_state=8, mamba_ngroups=1, mamba_headdim=16, n_mamba_heads=8, chunk_size=8,
                   layers_block_type=["mamba", "hybrid"], num_mem_blocks=1, attention_head_dim=16),
    "bamba": dict(attn_layer_indices=[1], **_MAMBA2),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"], shared_intermediate_size=32, **_MAMBA2),
    "nemotron_h": dict(layers_block_type=["mamba", "attention", "moe"], num_hidden_layers=3, mamba_num_heads=8,
                       mamba_head_dim=16, n_groups=1, ssm_state_size=8, chunk_size=8,
                       moe_shared_expert_intermediate_size=32),
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
                       linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                       linear_conv_kernel_dim=4),
    "kimi_linear": dict(num_key_value_heads=4, linear_attn_config={
        "kda_layers": [1], "full_attn_layers": [2], "num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4},
        kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, mla_use_nope=True),
    "llama4_text": dict(intermediate_size_mlp=64, interleave_moe_layer_step=1, attention_chunk_size=WINDOW,
                        no_rope_layers=[1, 0]),
    "gemma3n_text": dict(layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
                         sliding_window=WINDOW, activation_sparsity_pattern=[0.0, 0.0],
                         hidden_size_per_layer_input=16, vocab_size_per_layer_input=VOCAB, laurel_rank=8,
                         altup_num_inputs=2),
    "cohere2": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
    "ministral": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
    "exaone4": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
}
MOE = ("qwen3_moe", "mixtral", "olmoe", "qwen2_moe", "deepseek_v3", "granitemoe", "gpt_oss")
HYBRID = ("jamba", "falcon_h1", "zamba2", "bamba", "lfm2", "qwen3_next", "granitemoehybrid", "nemotron_h",
          "kimi_linear")
ATTENTION = ("llama4_text", "cohere2", "exaone4", "olmo3", "ministral", "gemma3n_text", "seed_oss", "apertus")
# the families whose attention keeps a window or chunk: a 4D block-diagonal mask drops it
WINDOWED = ("gpt_oss", "llama4_text", "cohere2", "exaone4", "ministral", "gemma3n_text")


def tiny(transformers, family: str, use_cache: bool = True, **more):
    """A seeded tiny random ``family`` model in eval mode, its config's ``use_cache`` as given."""
    import torch

    settings = {**_BASE, **_MOE, **_EXTRA.get(family, {}), **more}
    implementation = settings.pop("attn_implementation", "sdpa")
    config = transformers.AutoConfig.for_model(family, **settings)
    config._attn_implementation = implementation
    config.use_cache = use_cache
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()
