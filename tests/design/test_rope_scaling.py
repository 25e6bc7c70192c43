"""The language grown for the families of issue 34: rope scalings, part of a head, pairs, ropes in turn,
a last cycle cut short, and the blocks' new shapes; each refused where it cannot hold, naming its path."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.analysis.params import count_params
from tensorcad.design.catalog import KINDS
from tensorcad.design.rope_scaling import SCALINGS, attention_factor
from tensorcad.errors import TensorcadError

ROPE = "nodes[1].params.block.params.attention.rope"


def _llama(rope=None, **block):
    raw = tensorcad.load("llama-3-8b").to_dict()
    params = raw["nodes"][1]["params"]["block"]["params"]
    if rope is not None:
        params["attention"]["rope"] = rope
    params.update(block)
    return raw


def _op():
    return tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=1.0))


@pytest.mark.parametrize("scaling", [
    {"type": "linear", "factor": 4.0},
    {"type": "dynamic", "factor": 2.0, "original_context": 8192},
    {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 8192},
    {"type": "yarn", "factor": 4.0, "original_context": 8192},
    {"type": "longrope", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64, "factor": 16.0,
     "original_context": 8192},
])
def test_no_scaling_changes_a_param_or_a_flop(scaling):
    # The catalog says so: a scaling turns the angles only. Held to the unscaled design's whole report.
    scaled = tensorcad.load(_llama({"theta": 500000, "scaling": scaling}))
    plain = tensorcad.load("llama-3-8b")
    assert tensorcad.analyze(scaled, _op()).to_json()["flops"] == tensorcad.analyze(plain, _op()).to_json()["flops"]
    assert count_params(scaled) == count_params(plain)
    assert "changes no param and no FLOP" in KINDS["rope"].param("scaling").doc


@pytest.mark.parametrize("rope, path, message", [
    ({"scaling": {"type": "ntk"}}, f"{ROPE}.scaling.type", "'ntk' is not one of 'linear', 'dynamic'"),
    ({"scaling": {"type": "linear"}}, f"{ROPE}.scaling.factor", "missing required param"),
    ({"scaling": {"type": "linear", "factor": 2, "beta": 1}}, f"{ROPE}.scaling.beta", "unknown param 'beta'"),
    ({"scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
     f"{ROPE}.scaling.original_context", "missing required param"),
    ({"scaling": {"type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 64, "factor": 2.0,
                  "original_context": 8}}, f"{ROPE}.scaling.short_factor", "3 factors for 64 frequencies"),
    ({"scaling": {"type": "longrope", "short_factor": [1.0, -1.0], "long_factor": [1.0], "factor": 2.0,
                  "original_context": 8}}, f"{ROPE}.scaling.short_factor[1]", "-1.0 is not a positive finite number"),
    ({"rotary_dim": 129}, f"{ROPE}.rotary_dim", "129 must be even and at most head_dim 128"),
    ({"scaling": "linear"}, f"{ROPE}.scaling", "expected an object, got str"),
])
def test_a_bad_rope_names_its_path(rope, path, message):
    with pytest.raises(TensorcadError) as e:
        tensorcad.load(_llama({"theta": 500000, **rope}))
    assert e.value.path == path and message in e.value.message, str(e.value)


def test_yarn_and_longrope_attention_factors_are_transformers_defaults():
    import math

    assert attention_factor({"type": "yarn", "factor": 4.0}) == 0.1 * math.log(4.0) + 1.0
    assert attention_factor({"type": "yarn", "factor": 4.0, "mscale": 0.5, "mscale_all_dim": 1.0}) == (
        (0.1 * 0.5 * math.log(4.0) + 1.0) / (0.1 * math.log(4.0) + 1.0))
    assert attention_factor({"type": "longrope", "factor": 32.0, "original_context": 4096}) == math.sqrt(
        1 + math.log(32.0) / math.log(4096))
    assert attention_factor({"type": "yarn", "factor": 4.0, "attention_factor": 0.5}) == 0.5
    assert attention_factor({"type": "llama3", "factor": 8.0}) == 1.0
    assert set(SCALINGS) == {"linear", "dynamic", "llama3", "yarn", "longrope"}


def test_ropes_in_turn_give_each_block_its_own_and_a_last_cycle_may_be_cut_short():
    # Gemma 3 1B's pattern: 26 layers, five local then one global, each kind with its own rotary base
    local, wide = {"theta": 10000}, {"theta": 1000000, "scaling": {"type": "linear", "factor": 8.0}}
    raw = _llama()
    raw["nodes"][1]["params"].update(repeat=26, windows=[512] * 5 + [None], ropes=[local] * 5 + [wide])
    design = tensorcad.load(raw)
    runs = [(a.window, layers) for a, layers in design.attentions()]
    assert runs == [(512, 5), (512, 5), (512, 4), (512, 4), (512, 4), (None, 4)]  # 22 local layers, 4 global
    blocks = design.nodes[1].children
    assert [b.child("attention").child("rope_q").params["theta"] for b in blocks] == [10000.0] * 5 + [1000000.0]
    plain = _llama()
    plain["nodes"][1]["params"]["repeat"] = 26
    assert count_params(design) == count_params(tensorcad.load(plain))  # ropes and windows move no parameter
    raw["nodes"][1]["params"]["ropes"] = [local, wide]
    with pytest.raises(TensorcadError, match=r"^nodes\[1\]\.params\.ropes: 2 ropes for 6 windows"):
        tensorcad.load(raw)


def test_a_block_without_rope_among_ropes_in_turn_takes_no_positions():
    # SmolLM3: every fourth layer attends without rope; positions reach only the blocks that turn by them
    raw = _llama()
    raw["inputs"]["positions"] = {"role": "positions"}
    raw["nodes"][1]["in"]["pos"] = "positions"
    raw["nodes"][1]["params"]["ropes"] = [{"theta": 500000}] * 3 + [None]
    design = tensorcad.load(raw)
    assert [b.child("attention").wire("pos") is not None for b in design.nodes[1].children] == [True] * 3 + [False]
    assert not [d for d in tensorcad.check(design) if d.rule == "ROPE-02"]


@pytest.mark.parametrize("block, path, message", [
    ({"parallel": True, "post_norms": True}, "parallel", "a parallel block has one norm before both halves"),
    ({"norm_bias": False}, "norm_bias", "a bias is a layernorm's; this block's norm is rmsnorm"),
    ({"residual_scale": 0}, "residual_scale", "0 is below the minimum"),
])
def test_the_blocks_new_shapes_are_refused_where_they_cannot_hold(block, path, message):
    with pytest.raises(TensorcadError) as e:
        tensorcad.load(_llama(**block))
    assert e.value.path == f"nodes[1].params.block.params.{path}" and message in e.value.message


def test_the_blocks_new_shapes_count_their_norms():
    llama = count_params(tensorcad.load("llama-3-8b")).total
    norms = 2 * 32 * 4096  # two RMSNorms a layer
    assert count_params(tensorcad.load(_llama(parallel=True))).total == llama - norms // 2  # one norm a layer
    assert count_params(tensorcad.load(_llama(pre_norms=False, post_norms=True))).total == llama  # two, after
    layer = tensorcad.load(_llama(norm="layernorm"))
    biasless = tensorcad.load(_llama(norm="layernorm", norm_bias=False))
    assert count_params(layer).total - count_params(biasless).total == norms  # a bias each
