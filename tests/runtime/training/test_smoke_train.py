"""smoke-train: packed sorting problems, a falling loss, and sorting learned."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.training.smoke import PROBLEM, smoke_train, sort_batch  # noqa: E402


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_sort_batch_packs_problems_with_known_boundaries():
    batch = sort_batch(np.random.default_rng(0), rows=3, seq=60, digits=10)
    length = 2 * PROBLEM + 1
    for row in range(3):
        for k in range(60 // length):
            doc = batch.ids[row, k * length:(k + 1) * length]
            assert doc[PROBLEM] == 10  # SEP
            assert torch.equal(doc[PROBLEM + 1:], torch.sort(doc[:PROBLEM]).values)
            assert (batch.documents[row, k * length:(k + 1) * length] == k).all()
            assert torch.equal(batch.positions[row, k * length:(k + 1) * length], torch.arange(length))
    # each problem scores the SEP and the sorted digits but the last: they predict a sorted digit
    assert int(batch.scored.sum()) == 3 * (60 // length) * PROBLEM
    assert not batch.scored[:, (60 // length) * length:].any()  # the filler is never scored


def test_a_short_run_on_nano_sort_lowers_the_loss():
    result = smoke_train("nano-sort", steps=30, params=150_000, rows=4)
    assert result.final_loss < result.initial_loss
    assert result.passed and len(result.losses) == 30
    data = result.to_json()
    assert data["lossFell"] and 0 <= data["tokenAccuracy"] <= 1 and data["chance"] == pytest.approx(0.1)
    json.dumps(data)


def test_a_design_without_documents_trains_too():
    result = smoke_train("gpt2-small", steps=20, params=300_000, rows=4)
    assert result.final_loss < result.initial_loss


def test_bad_steps_are_refused():
    with pytest.raises(TensorcadError) as e:
        smoke_train("nano-sort", steps=0)
    assert e.value.path == "steps"


def test_a_design_with_two_token_inputs_is_told_what_it_needs():
    from dataclasses import replace

    from tensorcad.design.model import Input

    nano = tensorcad.load("nano-sort")
    design = replace(nano, inputs=nano.inputs + (Input("extra", "tokens", "inputs.extra"),))
    with pytest.raises(TensorcadError) as e:
        smoke_train(design, steps=1)
    assert e.value.path == "inputs" and "Train it on your own data" in e.value.message


@pytest.mark.slow
def test_nano_sort_learns_to_sort():
    result = smoke_train("nano-sort")  # 300 steps at the default scale
    assert result.final_loss < 0.2 * result.initial_loss
    assert result.token_accuracy > 0.8  # chance is 0.1
    assert result.problem_accuracy > 0.3
