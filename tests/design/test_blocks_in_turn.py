"""stack.windows (blocks taken in turn) and the Gemma-grown params, refused where they cannot hold."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.analysis.params import count_params
from tensorcad.errors import TensorcadError


def _llama(**stack):
    raw = tensorcad.load("llama-3-8b").to_dict()
    raw["nodes"][1]["params"].update(stack)
    return raw


def test_windows_in_turn_split_the_layers_between_blocks():
    design = tensorcad.load(_llama(windows=[4096, None]))
    assert [(a.window, n) for a, n in design.attentions()] == [(4096, 16), (None, 16)]
    # the same weights as one block repeated: windows move no parameter
    assert count_params(design) == count_params(tensorcad.load("llama-3-8b"))


def test_one_window_in_turn_is_the_block_window():
    a = tensorcad.analyze(tensorcad.load(_llama(windows=[1024])), tensorcad.OperatingPoint(seq=8192)).to_json()
    raw = _llama()
    raw["nodes"][1]["params"]["block"]["params"]["attention"]["window"] = 1024
    b = tensorcad.analyze(tensorcad.load(raw), tensorcad.OperatingPoint(seq=8192)).to_json()
    assert a == b


@pytest.mark.parametrize("windows, path, message", [
    ([4096, None, 512] * 11, "nodes[1].params.windows", "expected a list of 1 to 16 windows"),
    ([0, None], "nodes[1].params.windows[0]", "0 is not a window"),
    ([], "nodes[1].params.windows", "expected a list of 1 to 16 windows"),
])
def test_bad_windows_name_their_path(windows, path, message):
    with pytest.raises(TensorcadError) as e:
        tensorcad.load(_llama(windows=windows))
    assert e.value.path == path and message in e.value.message


def test_an_offset_needs_an_rmsnorm():
    raw = tensorcad.load("gpt2-small").to_dict()
    raw["nodes"][2]["params"]["block"]["params"]["norm_offset"] = 1.0
    with pytest.raises(TensorcadError, match=r"norm_offset: an offset scales an rmsnorm; this block's norm is layernorm"):
        tensorcad.load(raw)


def test_post_norms_add_two_norms_a_block():
    raw = _llama()
    raw["nodes"][1]["params"]["block"]["params"]["post_norms"] = True
    extra = count_params(tensorcad.load(raw)).total - count_params(tensorcad.load("llama-3-8b")).total
    assert extra == 32 * 2 * 4096
