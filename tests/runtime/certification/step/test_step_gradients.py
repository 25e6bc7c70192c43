"""The step's gradients, held to torch.autograd.grad of each document run alone and reduced in the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from step_models import MixedBackward, TinyLM, alone_token_losses, batch_of, by_hand, row_mean_loss  # noqa: E402

from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.gradients import check_step_gradients, compare_gradients  # noqa: E402
from tensorcad.runtime.certification.step.loss import check_loss  # noqa: E402
from tensorcad.runtime.certification.step.loop import step_of  # noqa: E402

LENGTHS = [[3, 9, 2, 6], [14, 6]]


def grads(model, loss):
    return torch.autograd.grad(loss, list(model.parameters()))


def norm(gs):
    return float(torch.cat([g.reshape(-1) for g in gs]).norm())


def test_the_packed_gradient_is_the_documents_alone():
    model, batch = TinyLM(), batch_of(LENGTHS)
    reference = grads(model, by_hand("token", alone_token_losses(model, batch)))
    result = check_step_gradients(step_of(model), read_batch(batch))
    assert result.passed, result.message()
    c = result.comparison
    assert c.reference_norm == pytest.approx(norm(reference), rel=1e-6)
    assert c.packed_norm == pytest.approx(norm(reference), rel=1e-5)
    assert [g.name for g in c.gaps] == [n for n, _ in model.named_parameters()]
    assert c.worst().gap < 1e-5 and c.tolerance == 1e-3 and c.total_gap < 1e-5 and not c.beyond
    worst = c.worst()
    assert result.message() == (f"gradients equal the documents' alone under `token`: 6 parameters, the largest "
                                f"relative gap {worst.gap:.3g} ({worst.name}; tolerance 0.001); gradient norm "
                                f"{c.packed_norm:.6g} packed, {c.reference_norm:.6g} alone")
    assert result.to_json() == {
        "passed": True, "reduction": "token", "note": "", "parameters": 6, "beyond": 0, "tolerance": 1e-3,
        "packedNorm": c.packed_norm, "referenceNorm": c.reference_norm, "gap": c.total_gap,
        "worst": {"name": worst.name, "gap": worst.gap, "packedNorm": worst.packed_norm,
                  "referenceNorm": worst.reference_norm}, "message": result.message()}
    assert check_step_gradients(step_of(model), read_batch(batch), rtol=1e-9).comparison.tolerance == 1e-9


def test_a_wrong_reduction_moves_the_gradient_and_the_worst_parameter_is_named():
    model, batch = TinyLM(), batch_of(LENGTHS)
    logits = model(batch["input_ids"], batch["documents"], batch["position_ids"])
    packed = grads(model, row_mean_loss(logits, batch["labels"]))
    reference = grads(model, by_hand("token", alone_token_losses(model, batch)))
    names = [n for n, _ in model.named_parameters()]
    gaps = {n: float((p - r).norm() / r.norm()) for n, p, r in zip(names, packed, reference)}
    worst = max(gaps, key=gaps.get)
    assert gaps[worst] > 1e-2  # the verdict, by hand
    result = check_step_gradients(step_of(model, row_mean_loss), read_batch(batch))
    assert not result.passed and result.comparison.worst().name == worst
    assert result.comparison.worst().gap == pytest.approx(gaps[worst], rel=1e-3)
    total = float(torch.cat([(p - r).reshape(-1) for p, r in zip(packed, reference)]).norm()) / norm(reference)
    assert result.comparison.total_gap == pytest.approx(total, rel=1e-3)
    c = result.comparison
    assert result.message() == (
        f"the packed step's gradient is not the documents' alone under `token`: {worst} differs by "
        f"{c.worst().gap:.3g} of its norm (tolerance 0.001), and {len(c.beyond) - 1} more parameters beyond the "
        f"tolerance; gradient norm {c.packed_norm:.6g} packed, {c.reference_norm:.6g} alone (relative gap "
        f"{c.total_gap:.3g})")
    assert c.packed_norm == pytest.approx(norm(packed), rel=1e-5) and len(c.beyond) == 6
    assert check_step_gradients(step_of(model, row_mean_loss), read_batch(batch), "sequence").passed


def test_a_backward_that_mixes_documents_fails_the_gradients_though_the_loss_holds():
    model, batch = MixedBackward(), batch_of(LENGTHS)
    read = read_batch(batch)
    assert check_loss(step_of(model), read).passed  # the forward is exact
    result = check_step_gradients(step_of(model), read)
    assert not result.passed and result.comparison.total_gap > 1e-2


def test_one_parameter_beyond_is_said_alone_and_the_form_is_noted():
    class WithForm(TinyLM):
        form = "flex"

    model, batch = WithForm(), batch_of(LENGTHS)
    result = check_step_gradients(step_of(model), read_batch(batch))
    assert result.passed and result.note == "the eager form: FlexAttention has no backward on CPU"
    assert result.message().endswith("alone (the eager form: FlexAttention has no backward on CPU)")
    from tensorcad.runtime.certification.step.gradients import GradientComparison, ParameterGap, StepGradientResult

    gaps = (ParameterGap("a", 0.5, 1.0, 2.0), ParameterGap("b", 0.0, 1.0, 1.0))
    one = StepGradientResult(GradientComparison(gaps, 0.1, 3.0, 4.0, 0.25), "document", "a note")
    assert one.message() == ("the packed step's gradient is not the documents' alone under `document`: a differs by "
                             "0.5 of its norm (tolerance 0.1); gradient norm 3 packed, 4 alone (relative gap 0.25) "
                             "(a note)")


def test_gaps_are_relative_with_a_floor_and_nan_is_infinite():
    p = [torch.nn.Parameter(torch.zeros(2)) for _ in range(4)]
    reference = [torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0]), None, torch.tensor([1e-9, 0.0])]
    packed = [torch.tensor([3.0, 4.5]), torch.tensor([1e-3, 0.0]), None, torch.tensor([float("nan"), 0.0])]
    c = compare_gradients(["a", "b", "c", "d"], packed, reference, p, 0.2)
    gap = {g.name: g.gap for g in c.gaps}
    assert gap["a"] == pytest.approx(0.5 / 5)
    assert gap["b"] == pytest.approx(1e-3 / (5 * 1e-3))  # floored at a thousandth of the largest norm (5)
    assert gap["c"] == 0.0 and gap["d"] == float("inf")
    assert [g.name for g in c.beyond] == ["b", "d"] and not c.passed
    assert c.reference_norm == pytest.approx(5.0) and c.to_json()["beyond"] == 2
    assert compare_gradients(["a"], [torch.tensor([3.0, 4.0])], [reference[0]], p[:1], 0.1).passed


def test_a_declared_document_mean_held_to_its_own_loss():
    model, batch = TinyLM(), batch_of(LENGTHS)

    def document_mean(logits, labels):  # each document's mean, then their mean: the boundaries known
        means = []
        for r, first, end in [(0, 0, 3), (0, 3, 12), (0, 12, 14), (0, 14, 20), (1, 0, 14), (1, 14, 20)]:
            means.append(F.cross_entropy(logits[r, first:end - 1], labels[r, first + 1:end]))
        return torch.stack(means).mean()

    assert check_step_gradients(step_of(model, document_mean), read_batch(batch), "document").passed
    assert not check_step_gradients(step_of(model, document_mean), read_batch(batch), "token").passed


def test_a_parameter_the_loss_never_reaches_has_no_gradient_either_way():
    class WithSpare(TinyLM):  # a trainable parameter the forward does not use (a head tied off, a frozen branch)
        def __init__(self):
            super().__init__()
            self.spare = torch.nn.Parameter(torch.ones(3))

    model, batch = WithSpare(), batch_of(LENGTHS)
    result = check_step_gradients(step_of(model), read_batch(batch))
    assert result.passed, result.message()
    spare = {g.name: g for g in result.comparison.gaps}["spare"]
    assert (spare.gap, spare.packed_norm, spare.reference_norm) == (0.0, 0.0, 0.0)


def test_the_gradients_are_taken_in_train_mode():
    """A model that leaks across documents only in eval mode passes: the step's gradients are training's."""
    model, batch = TinyLM(leak_in_eval=True), batch_of(LENGTHS)
    model.eval()
    assert check_step_gradients(step_of(model), read_batch(batch)).passed
    assert not model.training


def test_two_and_three_parameters_beyond_are_counted_in_words():
    from tensorcad.runtime.certification.step.gradients import GradientComparison, ParameterGap, StepGradientResult

    for beyond, said in ((2, "and 1 more parameter beyond"), (3, "and 2 more parameters beyond")):
        gaps = tuple(ParameterGap(f"p{i}", 0.5 + i, 1.0, 1.0) for i in range(beyond))
        result = StepGradientResult(GradientComparison(gaps, 0.1, 3.0, 4.0, 0.25), "token")
        assert f"p{beyond - 1} differs by {beyond - 0.5:.3g} of its norm (tolerance 0.1), {said} the tolerance; " \
               "gradient norm 3 packed, 4 alone (relative gap 0.25)" in result.message()


def test_norms_and_the_total_gap_of_small_gradients_by_hand():
    p = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
    reference = [torch.tensor([0.03, 0.04]), torch.tensor([0.0])]  # norm 0.05: under 1
    packed = [torch.tensor([0.03, 0.05]), torch.tensor([0.002])]
    c = compare_gradients(["a", "b"], packed, reference, p, 0.1)
    assert c.reference_norm == pytest.approx(0.05) and c.packed_norm == pytest.approx((0.03**2 + 0.05**2 + 0.002**2) ** 0.5)
    assert c.total_gap == pytest.approx((0.01**2 + 0.002**2) ** 0.5 / 0.05)
    a, b = c.gaps
    assert (a.packed_norm, a.reference_norm) == (pytest.approx((0.03**2 + 0.05**2) ** 0.5), pytest.approx(0.05))
    assert (b.packed_norm, b.reference_norm) == (pytest.approx(0.002), 0.0)
    assert b.gap == pytest.approx(0.002 / (1e-3 * 0.05))  # floored at a thousandth of the largest norm
