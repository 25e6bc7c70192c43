"""Total and active parameters of a mixture of experts, and its FLOPs a token, against counts by hand."""

from tensorcad.analysis.params import count_params
from tensorcad.analysis.report import analyze
from tensorcad.design import load
from moe_designs import BASE, design  # tests/, on sys.path (its conftest)

DIM, VOCAB, LAYERS = 32, 100, 2


def by_hand(experts, top_k, hidden, shared=0, gate=False, router_bias=False, matrices=3):
    """(total, active, matmul) of the two-layer design, written out shape by shape."""
    attention = 4 * DIM * DIM  # q, k, v, o of 4 heads of 8
    expert = matrices * DIM * hidden
    router = DIM * experts
    shared_w = 3 * DIM * shared
    layer = attention + 2 * DIM + router + (experts if router_bias else 0) + experts * expert + shared_w + (
        DIM if gate else 0)
    total = 2 * VOCAB * DIM + LAYERS * layer + DIM
    idle = LAYERS * (experts - top_k) * expert
    matmul = VOCAB * DIM + LAYERS * (attention + router + top_k * expert + shared_w + (DIM if gate else 0))
    return total, total - idle, matmul


def test_total_and_active_count_every_expert_and_the_visited_ones():
    p = count_params(load(design(BASE)))
    assert (p.total, p.active, p.matmul) == by_hand(4, 2, 16)


def test_shared_experts_their_gate_and_the_router_bias():
    p = count_params(load(design({**BASE, "shared": {"hidden": 8}, "shared_gate": True, "router_bias": True,
                                  "router": "sigmoid"})))
    assert (p.total, p.active, p.matmul) == by_hand(4, 2, 16, shared=8, gate=True, router_bias=True)


def test_a_two_matrix_expert_and_top_k_equal_to_experts_is_dense():
    p = count_params(load(design({"experts": 3, "top_k": 3, "hidden": 16, "activation": "gelu"})))
    assert (p.total, p.active, p.matmul) == by_hand(3, 3, 16, matrices=2)
    assert p.active == p.total


def test_active_appears_only_where_a_design_routes():
    assert "active" in count_params(load(design(BASE))).to_json()
    assert count_params(load("llama-3-8b")).active is None
    assert "active" not in count_params(load("llama-3-8b")).to_json()


def test_the_forward_flops_count_the_router_and_top_k_experts_not_the_rest():
    moe = analyze(load(design(BASE))).flops.fwd_per_token
    dense = analyze(load(design({**BASE, "top_k": 4}))).flops.fwd_per_token
    # two more experts of 3 x 32 x 16 weights in each of 2 layers, 2 FLOPs each
    assert dense - moe == 2 * LAYERS * 2 * 3 * DIM * 16
