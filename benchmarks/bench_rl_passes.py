"""Forward passes each RL certificate makes, counted by a hook on a tiny Llama, at 6 to 96 packed sequences.

rl[logprobs] runs the user's log-prob function once on the packed batch and the model on each sequence alone as
the rows of at most two padded batches: at most 3 forward passes whatever the number of sequences (asserted),
and the tokens those passes carry (in extra_info). rl[aggregation], rl[alignment] and rl[metrics] run no model.

    python -m pytest benchmarks/bench_rl_passes.py -o python_files='bench_*.py' -p no:cacheprovider
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tensorcad.runtime.certification import check_logprobs  # noqa: E402


def _model():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      attn_implementation="sdpa", bos_token_id=None, eos_token_id=None,
                                      pad_token_id=None)
    return transformers.LlamaForCausalLM(config).eval()


def _batch(sequences: int):
    """One packed row of ``sequences`` sequences of 3 to 9 tokens."""
    lengths = [3 + (5 * i) % 7 for i in range(sequences)]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    g = torch.Generator().manual_seed(sequences)
    return {"input_ids": torch.randint(1, 64, positions.shape, generator=g), "position_ids": positions}


def _scored(model, batch):
    ids, positions = batch["input_ids"], batch["position_ids"]
    logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
    lp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    lp = torch.where(positions[:, 1:] == 0, torch.zeros_like(lp), lp)
    return torch.cat([lp, torch.zeros_like(lp[:, :1])], 1)


@pytest.mark.parametrize("sequences", [6, 24, 96])
def test_rl_logprobs_makes_at_most_three_forward_passes(benchmark, sequences):
    model, batch = _model(), _batch(sequences)
    counted = {"calls": 0, "tokens": 0}

    def hook(module, args, kwargs):
        counted["calls"] += 1
        counted["tokens"] += (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).numel()

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        result = benchmark.pedantic(check_logprobs, args=(_scored, model, batch), rounds=1, iterations=1)
    finally:
        handle.remove()
    assert result.passed, result.message()
    assert counted["calls"] == result.forwards <= 3
    packed_tokens = batch["input_ids"].numel()
    benchmark.extra_info.update(sequences=sequences, forwards=counted["calls"], tokens=counted["tokens"],
                                packed_tokens=packed_tokens, tokens_over_packed=counted["tokens"] / packed_tokens)
