"""What a loss trains, read off its gradient: targets and weights of cross-entropies made by hand, read back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tensorcad.runtime.certification.loss_weights import (  # noqa: E402
    Mistrained,
    check_weights,
    expected_grid,
    fraction,
    trained_by,
)

TARGETS = torch.tensor([[3, -100, 1, 4], [0, 2, -100, -100]])
WEIGHTS = torch.tensor([[0.5, 0.0, 0.125, 0.25], [1 / 3, 1 / 9, 0.0, 0.0]], dtype=torch.float64)


def gradient_of(targets, weights, seed=0):
    logits = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten().clamp_min(0), reduction="none").reshape(2, 4)
    (gradient,) = torch.autograd.grad((per * weights.float()).sum(), logits)
    return logits, gradient


def test_a_weighted_cross_entropy_is_read_back_exactly():
    logits, gradient = gradient_of(TARGETS, WEIGHTS)
    trained = trained_by(logits, gradient)
    assert trained.exact
    assert trained.targets.tolist() == TARGETS.tolist()
    assert torch.allclose(trained.weights, WEIGHTS, rtol=1e-6, atol=0)
    assert trained.weights.dtype == torch.float64


def test_a_gradient_that_is_no_cross_entropys_is_not_read():
    logits, gradient = gradient_of(TARGETS, WEIGHTS)
    smoothed = gradient + 0.01 * (gradient != 0).any(-1, keepdim=True)  # a z-loss's or label smoothing's share
    assert not trained_by(logits, smoothed).exact
    half = trained_by(logits.detach().bfloat16(), gradient.bfloat16())  # three digits: not read
    assert not half.exact and half.targets.tolist() == TARGETS.tolist()
    nothing = trained_by(logits, torch.zeros_like(gradient))
    assert nothing.exact and (nothing.targets == -100).all() and (nothing.weights == 0).all()


def test_weights_read_as_fractions():
    assert [fraction(w) for w in (1 / 9, 1 / 14, 0.25, 0.0, 2 / 9, 9 / 4, 10 / 81)] == [
        "1/9", "1/14", "1/4", "0", "2/9", "9/4", "0.123457"]
    assert fraction(1 / 9 * (1 + 1e-7)) == "1/9" and fraction(1 / 9 * (1 + 1e-5)) == "0.111112"
    assert fraction(1e-10) == "1e-10" and fraction(-0.5) == "-0.5"


def test_the_expected_grid_and_every_way_a_position_is_trained_otherwise():
    documents = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]])
    pieces = [(0, 0, 0, 2), (0, 1, 2, 4), (1, 0, 0, 4)]
    where = [(0, torch.tensor([0])), (0, torch.tensor([2])), (1, torch.tensor([0, 1]))]
    labels = torch.tensor([[3, 7, 1, 7], [0, 2, 7, 7]])
    want_t, want_w = expected_grid((2, 4), where, (0.5, 0.125, torch.tensor([1 / 3, 1 / 9])), labels)
    assert want_t.tolist() == [[3, -100, 1, -100], [0, 2, -100, -100]]
    assert want_w[0].tolist() == [0.5, 0, 0.125, 0] and want_w[1, :2].tolist() == pytest.approx([1 / 3, 1 / 9])
    zero_t, _ = expected_grid((2, 4), where, (0.0, 0.125, 0.5), labels)  # weighed 0: no target
    assert zero_t[0].tolist() == [-100, -100, 1, -100]

    logits, gradient = gradient_of(TARGETS, WEIGHTS)
    check = check_weights(trained_by(logits, gradient), want_t, want_w, documents, pieces)
    (extra,) = check.mistrained  # position 3 of row 0, its document's last, trained on 4
    assert extra == Mistrained(0, 3, 1, 4, -100, True) and not check.passed
    assert extra.message() == ("the loss trains position 3 of row 0 (document 1, its last) on token 4, a target the "
                               "documents alone do not have: the next document's first token")
    assert check.largest < 1e-6 and check.per_document == pytest.approx((0.5, 0.125, (1 / 3 + 1 / 9) / 2))
    assert check.to_json() == {"exact": True, "passed": False, "mistrained": 1, "largestGap": check.largest,
                               "first": {"row": 0, "position": 3, "document": 1, "got": 4, "want": -100},
                               "perDocument": ["1/2", "1/8", "2/9"]}
    right_t, right_w = want_t.clone(), want_w.clone()
    right_t[0, 3], right_w[0, 3] = 4, 0.25
    assert check_weights(trained_by(logits, gradient), right_t, right_w, documents, pieces).passed
    off = right_w.clone()
    off[0, 0] = 0.5 * (1 + 1e-3)  # a weight a thousandth off
    gapped = check_weights(trained_by(logits, gradient), right_t, off, documents, pieces)
    assert not gapped.passed and gapped.largest == pytest.approx(1e-3 / (1 + 1e-3), rel=1e-3)


def test_each_way_a_position_is_mistrained_is_said():
    assert Mistrained(1, 5, 2, 9, -100, False).message() == (
        "the loss trains position 5 of row 1 (document 2) on token 9, a target the documents alone do not have")
    assert Mistrained(0, 4, 1, -100, 6, False).message() == (
        "the loss never trains position 4 of row 0 (document 1), which the documents alone train on token 6")
    assert Mistrained(0, 4, 1, 3, 6, True).message() == (
        "the loss trains position 4 of row 0 (document 1, its last) on token 3 where the documents alone train it "
        "on 6: does the loss shift the labels as they are written?")
