"""import-hf of the mixture-of-experts families to the letter (issue 44's mutation of hf/experts.py): each family's
moe and attention params from transformers' own config classes, where each key went, and every refusal's words.
The families' outputs against transformers' are held in test_equal.py and codegen/test_experts_code.py."""

from __future__ import annotations

import pytest

from tensorcad.errors import TensorcadError
from tensorcad.hf import design_from_config, dispositions

from hf_families import tiny_config  # tests/hf, on sys.path (rootdir import mode)

transformers = pytest.importorskip("transformers", reason="transformers is absent: its config classes are the reference")

ROUTED = {"kind": "moe", "experts": 4, "top_k": 2, "activation": "swiglu", "router": "softmax", "aux_loss": 0.0}
ATTENTION = {"heads": 4, "kv_heads": 2, "head_dim": 16, "causal": True}


def block(family: str, **change) -> dict:
    config = {**tiny_config(transformers, family).to_dict(), **change}
    return design_from_config(config)["nodes"][1]["params"]["block"]["params"]


def refused(family: str, **change) -> str:
    with pytest.raises(TensorcadError) as e:
        design_from_config({**tiny_config(transformers, family).to_dict(), **change})
    return str(e.value)


def test_each_family_reads_as_its_routed_experts_and_its_attention():
    qwen3 = block("qwen3_moe")
    assert qwen3["mlp"] == {**ROUTED, "hidden": 32, "normalize": True}
    assert qwen3["attention"] == {**ATTENTION, "rope": {"theta": 10000.0}, "bias": False, "qk_norm": {"eps": 1e-06}}
    qwen2 = block("qwen2_moe")
    assert qwen2["mlp"] == {**ROUTED, "hidden": 32, "normalize": False, "shared": {"hidden": 48},
                            "shared_gate": True}
    assert qwen2["attention"] == {**ATTENTION, "rope": {"theta": 10000.0}, "qkv_bias": True}
    mixtral = block("mixtral")
    assert mixtral["mlp"] == {**ROUTED, "hidden": 96, "normalize": True}  # softmax over the top-k: normalised
    assert mixtral["attention"] == {**ATTENTION, "rope": {"theta": 1000000.0}, "window": 8}
    olmoe = block("olmoe")
    assert olmoe["mlp"] == {**ROUTED, "hidden": 96, "normalize": False}
    assert olmoe["attention"] == {**ATTENTION, "rope": {"theta": 10000.0}, "bias": False,
                                  "qk_norm": {"eps": 1e-05, "scope": "all"}}
    assert (qwen3["eps"], olmoe["eps"], qwen3["norm"], qwen3["dim"]) == (1e-06, 1e-05, "rmsnorm", 64)


def test_the_options_each_family_reads():
    assert block("qwen3_moe", output_router_logits=True)["mlp"]["aux_loss"] == 0.001  # transformers' default
    assert block("olmoe", output_router_logits=True, router_aux_loss_coef=0.02)["mlp"]["aux_loss"] == 0.02
    assert block("qwen3_moe", output_router_logits=False, router_aux_loss_coef=0.02)["mlp"]["aux_loss"] == 0.0
    assert block("qwen3_moe", norm_topk_prob=False)["mlp"]["normalize"] is False
    assert block("olmoe", norm_topk_prob=True)["mlp"]["normalize"] is True
    assert block("mixtral", router_jitter_noise=0.0)["mlp"]["normalize"] is True
    unshared = block("qwen2_moe", shared_expert_intermediate_size=0)["mlp"]
    assert "shared" not in unshared and "shared_gate" not in unshared
    assert block("qwen2_moe", qkv_bias=False)["attention"]["qkv_bias"] is False
    assert block("qwen3_moe", attention_bias=True)["attention"]["bias"] is True
    assert block("qwen3_moe", num_local_experts=3)["mlp"]["experts"] == 3  # the key a config holds is read
    hub = tiny_config(transformers, "qwen3_moe").to_dict()
    del hub["num_local_experts"]  # a Hub file's config.json writes num_experts
    assert design_from_config({**hub, "num_experts": 3})["nodes"][1]["params"]["block"]["params"]["mlp"]["experts"] == 3
    assert block("qwen3_moe", num_key_value_heads=None)["attention"]["kv_heads"] == 4
    assert block("qwen3_moe", head_dim=None, hidden_size=96)["attention"]["head_dim"] == 24
    assert block("qwen3_moe", head_dim=8)["attention"]["head_dim"] == 8
    assert block("qwen3_moe", mlp_only_layers=None)["mlp"]["experts"] == 4
    assert block("qwen3_moe", rms_norm_eps=1e-5)["attention"]["qk_norm"] == {"eps": 1e-5}
    tied = design_from_config({**tiny_config(transformers, "mixtral").to_dict(), "tie_word_embeddings": True})
    assert tied["nodes"][3]["params"]["tie"] == "embed"
    assert "tie" not in design_from_config(tiny_config(transformers, "mixtral").to_dict())["nodes"][3]["params"]


