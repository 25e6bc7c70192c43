"""The generated mixture of experts against transformers' own blocks (Qwen3-MoE, Mixtral, Qwen2-MoE's shared
expert) with the same weights, and its capacity mode against a loop over the tokens written here."""

import math

import pytest

from tensorcad.design import load
from moe_designs import BASE, design  # tests/, on sys.path (its conftest)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def built_moe(params):
    from tensorcad.runtime import build

    torch.manual_seed(0)
    model = build(load(design({**BASE, **params})), form="eager")
    return next(m for m in model.modules() if type(m).__name__ == "MoE")


def theirs(cls, config, ours):
    block = cls(config).eval()
    block.gate.weight.data.copy_(ours.gate.weight)
    block.experts.gate_up_proj.data.copy_(ours.gate_up_proj)
    block.experts.down_proj.data.copy_(ours.down_proj)
    if hasattr(block, "shared_expert"):
        for name in ("gate", "up", "down"):
            getattr(block.shared_expert, f"{name}_proj").weight.data.copy_(getattr(ours.shared, name).weight)
        block.shared_expert_gate.weight.data.copy_(ours.shared_gate.weight)
    return block


CASES = {
    "qwen3_moe": ({"normalize": True}, "Qwen3MoeConfig", "qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
                  dict(num_experts=4, norm_topk_prob=True, moe_intermediate_size=16)),
    "qwen3_moe-unnormalised": ({"normalize": False}, "Qwen3MoeConfig",
                               "qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
                               dict(num_experts=4, norm_topk_prob=False, moe_intermediate_size=16)),
    "mixtral": ({}, "MixtralConfig", "mixtral.modeling_mixtral.MixtralSparseMoeBlock",
                dict(num_local_experts=4, intermediate_size=16)),
    "qwen2_moe": ({"normalize": False, "shared": {"hidden": 8}, "shared_gate": True}, "Qwen2MoeConfig",
                  "qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
                  dict(num_experts=4, norm_topk_prob=False, moe_intermediate_size=16,
                       shared_expert_intermediate_size=8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_generated_experts_equal_transformers_block(case):
    import importlib

    params, config_name, path, keys = CASES[case]
    ours = built_moe(params).eval()
    module, cls = path.rsplit(".", 1)
    config = getattr(transformers, config_name)(hidden_size=32, num_experts_per_tok=2, **keys)
    block = theirs(getattr(importlib.import_module(f"transformers.models.{module}"), cls), config, ours)
    x = torch.randn(3, 11, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = ours(x), block(x)
    want = want[0] if isinstance(want, tuple) else want
    assert (got - want).abs().max().item() < 1e-5


def brute_keep(chosen, weights, groups, capacity_factor, experts, drop):
    """1 for each routed (token, slot) within its expert's capacity, counted by walking each group."""
    n, k = chosen.shape
    per = n // groups
    keep = torch.zeros(n, k)
    capacity = math.ceil(capacity_factor * per * k / experts)
    for g in range(groups):
        slots = [(t, s) for t in range(g * per, (g + 1) * per) for s in range(k)]
        for e in range(experts):
            mine = [(t, s) for t, s in slots if chosen[t, s] == e]
            if drop == "probs":  # the higher scores first, ties in slot order
                mine = sorted(mine, key=lambda ts: -float(weights[ts[0], ts[1]]))
            for t, s in mine[:capacity]:
                keep[t, s] = 1
    return keep


@pytest.mark.parametrize("drop", ["position", "probs"])
@pytest.mark.parametrize("scope", ["row", "batch"])
@pytest.mark.parametrize("factor", [0.5, 1.0, 1.25])
def test_the_capacity_mode_keeps_what_a_walk_over_each_group_keeps(drop, scope, factor):
    ours = built_moe({"capacity": factor, "drop": drop, "capacity_scope": scope})
    gen = torch.Generator().manual_seed(2)
    B, T = 3, 10
    chosen = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(B * T)])
    weights = torch.rand(B * T, 2, generator=gen)
    groups = B if scope == "row" else 1
    got = ours.keep(chosen, weights, groups)
    assert torch.equal(got, brute_keep(chosen, weights, groups, factor, 4, drop))
    if factor == 0.5:
        assert got.sum() < B * T * 2  # some dropped


def test_a_capacity_large_enough_drops_nothing_and_equals_dropless():
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(3))
    dropless = built_moe({}).eval()
    roomy = built_moe({"capacity": 4.0, "drop": "position"}).eval()
    roomy.load_state_dict(dropless.state_dict())
    with torch.no_grad():
        assert torch.equal(roomy(x), dropless(x))


# The generated text (docstrings, comments, the capacity, bias and ungated branches) of the options no preset
# takes; what it computes is held above: these pin what it says. `--snapshot-update` rewrites them.
VARIANTS = {
    "capacity-row-position": {"capacity": 1.25, "drop": "position", "capacity_scope": "row"},
    "capacity-batch-probs": {"capacity": 1.0, "drop": "probs", "capacity_scope": "batch", "normalize": True},
    "bias-ungated": {"bias": True, "activation": "gelu"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_generated_text_of_each_option(snapshot, variant):
    from pathlib import Path

    from tensorcad.codegen import generate
    from tensorcad.testing.plugin.snapshot import assert_golden

    text = generate(load(design({**BASE, **VARIANTS[variant]})))
    assert_golden(snapshot, Path(__file__).resolve().parents[2], "codegen", f"tiny-moe-{variant}", text)
