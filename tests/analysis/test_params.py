"""Parameter counts against the parameters of the built torch model, for every preset (scaled)."""

import pytest

from tensorcad.analysis.params import count_params
from tensorcad.design import load, preset_names

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", preset_names())
def test_total_equals_the_built_models_parameters(name):
    from tensorcad.runtime import build, scale

    small = scale(load(name), 150_000)
    model = build(small, form="eager")
    params = count_params(small)
    assert params.total == sum(p.numel() for p in model.parameters())  # a tied table counts once
    tables = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    assert params.embedding == tables
    # every weight a token multiplies: each nn.Linear's weight, the tied head included, and of a mixture of
    # experts' (E, ...) expert tensors the top_k experts' share
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    idle = 0
    for m in model.modules():
        if isinstance(getattr(m, "down_proj", None), torch.nn.Parameter):  # a MoE: experts as (E, ...) tensors
            own = [p for p in m.parameters(recurse=False)]
            weights, biases = (sum(p.numel() for p in own if p.dim() == d) for d in (3, 2))
            matrices += weights * m.top_k // m.n_experts
            idle += (weights + biases) * (m.n_experts - m.top_k) // m.n_experts
    assert params.matmul == matrices
    routes = any(node.kind == "moe" for node, _ in small.walk())
    assert params.active == (params.total - idle if routes else None)
