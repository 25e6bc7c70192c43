"""trace: each op's FLOPs, PyTorch's count beside the closed form and the analysis."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from tensorcad.runtime.training.tracing import render, trace  # noqa: E402


@pytest.fixture(scope="module")
def nano():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace("nano-sort", seq=64, params=150_000)


def test_every_op_agrees_and_the_linear_total_is_the_analysis(nano):
    assert nano.passed
    assert nano.linear == nano.analysis_matmul
    assert sum(op.flops for op in nano.ops) == nano.total


def test_attention_rows_show_dense_and_kept(nano):
    attention = [op for op in nano.ops if op.kind == "attention"]
    linear = [op for op in nano.ops if op.kind == "Linear"]
    assert len(attention) == 4  # nano-sort's four layers
    assert len(linear) == 4 * 7 + 1  # q, k, v, o and three MLP matrices a layer, and the head
    for op in attention:
        B, H, T, D = op.input_shape
        assert op.flops == 4 * B * H * T * T * D
        assert 0 < op.kept < op.flops
    assert sum(op.kept for op in attention) == pytest.approx(nano.analysis_attention, rel=1e-9)


def test_json_and_table(nano):
    data = nano.to_json()
    assert data["passed"] and len(data["ops"]) == len(nano.ops)
    assert render(nano).row_count == len(nano.ops) + 2
