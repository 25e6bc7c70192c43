"""The loss under its reduction, held to each document run alone and reduced by hand in the test."""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from step_models import TinyLM, alone_token_losses, batch_of, by_hand, row_mean_loss  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step_batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step_loss import check_loss  # noqa: E402
from tensorcad.runtime.certification.training_step import step_of  # noqa: E402

LENGTHS = [[3, 9, 2, 6], [14, 6]]  # rows of 16 and 18 targets: a token mean and a row mean differ


def packed_by_hand(model, batch):
    """The default loss written out: each output against the next label, the mean over supervised targets."""
    logits = model(batch["input_ids"], batch["documents"], batch["position_ids"])
    targets = batch["labels"][:, 1:]
    kept = targets != -100
    return F.cross_entropy(logits[:, :-1][kept], targets[kept])


def test_the_default_loss_is_the_token_mean_of_the_documents_alone():
    model, batch = TinyLM().eval(), batch_of(LENGTHS)
    with torch.no_grad():
        want_packed = float(packed_by_hand(model, batch))
        want = {name: float(by_hand(name, alone_token_losses(model, batch))) for name in ("token", "document", "sequence")}
    result = check_loss(step_of(model), read_batch(batch))
    assert result.passed, result.message()
    assert result.packed == pytest.approx(want_packed, abs=1e-6)
    assert result.references == pytest.approx(want, abs=1e-6)
    assert result.tolerance == pytest.approx(1e-5 * (1 + want["token"]))  # float32: rtol x (1 + |loss|)
    assert result.gap < 1e-6 and result.matched == ()
    assert result.message().startswith(f"the packed loss {result.packed:.6g} equals the documents run alone under `token`")
    figures = result.to_json()
    assert figures["targets"] == 34 and figures["documents"] == 6 and figures["weights"]["token"] == ["1/34"] * 6
    assert figures["weights"]["sequence"] == ["1/32"] * 4 + ["1/36"] * 2
    assert not model.training  # run in train mode, put back in eval mode as it came


def test_the_naive_loop_declared_as_document_is_found_to_be_the_sequence_mean():
    model, batch = TinyLM(), batch_of(LENGTHS)
    with torch.no_grad():
        losses = alone_token_losses(model, batch)
        by_row, by_document = float(by_hand("sequence", losses)), float(by_hand("document", losses))
        packed = float(row_mean_loss(model(batch["input_ids"], batch["documents"], batch["position_ids"]),
                                     batch["labels"]))
    assert abs(packed - by_document) > 1e-3 and abs(packed - by_row) < 1e-6  # the verdict, by hand
    result = check_loss(step_of(model, row_mean_loss), read_batch(batch), "document")
    assert not result.passed and result.matched == ("sequence",)
    assert result.reference == pytest.approx(by_document, abs=1e-6)
    message = result.message()
    assert f"is not the documents run alone under `document` ({by_document:.6g}" in message
    assert f"it is the `sequence` mean ({by_row:.6g})" in message
    assert "`sequence` weighs a target of document 0 of row 0 (2 targets) 1/32" in message
    assert "`document` weighs a target of document 0 of row 0 (2 targets) 1/12" in message  # 1 / (6 x 2)
    assert check_loss(step_of(model, row_mean_loss), read_batch(batch), "sequence").passed


def test_a_to_g_and_x_y_in_one_row_weigh_a_ninth_each_not_half_of_a_seventh_and_a_half():
    model, batch = TinyLM(), batch_of([[8, 3]])  # 7 targets [a..g] and 2 targets [x, y]
    result = check_loss(step_of(model, row_mean_loss), read_batch(batch), "document")
    assert not result.passed and result.matched == ("token", "sequence")  # one row: its mean is the token mean
    weights = result.to_json()["weights"]
    assert [Fraction(w) for w in weights["sequence"]] == [Fraction(1, 9)] * 2
    assert [Fraction(w) for w in weights["document"]] == [Fraction(1, 2) * Fraction(1, 7), Fraction(1, 2) * Fraction(1, 2)]
    assert "which on this batch is also the `sequence` mean" in result.message()
    assert "(7 targets) 1/9" in result.message() and "(7 targets) 1/14" in result.message()
    assert "(2 targets) 1/4" in result.message()


def test_a_leaking_forward_matches_no_reduction():
    model, batch = TinyLM(leak=True), batch_of(LENGTHS)
    result = check_loss(step_of(model), read_batch(batch))
    assert not result.passed and result.matched == ()
    assert "nor under any named reduction (token" in result.message()


def test_a_loss_over_the_rows_length_padding_and_all_fails_while_the_forward_certificates_pass():
    from tensorcad.runtime.certification.boundaries import check_boundaries
    from tensorcad.runtime.certification.faithful import check_faithful
    from tensorcad.runtime.certification.gradients import check_gradient_isolation
    from tensorcad.runtime.certification.isolation import check_isolation
    from tensorcad.runtime.certification.step_labels import check_labels

    model, batch = TinyLM(), batch_of([[10, 6, 4], [12, 8]])
    batch["labels"][0, 16:] = -100  # row 0 ends in 4 tokens of padding: a document of its own, never trained

    def over_the_row(logits, labels):  # normalised by the row's tokens, the other document's padding counted
        per = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="none")
        return per.sum() / labels[:, 1:].numel()

    model_fn = lambda ids, documents, positions: model(ids, documents, positions)  # noqa: E731
    forward = (batch["input_ids"], batch["documents"], batch["position_ids"])
    assert check_isolation(model_fn, *forward, vocab=32).passed and check_boundaries(model_fn, *forward, vocab=32).passed
    assert check_faithful(model_fn, *forward).passed and check_gradient_isolation(model_fn, *forward).passed
    read = read_batch(batch)
    assert check_labels(read).passed
    with torch.no_grad():
        packed = float(over_the_row(model(*forward), batch["labels"]))
        want = float(by_hand("token", alone_token_losses(model, batch)))
    assert abs(packed - want) > 0.1 * want  # 29 targets over 38 positions: the verdict, by hand
    result = check_loss(step_of(model, over_the_row), read)
    assert not result.passed and result.packed == pytest.approx(packed, abs=1e-6)
    assert "nor under any named reduction" in result.message()


def test_a_callable_reduction_and_bad_input():
    model, batch = TinyLM(), batch_of(LENGTHS)

    def longest_mean(tokens, rows):  # a reduction of the user's: the mean of the longest document
        return max(tokens, key=len).mean()

    def longest_loss(logits, labels):
        row, first, end = 1, 1, 14  # the 14-token document's targets
        return F.cross_entropy(logits[row, first - 1:end - 1], labels[row, first:end])

    result = check_loss(step_of(model, longest_loss), read_batch(batch), longest_mean)
    assert result.passed and result.reduction == "longest_mean" and not result.named
    failed = check_loss(step_of(model), read_batch(batch), longest_mean)
    assert not failed.passed and "`longest_mean` weighs" not in failed.message()
    with pytest.raises(TensorcadError, match="unknown reduction"):
        check_loss(step_of(model), read_batch(batch), "mean")
    with pytest.raises(TensorcadError, match="expected a callable") as caught:
        step_of(model, loss="token")
    assert caught.value.path == "loss"
    with pytest.raises(TensorcadError, match="expected a model") as caught:
        step_of(3)
