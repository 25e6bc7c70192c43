"""The Hugging Face setups people train with, as tiny random models on CPU (float32), reusable by any test.

Each setup is a model, a batch packed by ``DataCollatorWithFlattening`` itself
from a feature list, and a ``model_fn(ids, documents, positions)`` calling the
model the way that setup does. ``alone_gaps`` runs each document by itself,
the reference every expected verdict is established from.

```python
from hf_setups import tiny_model, collated, alone_gaps   # tests/hf is on sys.path under pytest
model = tiny_model("mistral", "sdpa")
ids, documents, positions, batch = collated(LENGTHS)
```
"""

from __future__ import annotations

import numpy as np
import torch
import transformers

from tensorcad.packing import documents_of_seq_idx

VOCAB = 128
# One packed row of 160 tokens: documents short and long, the longest (40) past Mistral's window of 16.
LENGTHS = (9, 40, 3, 27, 1, 33, 14, 33)
WINDOW = 16
FAMILIES = ("llama", "mistral", "qwen2", "gpt2", "bert")
MORE_FAMILIES = ("qwen3", "gemma2", "phi3")  # the other decoders, under -m slow
# The decoders import-hf reads since issue 34, and a Llama whose dynamic rope scaling reaches
# past its 32 positions inside the row (its longest document is 40): unfaithful by construction.
NEW_FAMILIES = ("gemma3_text", "olmo2", "granite", "starcoder2", "smollm3", "cohere", "stablelm")
DYNAMIC = "llama-dynamic"
IMPLEMENTATIONS = ("eager", "sdpa")
_NO_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)


def tiny_config(family: str, implementation: str) -> transformers.PretrainedConfig:
    """A 2-layer, hidden-32/64 config of ``family``; Mistral's window (16) is smaller than its documents."""
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, attn_implementation=implementation)
    if family == "gpt2":
        return transformers.GPT2Config(n_embd=32, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=1, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0, **{k: v for k, v in common.items() if k != "num_hidden_layers"},
                                       n_layer=2)
    if family == "bert":
        return transformers.BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                       max_position_embeddings=256, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, **common)
    decoder = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=256, **common)
    if family == "llama":
        return transformers.LlamaConfig(**decoder)
    if family == "mistral":
        return transformers.MistralConfig(sliding_window=WINDOW, **decoder)
    if family == "qwen2":
        return transformers.Qwen2Config(**decoder)
    if family == "qwen3":
        return transformers.Qwen3Config(head_dim=16, **decoder)
    if family == "gemma2":  # sliding and full layers alternate; the window (16) is smaller than documents
        return transformers.Gemma2Config(head_dim=16, sliding_window=WINDOW, **decoder)
    if family == "phi3":
        return transformers.Phi3Config(pad_token_id=0, bos_token_id=1, eos_token_id=1, **decoder)
    if family == "gemma3_text":  # local and global layers in turn, each with its own rotary base
        return transformers.Gemma3TextConfig(head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16,
                                             layer_types=["sliding_attention", "full_attention"], **_NO_TOKENS,
                                             **decoder)
    if family == "olmo2":
        return transformers.Olmo2Config(**_NO_TOKENS, **decoder)
    if family == "granite":
        return transformers.GraniteConfig(embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2,
                                          logits_scaling=4.0, **_NO_TOKENS, **decoder)
    if family == "starcoder2":
        return transformers.Starcoder2Config(sliding_window=None, **_NO_TOKENS, **decoder)
    if family == "smollm3":  # every second layer without rope
        return transformers.SmolLM3Config(no_rope_layer_interval=2, **_NO_TOKENS, **decoder)
    if family == "cohere":
        return transformers.CohereConfig(logit_scale=0.5, **_NO_TOKENS, **decoder)
    if family == "stablelm":
        return transformers.StableLmConfig(partial_rotary_factor=0.25, **_NO_TOKENS, **decoder)
    if family == "mixtral":  # a mixture of experts: 4 experts, 2 a token, the router's aux loss off by default
        return transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **decoder)
    experts = dict(num_experts=4, num_experts_per_tok=2, **_NO_TOKENS, **decoder)
    if family == "qwen3_moe":
        return transformers.Qwen3MoeConfig(head_dim=16, moe_intermediate_size=32, **experts)
    if family == "qwen2_moe":  # and its gated shared expert
        return transformers.Qwen2MoeConfig(moe_intermediate_size=32, shared_expert_intermediate_size=48, **experts)
    if family == "olmoe":
        return transformers.OlmoeConfig(**experts)
    if family == DYNAMIC:
        return transformers.LlamaConfig(**{**decoder, "max_position_embeddings": 32},
                                        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    raise ValueError(family)


def tiny_model(family: str, implementation: str = "sdpa") -> torch.nn.Module:
    """A seeded random model in eval mode (BERT: its masked-LM head, so outputs are logits)."""
    config = tiny_config(family, implementation)
    torch.manual_seed(0)
    if family == "bert":
        return transformers.BertForMaskedLM(config).eval()
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def features(lengths=LENGTHS, seed: int = 0) -> list[dict]:
    """One example per document, with its own random token ids: what a dataset hands the collator."""
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(0, VOCAB, size=n).tolist()} for n in lengths]


def collated(lengths=LENGTHS, seed: int = 0):
    """(ids, documents, positions, batch): the collator's batch, and the documents its seq_idx names."""
    collator = transformers.DataCollatorWithFlattening(return_seq_idx=True, return_flash_attn_kwargs=True)
    batch = collator(features(lengths, seed))
    documents = documents_of_seq_idx(batch["seq_idx"])
    return batch["input_ids"], documents, batch["position_ids"], batch


def block_diagonal(documents: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """The 4D wrapper docs/harness.md used to recommend: (B, 1, T, T) additive, same document (and not later)."""
    T = documents.shape[1]
    keep = documents[:, :, None] == documents[:, None, :]
    if causal:
        keep = keep & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]


def logits(value) -> torch.Tensor:
    return value.logits if hasattr(value, "logits") else value


def alone_gaps(model, model_fn, ids, documents, positions) -> list[float]:
    """For each document of row 0, the largest |packed output - the document run alone by itself|."""
    with torch.no_grad():
        packed = logits(model_fn(ids, documents, positions))
        gaps = []
        row = documents[0]
        for d in torch.unique(row).tolist():
            where = torch.nonzero(row == d).flatten()
            first, end = int(where[0]), int(where[-1]) + 1
            kwargs = {"use_cache": False} if not isinstance(model, transformers.BertPreTrainedModel) else {}
            alone = logits(model(input_ids=ids[:, first:end], **kwargs))
            gaps.append(float((packed[0, first:end] - alone[0]).abs().max()))
    return gaps


def straight_positions_with_mask(model):
    """GPT-2's trap: a block-diagonal mask, positions counted straight through the row (0..T-1)."""

    def model_fn(ids, documents, positions):
        T = ids.shape[1]
        straight = torch.arange(T)[None].expand_as(ids)
        return model(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=straight,
                     use_cache=False).logits

    return model_fn


def one_token_shorter(ids, documents, document: int):
    """The batch with ``document`` of row 0 one token shorter (its last token dropped), the row one shorter too."""
    where = torch.nonzero(documents[0] == document).flatten()
    drop = int(where[-1])
    keep = torch.ones(ids.shape[1], dtype=torch.bool)
    keep[drop] = False
    return ids[:, keep], documents[:, keep]
