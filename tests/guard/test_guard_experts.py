"""The guard records the path each mixture-of-experts layer took (issue 44): transformers' experts (dropless, their
implementation), Switch's capacity-bound router and a generated MoE with a capacity, each routing counted by the
test's own walk over the tokens."""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tensorcad.design import load  # noqa: E402
from tensorcad.guard import check_batch  # noqa: E402
from tensorcad.guard.experts import experts_recording  # noqa: E402

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
from moe_designs import BASE, design  # noqa: E402  tests/, on sys.path


def qwen3_moe():
    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=16, max_position_embeddings=64,
                                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.Qwen3MoeForCausalLM(config).eval()


def packed():
    positions = torch.cat([torch.arange(n) for n in (5, 7, 4)])[None]
    return {"input_ids": torch.randint(1, 64, (1, 16), generator=torch.Generator().manual_seed(1)),
            "position_ids": positions, "use_cache": False}


def test_transformers_experts_are_recorded_dropless_with_their_implementation():
    report = check_batch(qwen3_moe(), packed())
    assert report.passed
    assert [c.layer for c in report.experts] == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    # transformers 5.24 runs these experts by grouped_mm (its default experts implementation here)
    assert {(c.implementation, c.capacity, c.tokens, c.top_k, c.experts, c.dropped, c.padding)
            for c in report.experts} == {("grouped_mm", None, 16, 2, 4, 0, 0)}
    assert "experts: 2 layers dropless (grouped_mm), top-2 of 4" in report.message()
    assert report.to_json()["experts"][0] == {"layer": "model.layers.0.mlp.experts", "implementation": "grouped_mm",
                                              "capacity": None, "tokens": 16, "topK": 2, "experts": 4, "dropped": 0,
                                              "padding": 0}


def test_a_padded_batch_routes_its_padding_and_the_path_counts_it():
    ids = torch.randint(1, 64, (2, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 6:] = 0  # 3 padding tokens, routed like any other
    model = qwen3_moe()
    model.set_experts_implementation("eager")  # the path names the implementation that ran
    report = check_batch(model, {"input_ids": ids, "attention_mask": mask})
    assert [c.padding for c in report.experts] == [3, 3] and [c.tokens for c in report.experts] == [18, 18]
    assert report.experts[0].line() == ("model.layers.0.mlp.experts: eager experts, dropless; 18 tokens routed to "
                                        "top-2 of 4, 3 of them padding")


def switch_layer():
    """Switch Transformers' sparse MLP: a top-1 router whose experts take 3 tokens each, no jitter."""
    from transformers.models.switch_transformers import modeling_switch_transformers as switch

    torch.manual_seed(3)
    config = transformers.SwitchTransformersConfig(d_model=16, num_experts=4, expert_capacity=3, d_ff=32,
                                                   router_jitter_noise=0.0)
    return switch.SwitchTransformersSparseMLP(config).eval()


def test_switch_routers_capacity_drops_are_what_a_walk_over_the_tokens_drops():
    layer = switch_layer()
    hidden = torch.randn(2, 8, 16)
    calls = []
    with torch.no_grad(), experts_recording(layer, calls):
        layer(hidden)
    [call] = calls
    # the walk: each row's tokens in order, each to its top-1 expert while that expert has room
    chosen = layer.router.classifier(hidden).argmax(-1)
    dropped = 0
    for row in chosen.tolist():
        load = [0] * 4
        for e in row:
            load[e] += 1
            dropped += load[e] > 3
    assert (call.implementation, call.capacity, call.tokens, call.top_k, call.experts) == ("switch", 3, 16, 1, 4)
    assert call.dropped == dropped > 0


def test_a_generated_capacity_moe_names_its_drops_when_a_certificate_fails():
    from tensorcad.runtime import build

    raw = design({**BASE, "capacity": 1.0, "drop": "position"}, documents=True)
    raw["inputs"]["pos"] = {"role": "positions"}  # positions restarting at each document, as the step gives them
    raw["nodes"][1]["in"]["pos"] = "pos"
    torch.manual_seed(4)
    model = build(load(raw), form="eager").eval()
    lengths = (6, 5, 9)
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)])[None]
    ids = torch.randint(0, 100, (1, sum(lengths)), generator=torch.Generator().manual_seed(5))
    inputs = []
    handle = model.layers[0].mlp.register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach()))
    labels = ids.clone()
    labels[documents != torch.roll(documents, 1, -1)] = -100  # a document's first token: no target of its own
    batch = {"input_ids": ids, "documents": documents, "labels": labels}
    report = check_batch(model, batch, certify_on=model)
    handle.remove()
    # the test's walk over layer 0's input: each (token, slot) in position order, an expert keeping
    # ceil(1.0 x 40 slots / 4 experts) = 10 of the row's routings
    chosen = model.layers[0].mlp.gate(inputs[0][0]).softmax(-1).topk(2).indices.reshape(-1).tolist()
    load_, dropped = [0] * 4, 0
    for e in chosen:
        load_[e] += 1
        dropped += load_[e] > math.ceil(1.0 * 40 / 4)
    first = report.experts[0]
    assert (first.implementation, first.capacity, first.tokens, first.top_k, first.experts) == ("generated", 1.0, 20,
                                                                                                 2, 4)
    assert first.dropped == dropped > 0
    assert not report.passed  # the documents take each other's slots: step[loss] sees it
    [line] = report.failures
    assert line.startswith("step[loss] failed on the replica: the packed loss ")
    # the router is named as the cause, not the attention (whose masks keep the documents apart)
    assert line.endswith(f"; layers.0.mlp routes with a capacity (1) and dropped {dropped} routing(s) on this "
                         "batch: packed documents take each other's slots")
    assert "attention implementation" not in line
