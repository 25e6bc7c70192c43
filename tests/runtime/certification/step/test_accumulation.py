"""Gradient accumulation over micro-batches, held to the whole batch's documents alone, computed in the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from step_models import TinyLM, alone_token_losses, batch_of, by_hand  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step.accumulation import check_accumulation  # noqa: E402
from tensorcad.runtime.certification.step.batch import read_batch, split_batch  # noqa: E402
from tensorcad.runtime.certification.step.loop import step_of  # noqa: E402

# Two micro-batches as a loop gets them: 7 targets in the first, 36 in the second.
FIRST, SECOND = [[3, 6]], [[12, 10, 8, 9, 2]]


def mean_loss(model, batch, num_items=None):
    logits = model(batch["input_ids"], batch["documents"], batch["position_ids"])
    targets = batch["labels"][:, 1:]
    kept = targets != -100
    per = F.cross_entropy(logits[:, :-1][kept], targets[kept], reduction="sum")
    return per / (int(kept.sum()) if num_items is None else num_items)


def gradient(model, loss):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])


def test_micro_batches_each_averaged_on_its_own_fail_with_the_relative_gap():
    model = TinyLM()
    micro = [batch_of(FIRST, seed=1), batch_of(SECOND, seed=2)]
    # by hand: the loop's sum of (each micro-batch's mean / 2), and the whole batch's token mean of its documents
    accumulated = sum(gradient(model, mean_loss(model, b) / 2) for b in micro)
    losses = alone_token_losses(model, micro[0]) + [(r + 1, t) for r, t in alone_token_losses(model, micro[1])]
    reference = gradient(model, by_hand("token", losses))
    gap = float((accumulated - reference).norm() / reference.norm())
    assert gap > 1e-2  # the verdict
    result = check_accumulation(step_of(model), [read_batch(b) for b in micro], accumulation="mean")
    assert not result.passed and result.targets == (7, 36)
    assert result.comparison.total_gap == pytest.approx(gap, rel=1e-3)
    message = result.message()
    assert message.startswith(f"2 micro-batches accumulated (each micro-batch's loss its own mean, over 2) give a "
                              f"gradient {gap:.3g} of its norm away")
    assert ("the micro-batches hold 7 and 36 targets: averaged each on its own and divided by 2, a target weighs "
            "1/14 and 1/72, where the batch's token mean weighs each 1/43; pass num_items_in_batch=43") in message
    c = result.comparison
    assert result.to_json() == {
        "passed": False, "accumulation": "mean", "reduction": "token", "microBatches": 2, "targets": [7, 36],
        "note": "", "parameters": 6, "beyond": len(c.beyond), "tolerance": 1e-3, "packedNorm": c.packed_norm,
        "referenceNorm": c.reference_norm, "gap": c.total_gap, "worst": c.worst().to_json(),
        "message": message}
    assert message == (f"2 micro-batches accumulated (each micro-batch's loss its own mean, over 2) give a gradient "
                       f"{c.total_gap:.3g} of its norm away from the whole batch's documents alone under `token` "
                       f"(relative gap; the largest a parameter's, {c.worst().name}, {c.worst().gap:.3g}; tolerance "
                       "0.001); the micro-batches hold 7 and 36 targets: averaged each on its own and divided by 2, "
                       "a target weighs 1/14 and 1/72, where the batch's token mean weighs each 1/43; pass "
                       "num_items_in_batch=43 to every micro-batch's loss (Trainer does when the model's forward "
                       "takes it)")


def test_num_items_in_batch_gives_the_whole_batchs_gradient():
    model = TinyLM()
    micro = [batch_of(FIRST, seed=1), batch_of(SECOND, seed=2)]
    accumulated = sum(gradient(model, mean_loss(model, b, num_items=43)) for b in micro)
    losses = alone_token_losses(model, micro[0]) + [(r + 1, t) for r, t in alone_token_losses(model, micro[1])]
    reference = gradient(model, by_hand("token", losses))
    assert float((accumulated - reference).norm() / reference.norm()) < 1e-5  # the verdict
    result = check_accumulation(step_of(model), [read_batch(b) for b in micro])
    assert result.passed, result.message()
    c = result.comparison
    assert result.message() == (f"2 micro-batches accumulated (each micro-batch's loss over the batch's 43 targets "
                                f"(num_items_in_batch)) give the whole batch's gradient of its documents alone under "
                                f"`token`: relative gap {c.total_gap:.3g}, the largest a parameter's "
                                f"{c.worst().gap:.3g} (tolerance 0.001); the micro-batches hold 7 and 36 targets")

    def share(micro_batch, micro_batches):  # the loop's own: each mean weighted by its share of the targets
        count = lambda b: int((b["labels"][:, 1:] != -100).sum())  # noqa: E731
        return count(micro_batch) / sum(count(b) for b in micro_batches)

    weighted = check_accumulation(step_of(model), [read_batch(b) for b in micro], accumulation=share)
    assert weighted.passed and "(each micro-batch's loss weighted by share) give" in weighted.message()
    halves = check_accumulation(step_of(model), [read_batch(b) for b in micro], accumulation=lambda b, bs: 0.5)
    assert not halves.passed and halves.comparison.total_gap == pytest.approx(
        check_accumulation(step_of(model), [read_batch(b) for b in micro], accumulation="mean").comparison.total_gap)
    assert "1/14 and 1/72" not in halves.message()  # what a callable weighs is not known to be a mean's
    # the same micro-batches under a per-document mean: each micro-batch's token mean is not that
    assert not check_accumulation(step_of(model), [read_batch(b) for b in micro], "document").passed


def test_equal_micro_batches_averaged_each_pass_and_say_no_more():
    model = TinyLM()
    read = read_batch(batch_of([[5, 5], [4, 6]]))  # 8 targets a row
    result = check_accumulation(step_of(model), split_batch(read, 2), accumulation="mean")
    assert result.passed and result.targets == (8, 8)
    mean_rows = lambda logits, labels: torch.stack([F.cross_entropy(logits[r, :-1], labels[r, 1:], ignore_index=-100)  # noqa: E731
                                                    for r in range(len(labels))]).mean()
    unequal = check_accumulation(step_of(model, mean_rows), [read_batch(batch_of(FIRST, seed=1)),
                                                              read_batch(batch_of(SECOND, seed=2))], accumulation="mean")
    assert not unequal.passed and "averaged each on its own" not in unequal.message()  # a loss of its own


def test_a_loss_that_takes_no_count_and_too_few_micro_batches_are_refused():
    model = TinyLM()
    micro = [read_batch(batch_of(FIRST, seed=1)), read_batch(batch_of(SECOND, seed=2))]

    def plain(logits, labels):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())

    with pytest.raises(TensorcadError) as caught:
        check_accumulation(step_of(model, plain), micro)
    assert str(caught.value).startswith("loss: accumulation='num_items_in_batch' calls the loss with "
                                        "num_items_in_batch=, which it does not take (")
    assert not check_accumulation(step_of(model, plain), micro, accumulation="mean").passed
    for args, says in (((micro[:1],), "micro_batches: accumulation needs at least 2 micro-batches, got 1"),
                       ((micro, "token", "sum"), "accumulation: unknown accumulation 'sum' (accumulations: "
                                                 "num_items_in_batch, mean, or a callable weight(micro_batch, "
                                                 "micro_batches) -> float)"),
                       ((micro, "token", 2), "accumulation: expected a name or a callable, got int")):
        with pytest.raises(TensorcadError) as caught:
            check_accumulation(step_of(model), *args)
        assert str(caught.value) == says


def test_a_weight_without_a_name_is_named_by_its_type_and_rtol_is_the_callers():
    class HalfEach:  # a callable object: no __name__ of its own
        def __call__(self, micro_batch, micro_batches):
            return 0.5

    model = TinyLM()
    micro = [read_batch(batch_of(FIRST, seed=1)), read_batch(batch_of(SECOND, seed=2))]
    result = check_accumulation(step_of(model), micro, accumulation=HalfEach())
    assert result.accumulation == "HalfEach" and "(each micro-batch's loss weighted by HalfEach) give" in result.message()
    assert not result.passed  # 1/14 and 1/72 where the token mean weighs 1/43: beyond float32's 1e-3
    loose = check_accumulation(step_of(model), micro, accumulation=HalfEach(), rtol=10.0)
    assert loose.passed and loose.comparison.tolerance == 10.0


def test_accumulation_runs_in_train_mode_skips_unused_parameters_and_notes_the_form():
    class Spare(TinyLM):  # in eval mode it leaks across documents; one parameter the forward never uses
        def __init__(self):
            super().__init__(leak_in_eval=True)
            self.spare = torch.nn.Parameter(torch.ones(3))
            self.form = "flex"

    model = Spare().eval()
    micro = [read_batch(batch_of(FIRST, seed=1)), read_batch(batch_of(SECOND, seed=2))]
    result = check_accumulation(step_of(model), micro)
    assert result.passed, result.message()
    assert not model.training and model.form == "flex"
    assert "eager" in result.note and result.message().endswith(f" ({result.note})")
    assert {g.name: g.gap for g in result.comparison.gaps}["spare"] == 0.0


def test_equal_micro_batches_that_fail_for_another_reason_are_not_told_to_count_targets():
    """Averaged each, equal micro-batches weigh every target alike: a failure there is not the count's."""
    read = read_batch(batch_of([[5, 5], [4, 6]]))  # 8 targets a row
    result = check_accumulation(step_of(TinyLM(leak=True)), split_batch(read, 2), accumulation="mean")
    assert not result.passed and result.targets == (8, 8)
    assert result.message().endswith("the micro-batches hold 8 and 8 targets")
