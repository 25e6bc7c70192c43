"""scale(): a design shrunk to a few million parameters keeps its structure."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.analysis.params import count_params
from tensorcad.design import expr as E
from tensorcad.runtime import scale

PRESETS = tensorcad.preset_names()


def _shape(design):
    """What scaling must keep: kinds, roles, masks and scores, head groups, choices."""
    out = []
    for node, _ in design.walk():
        p = node.params
        keep = [node.kind, tuple(sorted((w.port, w.role) for w in node.wires))]
        if node.kind == "mlp":
            keep += [p["activation"], p["bias"]]
        if node.kind == "linear":
            keep += [p["bias"], p["tie"]]
        if node.kind == "gqa_attention":
            keep += [p["bias"], p["rope"] is not None, p["heads"] // p["kv_heads"]]
        a = node.attention
        if a is not None:
            keep += [a.causal, a.window is not None,
                     None if a.mask is None else E.to_text(a.mask),
                     None if a.score is None else E.to_text(a.score)]
        out.append(tuple(keep))
    return out, [(i.name, i.role) for i in design.inputs]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("target", [200_000, 2_000_000])
def test_scaled_within_half_and_same_structure(preset, target):
    design = tensorcad.load(preset)
    small = scale(design, params=target)
    total = count_params(small).total
    original = count_params(design).total
    if original <= target:
        assert small is design
    else:
        assert 0.5 * target <= total <= 1.5 * target, total
    assert _shape(small) == _shape(design)
    assert small.context <= 2048
    for node, _ in small.walk():
        if node.kind == "embedding":
            assert node.params["vocab"] <= 512


def test_window_still_bites_at_short_sequences():
    small = scale(tensorcad.load("mistral-7b"), 300_000)
    (attention, _), = small.attentions()[:1]
    assert attention.window <= 128 and attention.window < small.context


def test_table_follows_the_heads_it_is_read_by():
    raw = tensorcad.load("t5-bias").to_dict()
    raw["nodes"][1]["params"]["shape"] = [32, 16]
    raw["nodes"][2]["params"]["block"]["params"]["attention"].update(heads=16, head_dim=32)
    small = scale(tensorcad.design.resolve(raw), 150_000)
    heads = small.attentions()[0][0].heads
    assert heads < 16
    assert list(small.node("relative_bias").params["shape"]) == [32, heads]


@pytest.mark.parametrize("bad", [0, -5, True, 2.5, "1e6", 10**12])
def test_bad_params_refused(bad):
    with pytest.raises(tensorcad.TensorcadError) as info:
        scale(tensorcad.load("llama-3-8b"), params=bad)
    assert info.value.path == "params"


def test_deterministic():
    design = tensorcad.load("llama-3-8b-documents")
    assert scale(design, 500_000).to_dict() == scale(design, 500_000).to_dict()


def test_a_partial_rotary_keeps_its_share_of_each_head():
    # StableLM turns a quarter of each head, Bamba half: the shrunk head turns the same share, an even number
    raw = tensorcad.load("llama-3-8b").to_dict()
    stack = next(n for n in raw["nodes"] if n["kind"] == "stack")
    stack["params"]["block"]["params"]["attention"]["rope"]["rotary_dim"] = 32  # of head_dim 128
    small = scale(tensorcad.design.resolve(raw), 300_000)
    rope = next(n.params for n, _ in small.walk() if n.kind == "rope")
    assert rope["head_dim"] < 128 and rope["rotary_dim"] * 4 == rope["head_dim"]


def _wide(mixer: dict | None = None, attention: dict | None = None, dim: int = 4096) -> dict:
    raw = tensorcad.load("mamba2-hybrid-documents").to_dict()
    blocks = raw["nodes"][1]["params"]["blocks"]
    raw["nodes"][0]["params"]["dim"] = blocks["mamba"]["params"]["dim"] = blocks["attention"]["params"]["dim"] = dim
    if mixer is not None:
        blocks["mamba"]["params"]["mixer"]["params"] = mixer
    if attention is not None:
        blocks["attention"]["params"]["attention"] = attention
    return raw


@pytest.mark.parametrize("raw", [
    _wide(mixer={"heads": 4096, "head_dim": 2048, "state": 128, "groups": 1}),
    _wide(attention={"heads": 4096, "kv_heads": 4096, "causal": True, "mask": "doc(b, q) == doc(b, kv)"}, dim=2 ** 20),
], ids=["ssm-4096-heads-of-2048", "attention-4096-heads-of-a-2^20-stream"])
def test_a_design_that_validates_scales_without_a_value_the_user_never_wrote(raw):
    """Before: 4,096 Mamba-2 heads of 2,048 on 16 heads asked head_dim 262,144 ("nodes[1]...head_dim: 262144 is above
    the maximum 4096"), refused by codegen --scale, certify and MCP certify; the design validates and analyzes."""
    design = tensorcad.load(raw)
    small = scale(design, 2_000_000)
    widths = [n.params.get("head_dim") for n, _ in small.walk() if n.params.get("head_dim") is not None]
    assert widths and max(widths) <= 4096 and count_params(small).total < count_params(design).total
