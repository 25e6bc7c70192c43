"""MTP parameters counted apart, against the parameters of DeepSeek-V3's MTP modules built around each preset."""

from __future__ import annotations

import pytest

from tensorcad.analysis.params import count_params, mtp_params
from tensorcad.design import load
from tensorcad.errors import TensorcadError

torch = pytest.importorskip("torch")

PRESETS = ("llama-3-8b-documents", "gpt2-small", "mistral-7b")


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("depth", [1, 2])
def test_counted_apart_equals_the_built_modules(name, depth):
    from tensorcad.runtime import build, scale
    from tensorcad.runtime.building.mtp import with_mtp

    small = scale(load(name), 150_000)
    head = next(n for n in small.nodes if n.id == small.output)
    names = {"embedding": next(n.id for n in small.nodes if n.kind == "embedding"), "head": head.id,
             "norm": head.sources["x"], "blocks": next(n.id for n in small.nodes if n.kind == "stack")}
    model = with_mtp(build(small, form="eager"), depth, **names)
    counted = mtp_params(small, depth)
    assert counted.total == sum(p.numel() for p in model.mtp.parameters())
    assert counted.embedding == 0  # the embedding is shared
    # every weight a token multiplies at each depth: the module's linears, and the shared head again
    own = sum(m.weight.numel() for m in model.mtp.modules() if isinstance(m, torch.nn.Linear))
    assert counted.matmul == own + depth * model.model.get_submodule(head.id).weight.numel()
    # and apart: the model's own count does not move
    assert count_params(small).total == sum(p.numel() for p in model.model.parameters())


def test_a_bad_depth_or_design_is_refused():
    design = load("llama-3-8b")
    with pytest.raises(TensorcadError, match="^depth"):
        mtp_params(design, 0)
    with pytest.raises(TensorcadError, match="^depth"):
        mtp_params(design, True)
