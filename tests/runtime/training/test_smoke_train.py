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


def _smoke_step(design, rows: int = 2):
    """smoke-train's model (scaled, built, seeded, the eager form it trains) and one of its batches, as a dict."""
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale
    from tensorcad.runtime.building.subject import DesignModel
    from tensorcad.runtime.training import smoke

    small = scale(design, params=150_000)
    module = build(small, form="eager", seed=0)
    sort = sort_batch(np.random.default_rng(0), rows=rows, seq=min(smoke.MAX_SEQ, small.context), digits=10)
    batch = {"input_ids": sort.ids, "documents": sort.documents, "position_ids": sort.positions,
             "labels": smoke.sort_labels(sort)}
    return DesignModel(module, small), module, sort, batch


def _by_hand(module, sort):
    """smoke-train's loss on the packed rows, and each sorting problem run alone: its scored targets' mean."""
    from tensorcad.runtime.training import smoke

    packed = smoke._loss(module, sort, True, False)  # the loss smoke-train's loop takes a step on
    total, count = 0.0, 0
    for r in range(sort.ids.shape[0]):
        for d in torch.unique(sort.documents[r]).tolist():
            where = torch.nonzero(sort.documents[r] == d).flatten()
            first, end = int(where[0]), int(where[-1]) + 1
            scored = sort.scored[r, first:end - 1]
            if not scored.any():
                continue  # the filler at a row's end is never scored
            ids = sort.ids[r:r + 1, first:end]
            logits = module(ids, documents=torch.zeros_like(ids))[0, :-1]
            total = total + torch.nn.functional.cross_entropy(logits[scored], ids[0, 1:][scored], reduction="sum")
            count += int(scored.sum())
    return packed, total / count


def test_the_smoke_train_step_is_certified_under_its_declared_reduction():
    from tensorcad.testing import assert_step_faithful
    from tensorcad.runtime.training import smoke

    model, module, sort, batch = _smoke_step(tensorcad.load("nano-sort"))
    packed, alone = _by_hand(module, sort)
    grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(x, list(module.parameters()))])
             for x in (packed, alone)]
    assert abs(packed.item() - alone.item()) < 1e-5 and float((grads[0] - grads[1]).norm()) < 1e-4 * float(grads[1].norm())
    assert smoke.LOSS_REDUCTION == "token"
    report = assert_step_faithful(model, batch, loss=smoke.next_token_loss, reduction=smoke.LOSS_REDUCTION,
                                  shift="shifted", accumulation="num_items_in_batch")
    assert report.passed and len(report.results) == 5
    assert report.results["step[loss]"].packed == pytest.approx(packed.item(), abs=1e-6)
    assert report.results["step[labels]"].supervised == int(sort.scored.sum())


def test_a_design_whose_mask_drops_the_document_conjunct_fails_the_step():
    from tensorcad.testing import CertificateError, assert_step_faithful
    from tensorcad.runtime.training import smoke

    raw = tensorcad.load("nano-sort").to_dict()
    attention = raw["nodes"][1]["params"]["block"]["params"]["attention"]
    del attention["mask"], raw["nodes"][1]["in"]["doc"]  # causal only: every problem sees the ones before it
    model, module, sort, batch = _smoke_step(tensorcad.load(raw))
    with torch.no_grad():
        packed, alone = _by_hand(module, sort)
    assert abs(packed.item() - alone.item()) > 1e-3  # the verdict, by hand
    with pytest.raises(CertificateError) as caught:
        assert_step_faithful(model, batch, loss=smoke.next_token_loss, reduction=smoke.LOSS_REDUCTION,
                             shift="shifted", accumulation="num_items_in_batch")
    # the labels are the same right ones: everything the model computes with them fails
    assert set(caught.value.report.failures) == {"step[loss]", "step[gradients]", "step[accumulation]",
                                                 "eval[parity]"}
