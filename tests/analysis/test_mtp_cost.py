"""Multi-token prediction in the language (issue 46): a design's ``mtp`` depth, its modules' params apart and their
training FLOPs beside the model's, held to the modules built around the generated model and counted by PyTorch's
FlopCounterMode."""

from __future__ import annotations

import copy

import pytest

from tensorcad import OperatingPoint, analyze
from tensorcad.analysis.params import count_params, mtp_params
from tensorcad.design import load
from tensorcad.errors import TensorcadError

DESIGN = {
    "name": "tiny-mtp", "context": 32,
    "inputs": {"ids": {"role": "tokens"}, "doc": {"role": "documents"}, "pos": {"role": "positions"}},
    "nodes": [
        {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 50, "dim": 32}},
        {"id": "layers", "kind": "stack", "in": {"x": "embed", "doc": "doc", "pos": "pos"}, "params": {
            "repeat": 2, "block": {"kind": "transformer_block", "params": {
                "attention": {"heads": 4, "rope": {"theta": 10000}, "mask": "doc(b, q) == doc(b, kv)"},
                "mlp": {"hidden": 64}}}}},
        {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
        {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 50}}],
    "output": "head",
}


def with_depth(depth):
    return {**copy.deepcopy(DESIGN), "mtp": {"depth": depth}}


@pytest.mark.parametrize("depth", [1, 2])
def test_the_modules_cost_what_pytorch_counts_of_them(depth):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from tensorcad.runtime import build
    from tensorcad.runtime.building.mtp import with_mtp

    design = load(with_depth(depth))
    report = analyze(design, OperatingPoint(seq=32)).to_json()
    assert design.mtp == depth and report["params"] == count_params(load(DESIGN)).to_json()  # the model's, unmoved
    model = with_mtp(build(design, form="eager"), depth)
    assert report["mtp"]["params"]["total"] == sum(p.numel() for p in model.mtp.parameters())
    ids = torch.randint(0, 50, (1, 32))
    documents = torch.zeros_like(ids)
    positions = torch.arange(32)[None]
    with torch.no_grad():
        with FlopCounterMode(display=False) as main:
            model(ids, documents, positions)
        with FlopCounterMode(display=False) as every:
            model.heads(ids, documents, positions)
    # the eager form computes every score of its one document (32 x 32), the analysis the 528 causal ones:
    # the modules' linear FLOPs exact, their attention the analysis's kept keys a query (16.5) against the
    # dense count's 32, in the same ratio
    counted = every.get_total_flops() - main.get_total_flops()
    dense = depth * 4 * 32 * 32 * 8 * 4  # 4 x T x S x head_dim x heads, each module
    linear = counted - dense
    assert linear == 2 * report["mtp"]["params"]["matmul"] * 32
    assert report["mtp"]["fwdPerToken"] == pytest.approx(linear / 32 + dense / 32 * 16.5 / 32)
    assert report["mtp"]["trainPerToken"] == 3 * report["mtp"]["fwdPerToken"]


def test_the_modules_train_beside_the_model_and_serving_pays_nothing():
    plain, deep = analyze(load(DESIGN)), analyze(load(with_depth(2)))
    assert deep.training_seconds / plain.training_seconds == pytest.approx(
        (plain.training_flops.train_per_token + deep.mtp.train_per_token) / plain.training_flops.train_per_token)
    assert deep.serving_fwd_per_token == plain.serving_fwd_per_token and plain.mtp is None
    assert "mtp" not in plain.to_json()
    assert deep.mtp.params == mtp_params(load(DESIGN), 2)


@pytest.mark.parametrize("mtp, path, words", [
    ({"depth": 0}, "mtp.depth", "expected a depth of 1..8 modules, got 0"),
    ({"depth": 9}, "mtp.depth", "got 9"),
    ({"depth": True}, "mtp.depth", "got True"),
    ({"depth": 1, "heads": 2}, "mtp.heads", "unknown"),
    ([1], "mtp", "object"),
])
def test_a_bad_mtp_names_its_path(mtp, path, words):
    with pytest.raises(TensorcadError) as e:
        load({**copy.deepcopy(DESIGN), "mtp": mtp})
    assert e.value.path == path and words in str(e.value)


def test_mtp_needs_a_stack_and_a_linear_head():
    raw = {"name": "no-stack", "inputs": {"ids": {"role": "tokens"}}, "mtp": {},
           "nodes": [{"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 50, "dim": 32}},
                     {"id": "head", "kind": "linear", "in": {"x": "embed"}, "params": {"out": 50}}], "output": "head"}
    with pytest.raises(TensorcadError) as e:
        load(raw)
    assert e.value.path == "mtp" and "a stack of blocks and a linear output head" in str(e.value)
