"""The `moe` kind: its params in the catalog, checked against each other naming the path, and a transformer
block that takes one in place of its mlp."""

import pytest

from tensorcad.design import load
from tensorcad.design.catalog import KINDS
from tensorcad.errors import TensorcadError
from moe_designs import BASE, MLP, design  # tests/, on sys.path (its conftest)


def moe_node(**params):
    d = load(design({**BASE, **params}))
    [node] = [n for n, _ in d.walk() if n.kind == "moe"]
    return node


def test_the_catalog_lists_the_router_capacity_and_auxiliary_terms():
    names = {p.name for p in KINDS["moe"].params}
    assert {"router", "top_k", "normalize", "router_bias", "shared", "capacity", "drop", "capacity_scope",
            "aux_loss", "aux_scope", "z_loss", "bias_update"} <= names
    assert KINDS["moe"].param("router").choices == ("softmax", "sigmoid")
    assert KINDS["moe"].param("aux_scope").choices == ("micro_batch", "global_batch", "sequence")
    assert KINDS["moe"].param("capacity").default is None and KINDS["moe"].param("drop").default == "none"


def test_a_block_takes_a_moe_in_place_of_its_mlp_with_defaults_filled():
    node = moe_node(shared={"hidden": 8})
    assert node.name == "layers.block.mlp" and node.path == MLP
    assert node.params["router"] == "softmax" and node.params["normalize"] is True
    assert node.params["shared"] == {"hidden": 8, "activation": "swiglu", "bias": False}
    assert node.dim_in == node.dim == 32


def test_an_mlp_may_say_its_kind():
    raw = design(BASE)
    raw["nodes"][1]["params"]["block"]["params"]["mlp"] = {"kind": "mlp", "hidden": 64}
    assert [n.kind for n, _ in load(raw).walk() if n.id == "mlp"] == ["mlp"]


@pytest.mark.parametrize("params, path, words", [
    ({"top_k": 5}, f"{MLP}.top_k", "more than the 4 experts"),
    ({"capacity": 1.25}, f"{MLP}.capacity", "say which"),
    ({"drop": "position"}, f"{MLP}.drop", "give capacity"),
    ({"bias_update": 0.001}, f"{MLP}.bias_update", "router_bias"),
    ({"shared_gate": True}, f"{MLP}.shared_gate", "give shared"),
    ({"shared": {"hidden": 0}}, f"{MLP}.shared.hidden", "below the minimum"),
    ({"router": "relu"}, f"{MLP}.router", "not one of"),
    ({"aux_scope": "document"}, f"{MLP}.aux_scope", "not one of"),
    ({"capacity": 0.0, "drop": "probs"}, f"{MLP}.capacity", "below the minimum"),
    ({"experts": 0}, f"{MLP}.experts", "below the minimum"),
    ({"routers": 2}, f"{MLP}.routers", "unknown param"),
])
def test_bad_params_name_their_path(params, path, words):
    with pytest.raises(TensorcadError) as e:
        moe_node(**params)
    assert e.value.path == path and words in str(e.value)


def test_a_block_refuses_another_kind_as_its_feed_forward():
    raw = design(BASE)
    raw["nodes"][1]["params"]["block"]["params"]["mlp"] = {"kind": "rope", "head_dim": 8}
    with pytest.raises(TensorcadError) as e:
        load(raw)
    assert e.value.path == f"{MLP}.kind" and "an mlp or a moe" in str(e.value)


def test_a_capacity_with_a_drop_policy_and_the_auxiliary_terms_resolve():
    node = moe_node(router="sigmoid", router_bias=True, bias_update=0.001, capacity=1.25, drop="probs",
                    capacity_scope="batch", aux_loss=0.01, aux_scope="sequence", z_loss=0.001, routed_scale=2.5)
    assert (node.params["capacity"], node.params["drop"], node.params["capacity_scope"]) == (1.25, "probs", "batch")
    assert (node.params["aux_scope"], node.params["bias_update"], node.params["routed_scale"]) == ("sequence", 0.001, 2.5)