def test_qwen2_moe_without_a_window_says_so_and_with_one_slides():
    assert "window" not in block("qwen2_moe", sliding_window=0, use_sliding_window=False)["attention"]
    where = dispositions(tiny_config(transformers, "qwen2_moe").to_dict())
    assert (where["sliding_window"].how, where["sliding_window"].note) == \
        ("mapped", "none: Qwen2-MoE writes 0 where use_sliding_window is false")
    assert (where["max_window_layers"].how, where["max_window_layers"].note) == ("ignored", "which layers slide; none does")
    assert where["use_sliding_window"].note == "no window"
    from hf_families import _LLAMA_SHAPES, _NO_TOKENS

    sliding = transformers.Qwen2MoeConfig(**_LLAMA_SHAPES, **_NO_TOKENS, num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=32, use_sliding_window=True, sliding_window=8,
                                          max_window_layers=1)
    assert sliding.layer_types == ["sliding_attention", "full_attention"]  # transformers' own reading
    assert design_from_config(sliding.to_dict())["nodes"][1]["params"]["windows"] == [8, None]


def test_where_each_experts_key_goes():
    qwen3 = dispositions(tiny_config(transformers, "qwen3_moe").to_dict())
    assert (qwen3["intermediate_size"].how, qwen3["intermediate_size"].note) == \
        ("ignored", "the dense MLP of the layers in mlp_only_layers, which here are none")
    assert qwen3["mlp_only_layers"].note == "none: every layer's MLP is routed"
    assert qwen3["decoder_sparse_step"].note == "1: every layer's MLP is routed"
    assert qwen3["moe_intermediate_size"].note == "nodes[1].params.block.params.mlp.hidden"
    assert qwen3["num_local_experts"].note == "nodes[1].params.block.params.mlp.experts"  # transformers 5 writes it
    assert qwen3["num_experts_per_tok"].note == "nodes[1].params.block.params.mlp.top_k"
    assert qwen3["norm_topk_prob"].note == "nodes[1].params.block.params.mlp.normalize"
    assert qwen3["output_router_logits"].note == \
        "nodes[1].params.block.params.mlp.aux_loss: the coefficient when true, 0 when false"
    assert qwen3["router_aux_loss_coef"].note == "nodes[1].params.block.params.mlp.aux_loss"
    mixtral = dispositions(tiny_config(transformers, "mixtral").to_dict())
    assert mixtral["intermediate_size"].note == "nodes[1].params.block.params.mlp.hidden"
    assert mixtral["num_local_experts"].note == "nodes[1].params.block.params.mlp.experts"
    assert mixtral["router_jitter_noise"].note == "none: the router's scores are not jittered"
    qwen2 = dispositions(tiny_config(transformers, "qwen2_moe").to_dict())
    assert qwen2["shared_expert_intermediate_size"].note == "nodes[1].params.block.params.mlp.shared.hidden"
    assert qwen2["qkv_bias"].note == "nodes[1].params.block.params.attention.qkv_bias"
    unset = dispositions({**tiny_config(transformers, "qwen3_moe").to_dict(), "num_key_value_heads": None,
                          "head_dim": None})
    assert unset["num_key_value_heads"].note == \
        "nodes[1].params.block.params.attention.kv_heads (num_attention_heads when null)"
    assert unset["head_dim"].note == \
        "nodes[1].params.block.params.attention.head_dim (hidden_size / num_attention_heads when null)"


