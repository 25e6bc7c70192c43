"""What a loss trains, read off its gradient: targets and weights of cross-entropies made by hand, read back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tensorcad.runtime.certification.step.loss_weights import (  # noqa: E402
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


def test_each_positions_residual_is_held_to_its_own_gradient():
    """A lightly weighted position off a cross-entropy's by 0.3% is seen, beside positions weighing 100 times more;
    a position weighted a millionth is still read exactly (its rounding is its own, not the heavy ones')."""
    targets = torch.tensor([[3, -100, 1, 4], [0, 2, -100, -100]])
    light = torch.tensor([[1.0, 0.0, 0.01, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    logits, gradient = gradient_of(targets, light)
    off = gradient.clone()
    mine = off[0, 2]
    others = torch.arange(mine.numel()) != 1  # every entry but the target's
    mine[others] += 3e-3 * float(mine.abs().max())
    assert trained_by(logits, gradient).exact and not trained_by(logits, off).exact
    tiny = light.clone()
    tiny[0, 2] = 1e-6
    logits, gradient = gradient_of(targets, tiny)
    trained = trained_by(logits, gradient)
    assert trained.exact and float(trained.weights[0, 2]) == pytest.approx(1e-6, rel=1e-4)


def test_weights_as_fractions_at_the_largest_denominator():
    assert fraction(1e-9) == "1/1000000000" and fraction(1 / 600_000_000) == "1/600000000"
    assert fraction(1 / 100) == "1/100" and fraction(5e-10) == "5e-10"  # 1/2,000,000,000: past 10^9, in digits


def test_positions_counted_as_a_documents_last_by_the_documents():
    """Every mistrained position of a loss that trains each output on its own token: its document's last exactly
    where the next position is another document's (or the row ends)."""
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2]])
    labels = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    logits = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    (gradient,) = torch.autograd.grad(F.cross_entropy(logits[0], labels[0]), logits)  # unshifted
    want_t = torch.full((1, 8), -100)
    want_t[0, [0, 1, 3, 4, 5]] = labels[0, [1, 2, 4, 5, 6]]
    want_w = (want_t != -100).double() / 5
    check = check_weights(trained_by(logits, gradient), want_t, want_w, documents, [(0, 0, 0, 3), (0, 1, 3, 7),
                                                                                     (0, 2, 7, 8)])
    assert len(check.mistrained) == 8
    for m in check.mistrained:
        assert m.last == (m.position == 7 or bool(documents[0, m.position + 1] != documents[0, m.position]))


def test_a_target_never_trained_leaves_the_shared_weights_gap_and_an_empty_batch_passes():
    logits, gradient = gradient_of(TARGETS, WEIGHTS)
    trained = trained_by(logits, gradient)
    want_t, want_w = TARGETS.clone(), WEIGHTS.clone()
    want_t[0, 1], want_w[0, 1] = 2, 0.25  # a target the loss never trains
    documents = torch.zeros(2, 4, dtype=torch.long)
    pieces = [(0, 0, 0, 4), (1, 0, 0, 4)]
    check = check_weights(trained, want_t, want_w, documents, pieces)
    assert [(m.position, m.got, m.want) for m in check.mistrained] == [(1, -100, 2)]
    assert check.largest < 1e-6  # the weights of the targets both train agree; the missing one is mistrained
    nothing = trained_by(logits, torch.zeros_like(gradient))
    none = torch.full((2, 4), -100)
    empty = check_weights(nothing, none, torch.zeros(2, 4, dtype=torch.float64), documents, pieces)
    assert empty.passed and empty.largest == 0.0 and empty.per_document == (0.0, 0.0)
    smoothed = gradient + 0.01 * (gradient != 0).any(-1, keepdim=True)
    unread = check_weights(trained_by(logits, smoothed), TARGETS, WEIGHTS, documents, pieces)
    assert not unread.exact and unread.to_json()["exact"] is False
