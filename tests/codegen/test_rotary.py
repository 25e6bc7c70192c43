"""The generated rotary positions against transformers' own rotary embedding, scaling by scaling.

For each rope a Hugging Face config can hold (linear, dynamic, llama3, yarn with and
without mscale, longrope's short and long factors, part of a head turned, adjacent
pairs), the config is imported, the design generated, and its attention's ``rotary``
turns a random q by packed positions that run past the original context, bitwise as the
reference does: transformers' rotary embedding module of the same config, applied by its
family's ``apply_rotary_pos_emb``: a fresh model each time (transformers' dynamic and
longrope keep state between calls). The same design without its scaling turns q
otherwise, so the comparison can fail.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tensorcad  # noqa: E402
from tensorcad.hf import design_from_config  # noqa: E402
from tensorcad.runtime import build  # noqa: E402

SHAPES = dict(vocab_size=32, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=4, bos_token_id=None, eos_token_id=None, pad_token_id=None)
HEAD = 16
LONGROPE = {"short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [2.0 + 0.5 * i for i in range(8)]}
CASES = {
    "linear": ("llama", dict(max_position_embeddings=64, rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                                                          "factor": 4.0})),
    "dynamic": ("llama", dict(max_position_embeddings=16, rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4,
                                                                           "factor": 2.0})),
    "llama3": ("llama", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16})),
    "yarn": ("llama", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16})),
    "yarn-mscale": ("llama", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 16.0, "beta_slow": 2.0})),
    "longrope-long": ("phi3", dict(max_position_embeddings=64, original_max_position_embeddings=16,
                                   rope_parameters={"rope_type": "longrope", "rope_theta": 1e4, **LONGROPE})),
    "longrope-short": ("phi3", dict(max_position_embeddings=64, original_max_position_embeddings=48,
                                    rope_parameters={"rope_type": "longrope", "rope_theta": 1e4, **LONGROPE})),
    "partial": ("stablelm", dict(max_position_embeddings=64, partial_rotary_factor=0.25)),
    "phi3-partial": ("phi3", dict(max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                                               "partial_rotary_factor": 0.75})),
    "pairs": ("cohere", dict(max_position_embeddings=64)),
}
CONFIGS = {"llama": "LlamaConfig", "phi3": "Phi3Config", "stablelm": "StableLmConfig", "cohere": "CohereConfig"}


def _config(case):
    family, extra = CASES[case]
    return family, getattr(transformers, CONFIGS[family])(**SHAPES, **extra)


def _positions():
    # two packed rows: documents of 12, 12 and 8 tokens (within every original context here), then one of 32 (past them)
    first = torch.cat([torch.arange(12), torch.arange(12), torch.arange(8)])
    return torch.stack([first, torch.arange(32)])


def theirs(case, q, positions):
    family, config = _config(case)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cos, sin = hf.model.rotary_emb(q, positions)
    if family == "stablelm":  # its attention splits off the part it turns, as here
        part = cos.shape[-1]
        return torch.cat([module.apply_rotary_pos_emb(q[..., :part], q[..., :part], cos, sin)[0], q[..., part:]], -1)
    return module.apply_rotary_pos_emb(q, q, cos, sin)[0]


def ours(raw, q, positions):
    model = build(tensorcad.load(raw), form="eager")
    return model.layers[0].attention.rotary(q, positions)


@pytest.mark.parametrize("case", CASES)
def test_the_generated_rotary_turns_q_as_transformers_does(case):
    _, config = _config(case)
    raw = design_from_config(config.to_dict(), positions=True)
    q = torch.randn(2, 4, 32, HEAD, generator=torch.Generator().manual_seed(1))
    positions = _positions()
    with torch.no_grad():
        want, got = theirs(case, q, positions), ours(raw, q, positions)
    assert torch.equal(got, want), case  # the same operations in the same order: bitwise equal
    # without its scaling (or its pairs, or its part) the same q turns otherwise
    rope = raw["nodes"][1]["params"]["block"]["params"]["attention"]["rope"]
    plain = {"theta": rope["theta"]}
    raw["nodes"][1]["params"]["block"]["params"]["attention"]["rope"] = {**plain, "rotary_dim": HEAD - 2}
    assert (ours(raw, q, positions) - want).abs().max() > 1e-3, case


def test_dynamic_and_longrope_read_the_longest_position_of_the_whole_batch():
    # the first row's documents (at most 12 tokens) beside a 32-token one, then beside short ones: transformers and
    # the generated model both turn them by the batch's longest position, so their rotation depends on the other row
    for case in ("dynamic", "longrope-long"):
        _, config = _config(case)
        raw = design_from_config(config.to_dict(), positions=True)
        q = torch.randn(2, 4, 32, HEAD, generator=torch.Generator().manual_seed(2))
        positions = _positions()
        short = positions.clone()
        short[1] = torch.arange(32) % 12  # the second row's documents all short
        with torch.no_grad():
            beside_long, beside_short = ours(raw, q, positions)[0], ours(raw, q, short)[0]
            assert torch.equal(beside_long, theirs(case, q, positions)[0])
            assert torch.equal(beside_short, theirs(case, q, short)[0])
        assert (beside_long - beside_short).abs().max() > 1e-4, case
