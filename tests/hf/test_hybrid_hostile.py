"""Hybrid configs under hostile values (issue 47): one line naming the key, in bounded time.

Before this round (049439c, run here): Mamba-2 num_hidden_layers 2**70 OverflowError, 2**31 MemoryError; Bamba
2**31 past 20 s at 1.5 GB; LFM2 block_ffn_dim_multiplier NaN, inf, -inf, 1e308 tracebacks; Bamba
attn_layer_indices 0, false, "", {}, [] and [true] accepted (null stays: transformers' own default, no attention
layer).
"""

from __future__ import annotations

import math
import time

import pytest

transformers = pytest.importorskip("transformers")

from hf_families import tiny_hybrid  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.hf import design_from_config  # noqa: E402


def _config(family: str, **changed) -> dict:
    return {**tiny_hybrid(transformers, family).to_dict(), **changed}


def _refused(config: dict, key: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TensorcadError) as refused:
        design_from_config(config)
    text = str(refused.value)
    assert key in refused.value.path and "\n" not in text and len(text) <= 300, text
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize("family", ["mamba2", "bamba", "lfm2"])
@pytest.mark.parametrize("layers", [2**70, 2**31, 4097])
def test_layer_counts_past_the_designs_repeats_are_one_line(family, layers):
    _refused(_config(family, num_hidden_layers=layers), "num_hidden_layers")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, 0, -1, True, "2"])
def test_lfm2_multipliers_that_are_no_width_are_one_line(value):
    _refused(_config("lfm2", block_ffn_dim_multiplier=value, block_auto_adjust_ff_dim=True, block_multiple_of=8),
             "block_ffn_dim_multiplier")


@pytest.mark.parametrize("value", [0, False, "", {}, [], [True], [1.0], [7], "1"])
def test_bamba_attention_indices_are_a_list_of_layers(value):
    _refused(_config("bamba", attn_layer_indices=value), "attn_layer_indices")


def test_the_clean_configs_still_import():
    for family in ("mamba2", "bamba", "lfm2"):
        assert design_from_config(_config(family))["nodes"]
    assert design_from_config(_config("bamba", attn_layer_indices=None))["nodes"]
