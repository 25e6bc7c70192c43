"""Stateful mixers in the language: what each carries and resets (design.mixers), and the
mixer kinds, mixer blocks and hybrid stacks refused where they cannot hold, naming the path."""

from __future__ import annotations

import copy

import pytest

import tensorcad
from tensorcad.design.mixers import mixers, reads_documents, resets
from tensorcad.errors import TensorcadError

HYBRID = "mamba2-hybrid-documents"


def _raw():
    return tensorcad.load(HYBRID).to_dict()


def _blocks(raw):
    return raw["nodes"][1]["params"]["blocks"]


def test_the_preset_has_its_layers_in_turn_and_every_scan_resets():
    design = tensorcad.load(HYBRID)
    (scan,) = mixers(design)
    assert (scan.kind, scan.layers, scan.resets) == ("ssm", 42, True)
    assert scan.path == "nodes[1].params.blocks.mamba.params.mixer.params"
    assert [(a.path, n) for a, n in design.attentions()] == [
        ("nodes[1].params.blocks.attention.params.attention", 6)]
    stack = design.nodes[1]
    assert [c.kind for c in stack.children] == ["mixer_block"] * 7 + ["transformer_block"]
    assert stack.repeat == 6 and reads_documents(design)


def test_a_mixer_resets_only_when_its_doc_reads_a_documents_input():
    raw = _raw()
    raw["nodes"][1]["in"]["doc"] = "ids"  # token ids have the shape of documents, and mean nothing of them
    design = tensorcad.load(raw)
    mixer = design.nodes[1].children[0].child("mixer")
    assert mixer.wire("doc").role == "tokens" and not resets(mixer)
    del raw["nodes"][1]["in"]["doc"]
    _blocks(raw)["attention"]["params"]["attention"].pop("mask")
    assert [m.resets for m in mixers(tensorcad.load(raw))] == [False]


def test_a_mixer_block_hands_its_mixer_the_documents_only():
    # in a hybrid, the attention blocks' positions reach every block and pass a mixer block by
    raw = _raw()
    raw["inputs"]["positions"] = {"role": "positions"}
    raw["nodes"][1]["in"]["pos"] = "positions"
    design = tensorcad.load(raw)
    mixer = design.nodes[1].children[0].child("mixer")
    assert [w.port for w in mixer.wires] == ["doc"]
    assert mixer.wire("doc").route == ("layers.doc", "layers.block.doc", "layers.block.mixer.doc")


def _refused(raw) -> TensorcadError:
    with pytest.raises(TensorcadError) as e:
        tensorcad.load(raw)
    return e.value


def _mixer(raw):
    return _blocks(raw)["mamba"]["params"]["mixer"]["params"]


@pytest.mark.parametrize("change, path, message", [
    (lambda r: _mixer(r).update(groups=3), "nodes[1].params.blocks.mamba.params.mixer.params.groups",
     "3 groups do not divide 128 heads"),
    (lambda r: _blocks(r)["mamba"]["params"].update(mixer={"kind": "gqa_attention", "params": {"heads": 4}}),
     "nodes[1].params.blocks.mamba.params.mixer.kind", "'gqa_attention' is not a stateful mixer"),
    (lambda r: r["nodes"][1]["params"].update(block={"kind": "mlp", "params": {"hidden": 8}}),
     "nodes[1].params.block", "a block, or blocks and layers, not both"),
    (lambda r: r["nodes"][1]["params"].pop("layers"), "nodes[1].params.layers", "missing"),
    (lambda r: r["nodes"][1]["params"].update(layers=["mamba"] * 7 + ["attn"]), "nodes[1].params.layers[7]",
     "'attn' is not a block"),
    (lambda r: r["nodes"][1]["params"].update(layers=["mamba"] * 8), "nodes[1].params.blocks.attention",
     "block 'attention' is in no layer"),
    (lambda r: r["nodes"][1]["params"].update(layers=["mamba"] * 6 + ["attention"]), "nodes[1].params.layers",
     "7 layers do not divide repeat 48"),
    (lambda r: r["nodes"][1]["params"].update(windows=[4096, None]), "nodes[1].params.windows",
     "windows take a block in turn"),
    (lambda r: r["nodes"][1]["params"].update(layers=["mamba"] * 7 + ["a b"]), "nodes[1].params.layers[7]",
     "'a b' is not a name"),
    (lambda r: _blocks(r)["attention"]["params"]["attention"]["rope"].update(rotary_dim=3),
     "nodes[1].params.blocks.attention.params.attention.rope.rotary_dim", "3 must be even and at most head_dim"),
])
def test_what_cannot_hold_is_refused_naming_its_path(change, path, message):
    raw = _raw()
    change(raw)
    error = _refused(raw)
    assert error.path == path and message in error.message, (error.path, error.message)


def test_a_linear_attention_refuses_heads_that_cannot_share():
    raw = _raw()
    _blocks(raw)["mamba"]["params"]["mixer"] = {"kind": "linear_attention", "params": {"heads": 6, "k_heads": 4}}
    error = _refused(raw)
    assert error.path.endswith("mixer.params.k_heads") and "4 query/key heads do not divide 6" in error.message
    _blocks(raw)["mamba"]["params"]["mixer"]["params"] = {"heads": 7}
    error = _refused(raw)
    assert error.path.endswith("mixer.params.heads") and "4096 is not divisible by 7 heads" in error.message


def test_a_mixer_reads_no_port_but_doc():
    raw = copy.deepcopy(_raw())
    raw["nodes"][1]["params"] = {"repeat": 2, "block": {"kind": "short_conv"}}
    raw["inputs"]["positions"] = {"role": "positions"}
    raw["nodes"][1]["in"]["pos"] = "positions"
    error = _refused(raw)
    assert error.path == "nodes[1].in.pos" and "reads no such port" in error.message
