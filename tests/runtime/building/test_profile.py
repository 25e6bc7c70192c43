"""FlopCounterMode's count of the eager form, split into linear layers and attention."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.analysis.params import count_params  # noqa: E402
from tensorcad.packing import Packing, draw  # noqa: E402
from tensorcad.runtime.building.generated import build  # noqa: E402
from tensorcad.runtime.building.profile import count_flops, dense_attention_flops, profile  # noqa: E402
from tensorcad.runtime.building.scaling import scale  # noqa: E402


@pytest.fixture(scope="module")
def nano():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        design = scale(tensorcad.load("nano-sort"), params=150_000)
        model = build(design, form="flex")
        documents, _ = draw(2, 96, 24, 1.0, 0)
        inputs = {"ids": torch.randint(0, model.config.vocab_size, (2, 96)),
                  "documents": torch.from_numpy(documents)}
        yield design, model, inputs


def test_linear_flops_equal_the_analysis_and_the_weights(nano):
    design, model, inputs = nano
    p = profile(model, design, inputs, Packing(24, 1.0))
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert p.matmul == p.expected_matmul == 2 * count_params(design).matmul * 2 * 96 == 2 * weights * 2 * 96
    assert p.passed and p.other == 0


def test_attention_is_dense_in_the_eager_form(nano):
    design, model, inputs = nano
    p = profile(model, design, inputs, Packing(24, 1.0))
    c = model.config
    assert p.attention == p.dense_attention == c.n_layer * 4 * 96 * 96 * c.head_dim * c.n_head * 2
    assert p.dense_attention == dense_attention_flops(design, 2, 96)
    # the analysis's kept scores are a fraction of the dense figure; at 96 tokens one
    # 128 x 128 block a row holds more than the 96 x 96 the eager form computes
    assert 0 < p.kept_attention < p.dense_attention < p.block_attention
    assert p.block_attention == c.n_layer * 4 * 128 * 128 * c.head_dim * c.n_head * 2 / 96 * 96


def test_profiling_leaves_the_form_as_it_was(nano):
    _, model, inputs = nano
    model.form = "flex"
    count_flops(model, inputs)
    assert model.form == "flex"
