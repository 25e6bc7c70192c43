"""guard/experts.py to the letter (issue 44's mutation): each path's line and JSON, the summary's phrase, the
padding counted only on calls that routed the whole batch, transformers' experts called by keyword, and a
generated MoE over two rows, each row's capacity walked by the test."""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tensorcad.design import load  # noqa: E402
from tensorcad.guard.experts import (  # noqa: E402
    ExpertsCall,
    _transformers_experts,
    experts_recording,
    experts_summary,
    with_padding,
)

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
from moe_designs import BASE, design  # noqa: E402  tests/, on sys.path
from test_guard_experts import qwen3_moe, switch_layer  # noqa: E402


def test_a_capacity_path_in_words_and_json():
    call = ExpertsCall("router", "switch", 3, 16, 1, 4, dropped=5)
    assert not call.dropless and ExpertsCall("e", "eager", None, 1, 1, 2).dropless
    assert call.line() == "router: switch experts, capacity 3, 5 routing(s) dropped; 16 tokens routed to top-1 of 4"
    assert call.to_json() == {"layer": "router", "implementation": "switch", "capacity": 3, "tokens": 16,
                              "topK": 1, "experts": 4, "dropped": 5, "padding": 0}
    padded = ExpertsCall("m", "generated", 1.25, 20, 2, 8, dropped=0, padding=4)
    assert padded.line() == ("m: generated experts, capacity 1.25, 0 routing(s) dropped; 20 tokens routed to top-2 "
                             "of 8, 4 of them padding")


def test_the_summary_names_each_kind_of_path_once_with_its_layers():
    calls = [ExpertsCall("a", "eager", None, 9, 2, 4), ExpertsCall("b", "switch", 3, 9, 1, 4),
             ExpertsCall("c", "eager", None, 9, 2, 4), ExpertsCall("d", "eager", None, 9, 2, 8)]
    assert experts_summary(calls) == ("2 layers dropless (eager), top-2 of 4, 1 layer capacity 3 (switch), top-1 of "
                                      "4, 1 layer dropless (eager), top-2 of 8")
    assert experts_summary([]) == ""


def test_padding_is_counted_on_the_calls_that_routed_the_whole_batch():
    whole, part = ExpertsCall("a", "eager", None, 18, 2, 4), ExpertsCall("b", "eager", None, 6, 2, 4)
    assert with_padding([whole, part], 3, 18) == [ExpertsCall("a", "eager", None, 18, 2, 4, padding=3), part]
    assert with_padding([whole, part], 0, 18) == [whole, part]


def test_transformers_experts_called_by_keyword_and_without_a_config():
    model = qwen3_moe()
    experts = model.model.layers[0].mlp.experts
    hidden = torch.randn(5, 32)
    index = torch.tensor([[0, 1], [2, 3], [1, 2], [0, 3], [3, 1]])
    weights = torch.full((5, 2), 0.5)
    calls = []
    with torch.no_grad(), experts_recording(experts, calls):
        experts(hidden_states=hidden, top_k_index=index, top_k_weights=weights)
    assert calls == [ExpertsCall("", calls[0].implementation, None, 5, 2, 4)]
    calls.clear()
    with torch.no_grad(), experts_recording(experts, calls):
        experts(hidden, index, top_k_weights=weights)  # two positional, the weights by keyword
    assert [(c.tokens, c.top_k) for c in calls] == [(5, 2)]
    # what the hook reads, on a module whose config names no implementation and which names no count: transformers'
    # default (eager), the experts counted from their stacked weights (the forward itself needs the config)
    experts.config, experts.num_experts = None, None
    assert _transformers_experts("x", experts, (hidden, index, weights), {}) == ExpertsCall("x", "eager", None, 5, 2, 4)
    assert _transformers_experts("x", experts, (hidden[None],), {"top_k_index": index}).tokens == 5
    del experts.config, experts.num_experts  # neither attribute at all
    assert _transformers_experts("y", experts, (), {"hidden_states": hidden, "top_k_index": index}) == \
        ExpertsCall("y", "eager", None, 5, 2, 4)
    with experts_recording(object(), calls):  # no modules to hook: nothing recorded, nothing raised
        pass
    assert len(calls) == 1


def _generated_moe(**moe):
    from tensorcad.runtime import build

    torch.manual_seed(6)
    return build(load(design({**BASE, **moe})), form="eager").eval().layers[0].mlp


def test_a_generated_moe_over_two_rows_drops_what_each_rows_walk_drops():
    moe = _generated_moe(capacity=1.0, drop="position", capacity_scope="row")
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(7))
    calls = []
    with torch.no_grad(), experts_recording(moe, calls):
        moe(x)
    slots = math.ceil(1.0 * 10 * 2 / 4)  # each row's routings over the experts
    dropped = 0
    for row in moe.gate(x).topk(2, dim=-1).indices.tolist():
        load_ = [0] * 4
        for token in row:
            for e in token:
                load_[e] += 1
                dropped += load_[e] > slots
    assert dropped > 0
    assert calls == [ExpertsCall("", "generated", 1.0, 20, 2, 4, dropped=dropped)]
    dropless = _generated_moe()
    calls.clear()
    with torch.no_grad(), experts_recording(dropless, calls):
        dropless(x)
    assert calls == [ExpertsCall("", "generated", None, 20, 2, 4, dropped=0)]


def test_switchs_router_is_recorded_under_its_name():
    layer = switch_layer()
    calls = []
    with torch.no_grad(), experts_recording(layer, calls):
        layer(torch.randn(1, 5, 16))
    assert [(c.layer, c.implementation, c.tokens) for c in calls] == [("router", "switch", 5)]