def test_what_the_language_cannot_say_is_refused_by_its_key():
    assert refused("qwen3_moe", mlp_only_layers=[1]) == \
        "mlp_only_layers: [1]: dense layers among routed ones are not one repeated block"
    assert refused("qwen2_moe", decoder_sparse_step=2) == \
        "decoder_sparse_step: 2: a routed MLP every 2 layers is not one repeated block"
    assert refused("mixtral", router_jitter_noise=0.1) == \
        "router_jitter_noise: 0.1: a router's multiplicative noise in training is not in the design language"
    assert refused("olmoe", clip_qkv=8.0) == \
        "clip_qkv: 8.0 is not supported: q, k and v clamped to a bound are not in the design language"
    assert refused("qwen3_moe", num_experts_per_tok=5) == "num_experts_per_tok: 5 is more than the 4 experts"
    assert block("olmoe", num_experts_per_tok=4)["mlp"]["top_k"] == 4  # every expert is a top-k
    assert refused("qwen3_moe", router_aux_loss_coef=-0.1) == \
        "router_aux_loss_coef: expected a coefficient of at least 0, got -0.1"
    assert refused("qwen3_moe", head_dim=None, hidden_size=66) == \
        "num_attention_heads: 4 heads do not divide hidden_size 66"


def _without(family: str, *keys: str, **change) -> dict:
    config = {**tiny_config(transformers, family).to_dict(), **change}
    for key in keys:
        del config[key]
    return config


def test_the_defaults_where_a_config_leaves_a_key_out():
    qwen3 = design_from_config(_without("qwen3_moe", "mlp_only_layers", "decoder_sparse_step", "norm_topk_prob",
                                        "router_aux_loss_coef", output_router_logits=True))
    mlp = qwen3["nodes"][1]["params"]["block"]["params"]["mlp"]
    assert (mlp["normalize"], mlp["aux_loss"]) == (False, 0.001)  # transformers' defaults
    mixtral = design_from_config(_without("mixtral", "router_jitter_noise"))
    assert mixtral["nodes"][1]["params"]["block"]["params"]["mlp"]["normalize"] is True  # no jitter: nothing refused
    # Mixtral's experts are num_local_experts whatever else the file says
    assert refused("mixtral", num_local_experts=None, num_experts=4) == \
        "num_local_experts: expected an integer of at least 1, got None"
    with pytest.raises(TensorcadError, match="^num_local_experts: "):
        design_from_config(_without("mixtral", "num_local_experts", num_experts=4))
    # a coefficient of 0 is a coefficient
    assert block("qwen3_moe", output_router_logits=True, router_aux_loss_coef=0.0)["mlp"]["aux_loss"] == 0.0
    head_dim = block("qwen3_moe", head_dim=None)["attention"]["head_dim"]
    assert head_dim == 16 and type(head_dim) is int  # hidden_size // heads, an integer


def test_the_shapes_keys_go_to_their_paths():
    where = dispositions({**tiny_config(transformers, "olmoe").to_dict(), "head_dim": 16})
    assert {key: where[key].note for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                             "num_key_value_heads", "head_dim")} == {
        "vocab_size": "nodes[0].params.vocab", "hidden_size": "nodes[0].params.dim",
        "num_hidden_layers": "nodes[1].params.repeat",
        "num_attention_heads": "nodes[1].params.block.params.attention.heads",
        "num_key_value_heads": "nodes[1].params.block.params.attention.kv_heads",
        "head_dim": "nodes[1].params.block.params.attention.head_dim"}
