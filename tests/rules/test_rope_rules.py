"""ROPE-03: a rope scaling that reads the longest position of the batch, under packing.

A Llama with dynamic scaling (factor 2 from 32 positions, the one tests/hf/test_hf_outputs.py
shows unfaithful by construction) is warned of at any packed seq past those 32
positions, and of nothing without packing or within them. The same for LongRoPE
(Phi-3's), and never for the static scalings.
"""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad import OperatingPoint, Packing
from tensorcad.rules import RULES, check

transformers = pytest.importorskip("transformers")

SHAPES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def _design(config):
    from tensorcad.hf import design_from_config

    return tensorcad.load(design_from_config(config.to_dict(), documents=True, positions=True))


def _rope03(design, op):
    return [d for d in check(design, op) if d.rule == "ROPE-03"]


def test_a_dynamic_scaling_is_warned_of_under_packing_past_its_original_context():
    # the matrix's Llama (tests/hf/hf_setups.py), whose unfaithfulness test_hf_outputs.py shows, is held to this too
    design = _design(transformers.LlamaConfig(**{**SHAPES, "max_position_embeddings": 32},
                                              rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}))
    assert design.context == 64  # dynamic scaling is meant to reach factor x the 32 positions it starts from
    [found] = _rope03(design, OperatingPoint(seq=64, packing=Packing(mean=16, spread=1.0)))
    assert found.severity == "warn" and found.path == "nodes[1].params.block.params.attention"
    assert found.message.startswith("layers.block.attention's dynamic rope scaling recomputes its frequencies from "
                                    "the longest position of the whole batch once it passes 32: in 64-token packed "
                                    "rows, documents beside one longer than 32 tokens are rotated as that one is")
    assert not _rope03(design, OperatingPoint(seq=64))  # one document a row: each is the longest of its own
    assert not _rope03(design, OperatingPoint(seq=32, packing=Packing(mean=16, spread=1.0)))  # nothing passes 32


def test_longrope_is_warned_of_and_the_static_scalings_are_not():
    op = OperatingPoint(seq=128, packing=Packing(mean=32, spread=1.0))
    longrope = transformers.Phi3Config(**SHAPES, max_position_embeddings=128, original_max_position_embeddings=64,
                                       rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                        "short_factor": [1.0] * 8, "long_factor": [4.0] * 8})
    assert [d.message.split("'s ")[1].split(" rope")[0] for d in _rope03(_design(longrope), op)] == ["longrope"]
    for scaling in ({"rope_type": "linear", "factor": 4.0}, {"rope_type": "yarn", "factor": 4.0,
                                                             "original_max_position_embeddings": 32},
                    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 32}):
        config = transformers.LlamaConfig(**SHAPES, max_position_embeddings=128,
                                          rope_parameters={**scaling, "rope_theta": 1e4})
        assert not _rope03(_design(config), op), scaling


def test_the_rule_is_registered_as_a_warning():
    assert RULES["ROPE-03"].severity == "warn" and "longest position" in RULES["ROPE-03"].doc
