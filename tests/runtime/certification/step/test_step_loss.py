"""The loss under its reduction, held to each document run alone and reduced by hand in the test."""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from step_models import TinyLM, alone_token_losses, batch_of, by_hand, row_mean_loss  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.loss import check_loss  # noqa: E402
from tensorcad.runtime.certification.step.loop import step_of  # noqa: E402

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
    assert result.gap < 1e-6 and result.matched == () and result.value_passed and result.weights.passed
    assert result.message() == (f"the packed loss {result.packed:.6g} equals the documents run alone under `token` "
                                f"({result.reference:.6g}; gap {result.gap:.3g}, tolerance {result.tolerance:.3g}); "
                                "its 34 targets are the documents' own, each weighed as `token` weighs it")
    figures = result.to_json()
    assert figures == {
        "passed": True, "packed": result.packed, "reduction": "token", "reference": result.reference,
        "references": result.references, "gap": result.gap, "tolerance": result.tolerance, "matched": [],
        "documents": 6, "targets": 34, "note": "", "trained": result.weights.to_json(),
        "weights": {"token": ["1/34"] * 6, "document": ["1/12", "1/48", "1/6", "1/30", "1/78", "1/30"],
                    "sequence": ["1/32"] * 4 + ["1/36"] * 2},
        "router": None, "message": result.message()}
    assert figures["trained"]["perDocument"] == ["1/34"] * 6 and figures["trained"]["mistrained"] == 0
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
    # what the loss trains, read off its gradient: row 0's 16 targets each 1/32, where `document` weighs 1/(6 x 2)
    assert "it weighs the documents' targets as the `sequence` mean does: a target of document 0 of row 0 (2 " \
           "targets) weighs 1/32 (`document`: 1/12)" in message
    assert result.value_passed is False and result.references["sequence"] == pytest.approx(by_row, abs=1e-6)
    assert check_loss(step_of(model, row_mean_loss), read_batch(batch), "sequence").passed


def test_a_to_g_and_x_y_in_one_row_weigh_a_ninth_each_not_half_of_a_seventh_and_a_half():
    model, batch = TinyLM(), batch_of([[8, 3]])  # 7 targets [a..g] and 2 targets [x, y]
    result = check_loss(step_of(model, row_mean_loss), read_batch(batch), "document")
    assert not result.passed and result.matched == ("token", "sequence")  # one row: its mean is the token mean
    weights = result.to_json()["weights"]
    assert [Fraction(w) for w in weights["sequence"]] == [Fraction(1, 9)] * 2
    assert [Fraction(w) for w in weights["document"]] == [Fraction(1, 2) * Fraction(1, 7), Fraction(1, 2) * Fraction(1, 2)]
    # measured: the weight each target has in the loss, read off its gradient at the logits
    assert result.to_json()["trained"]["perDocument"] == ["1/9", "1/9"]
    assert result.weights.per_document == pytest.approx((1 / 9, 1 / 9), rel=1e-6)
    assert result.message().endswith(
        "it weighs the documents' targets as the `token` mean does (and, on this batch, the `sequence` mean): a "
        "target of document 0 of row 0 (7 targets) weighs 1/9 (`document`: 1/14), a target of document 1 of row 0 "
        "(2 targets) weighs 1/9 (`document`: 1/4)")


def test_a_leaking_forward_matches_no_reduction():
    model, batch = TinyLM(leak=True), batch_of(LENGTHS)
    result = check_loss(step_of(model), read_batch(batch))
    assert not result.passed and result.matched == () and result.weights.passed  # the right targets, weighed right
    assert result.message().endswith("though its targets are the documents' own, weighed as `token` weighs them: the "
                                     "packed forward computes them otherwise than the documents run alone")


def test_labels_across_a_boundary_and_a_loss_that_does_not_shift_are_named_at_the_position():
    model, batch = TinyLM(), batch_of(LENGTHS)
    batch["labels"] = batch["input_ids"].clone()  # a packer that copies the ids: no -100 where a document begins
    result = check_loss(step_of(model), read_batch(batch))
    first = result.weights.mistrained[0]
    assert (first.row, first.position, first.document, first.last) == (0, 2, 0, True)
    assert first.got == int(batch["input_ids"][0, 3])
    assert len(result.weights.mistrained) == 4  # one a boundary: 3 in row 0, 1 in row 1
    assert result.message().endswith(f"the loss trains position 2 of row 0 (document 0, its last) on token "
                                     f"{first.got}, a target the documents alone do not have: the next document's "
                                     "first token (3 more positions trained otherwise)")

    def unshifted(logits, labels):  # trains each output on its own token
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)

    batch = batch_of(LENGTHS)
    result = check_loss(step_of(model, unshifted), read_batch(batch, shift="inside"))
    first, wrong = result.weights.mistrained[:2]
    assert (first.position, first.got) == (0, -100)  # its label is -100: the first document's first token
    assert (wrong.row, wrong.position) == (0, 1) and wrong.got == int(batch["input_ids"][0, 1])
    assert wrong.want == int(batch["input_ids"][0, 2])
    assert "does the loss shift the labels as they are written?" in wrong.message()
    labels = batch["labels"]  # by hand: output t trained on labels[t], where alone it is trained on labels[t + 1]
    alone = torch.cat([labels[:, 1:], torch.full((2, 1), -100)], dim=1)
    alone[batch["documents"] != torch.cat([batch["documents"][:, 1:], torch.full((2, 1), -1)], dim=1)] = -100
    count = int((labels != alone).sum())
    assert len(result.weights.mistrained) == count
    assert result.message().endswith("the loss never trains position 0 of row 0 (document 0), which the documents "
                                     f"alone train on token {first.want} ({count - 1} more positions trained "
                                     "otherwise)")


def test_a_loss_whose_gradient_is_no_cross_entropys_is_matched_by_its_value():
    model, batch = TinyLM(), batch_of(LENGTHS)

    def row_mean_plus_nothing(logits, labels):  # the value of a row mean, a gradient that is no cross-entropy's
        return row_mean_loss(logits, labels) + (logits.sum() - logits.sum().detach())

    result = check_loss(step_of(model, row_mean_plus_nothing), read_batch(batch), "document")
    assert result.weights is None and result.matched == ("sequence",)
    assert result.message().endswith(
        f"it is the `sequence` mean ({result.references['sequence']:.6g}): `sequence` weighs a target of document 0 "
        "of row 0 (2 targets) 1/32, a target of document 1 of row 0 (8 targets) 1/32, a target of document 2 of row "
        "0 (1 target) 1/32, and 3 more; `document` weighs a target of document 0 of row 0 (2 targets) 1/12, a "
        "target of document 1 of row 0 (8 targets) 1/48, a target of document 2 of row 0 (1 target) 1/6, and 3 more")
    assert result.to_json()["trained"] is None


def test_a_loss_that_is_not_a_weighted_cross_entropy_is_held_by_its_value():
    model, batch = TinyLM(), batch_of(LENGTHS)

    def smoothed(logits, labels):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), label_smoothing=0.1)

    result = check_loss(step_of(model, smoothed), read_batch(batch))
    assert result.weights is None and not result.passed  # the reference is plain cross-entropy
    assert "nor under any named reduction (token" in result.message()
    loose = check_loss(step_of(model, smoothed), read_batch(batch), atol=1.0, rtol=0.0)
    assert loose.passed and loose.tolerance == 1.0
    assert loose.message().endswith("not a weighted cross-entropy, so its value alone is compared, and on this batch "
                                    "`document`, `sequence` gives the same value")


def test_a_loss_over_the_rows_length_padding_and_all_fails_while_the_forward_certificates_pass():
    from tensorcad.runtime.certification.forward.boundaries import check_boundaries
    from tensorcad.runtime.certification.forward.faithful import check_faithful
    from tensorcad.runtime.certification.forward.gradients import check_gradient_isolation
    from tensorcad.runtime.certification.forward.isolation import check_isolation
    from tensorcad.runtime.certification.step.labels import check_labels

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
    assert abs(packed - want) > 0.1 * want  # 32 targets over 38 positions: the verdict, by hand
    result = check_loss(step_of(model, over_the_row), read)
    assert not result.passed and result.packed == pytest.approx(packed, abs=1e-6)
    assert "it weighs the documents' targets as no named reduction does: a target of document 0 of row 0 (9 " \
           "targets) weighs 1/38 (`token`: 1/32)" in result.message()
    # The rest of the step reads the same loss, so it fails with it: every target weighs 1/38 where the
    # documents alone weigh it 1/32, so the packed gradient is 32/38 of theirs (a gap of 6/38 of its norm).
    from tensorcad.runtime.certification.step.certificates import certify_step

    rest = certify_step(model, batch, loss=over_the_row, only=("step[gradients]", "eval[parity]")).results
    gradients, parity = rest["step[gradients]"], rest["eval[parity]"]
    assert not gradients.passed and f"(relative gap {6 / 38:.3f})" in gradients.message()
    assert not parity.passed and "weighs 1/38 (`token`: 1/32)" in parity.message()


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
    assert str(caught.value) == "loss: expected a callable (logits, labels) -> loss, got str"
    with pytest.raises(TensorcadError, match="expected a model") as caught:
        step_of(3)
    assert str(caught.value) == "model: expected a model or a model_fn, got int"


def test_the_weights_said_for_more_documents_than_are_shown():
    """The verdict names three documents' weights (a document of one target in the singular) and counts the rest."""
    model = TinyLM()
    result = check_loss(step_of(model, row_mean_loss), read_batch(batch_of(LENGTHS)), "document")
    # row 0 holds 16 targets (2, 8, 1, 5), row 1 holds 18: the row mean weighs row 0's 1/(2 x 16); `document`
    # weighs a target 1/(6 x its document's)
    assert result.message().endswith(
        "it weighs the documents' targets as the `sequence` mean does: a target of document 0 of row 0 (2 targets) "
        "weighs 1/32 (`document`: 1/12), a target of document 1 of row 0 (8 targets) weighs 1/32 (`document`: 1/48), "
        "a target of document 2 of row 0 (1 target) weighs 1/32 (`document`: 1/6), and 3 more")
    one_more = check_loss(step_of(model, row_mean_loss), read_batch(batch_of([[3, 9, 2, 6]])), "document")
    assert one_more.message().endswith("(`document`: 1/4), and 1 more")  # 1/(4 x 1)


def test_a_document_without_targets_is_declared_no_weight():
    """A one-token document has nothing to predict: the declared reduction gives it no weight (by hand: 1/N)."""
    result = check_loss(step_of(TinyLM()), read_batch(batch_of([[4, 1, 3]])))
    assert result.passed, result.message()
    assert result.counts == (3, 0, 2)
    assert result.declared == pytest.approx((1 / 5, 0.0, 1 / 5))
    mine = check_loss(step_of(TinyLM()), read_batch(batch_of([[4, 1, 3]])), lambda tokens, rows: torch.cat(tokens).mean())
    assert mine.declared[1] == 0.0 and mine.declared[0] == pytest.approx(1 / 5)  # the callable's gradient: none


def test_one_and_two_positions_trained_across_a_boundary_are_counted_in_words():
    model = TinyLM()
    for lengths, tail in (([[3, 5]], "first token"), ([[3, 5, 4]], "first token (1 more position trained otherwise)"),
                          ([[3, 5, 4, 2]], "first token (2 more positions trained otherwise)")):
        batch = batch_of(lengths)
        batch["labels"] = batch["input_ids"].clone()  # no -100 where a document begins
        result = check_loss(step_of(model), read_batch(batch))
        assert len(result.weights.mistrained) == len(lengths[0]) - 1
        assert result.message().endswith(f"the next document's {tail}")


def test_a_value_that_no_other_reduction_shares_is_said_alone():
    """A loss with a gradient no cross-entropy has, at the token mean's value: compared by value, nothing else named."""
    model, batch = TinyLM(), batch_of(LENGTHS)

    def token_plus_nothing(logits, labels):
        return packed_by_hand_of(logits, labels) + (logits.sum() - logits.sum().detach())

    result = check_loss(step_of(model, token_plus_nothing), read_batch(batch))
    assert result.passed and result.weights is None, result.message()
    assert all(abs(result.references[n] - result.reference) > result.tolerance for n in ("document", "sequence"))
    assert result.message().endswith("); not a weighted cross-entropy, so its value alone is compared")


def packed_by_hand_of(logits, labels):
    targets = labels[:, 1:]
    kept = targets != -100
    return F.cross_entropy(logits[:, :-1][kept], targets[kept])


def test_a_loss_nothing_matches_lists_every_named_reduction():
    model, batch = TinyLM(), batch_of(LENGTHS)

    def smoothed(logits, labels):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), label_smoothing=0.1)

    result = check_loss(step_of(model, smoothed), read_batch(batch))
    r = result.references
    assert result.message().endswith(
        f"nor under any named reduction (token {r['token']:.6g}, document {r['document']:.6g}, sequence "
        f"{r['sequence']:.6g}): the packed step computes something the documents alone do not")


def test_a_callable_reduction_over_rows_is_held_by_its_weights_and_named_by_value():
    """A reduction of the user's that reads the rows (the row mean, written by hand): it is held to it, weights
    read from its own gradient; matched by value only, it is said as the named mean and not as itself."""
    model, batch = TinyLM(), batch_of(LENGTHS)

    def per_row(tokens, rows):
        means = [torch.cat([t for t, r in zip(tokens, rows) if r == row]).mean() for row in sorted(set(rows))]
        return torch.stack(means).mean()

    result = check_loss(step_of(model, row_mean_loss), read_batch(batch), per_row)
    assert result.passed and result.weights is not None and result.weights.passed, result.message()
    assert result.reference == pytest.approx(result.references["sequence"], abs=1e-6)

    def token_plus_nothing(logits, labels):
        return packed_by_hand_of(logits, labels) + (logits.sum() - logits.sum().detach())

    failed = check_loss(step_of(model, token_plus_nothing), read_batch(batch), per_row)
    assert not failed.passed and failed.weights is None and failed.matched[0] == "token"
    assert failed.message().endswith("a target of document 2 of row 0 (1 target) 1/34, and 3 more")


def test_logits_without_a_graph_or_unused_by_the_loss_are_held_by_the_value():
    """Where the loss's gradient at the logits cannot be read (no graph; a loss computing its own), the value
    is compared alone: the right value passes."""
    model, batch = TinyLM(), batch_of(LENGTHS)

    def frozen(ids, documents, positions):  # outputs computed without a graph
        with torch.no_grad():
            return model(ids, documents, positions)

    result = check_loss(step_of(frozen), read_batch(batch))
    assert result.passed and result.weights is None, result.message()
    forward = (batch["input_ids"], batch["documents"], batch["position_ids"])

    def its_own(logits, labels):  # ignores the logits it is given, recomputes them
        return packed_by_hand_of(model(*forward), labels)

    result = check_loss(step_of(model, its_own), read_batch(batch))
    assert result.passed and result.weights is None, result.message()
    with torch.no_grad():
        want = float(packed_by_hand(model, batch))
    assert result.packed == pytest.approx(want, abs=1e-6)


def test_the_tolerance_is_the_models_dtype_and_a_flex_model_runs_eager():
    from tensorcad.runtime.certification.step.loop import loss_tolerance

    result = check_loss(step_of(TinyLM().to(torch.bfloat16)), read_batch(batch_of(LENGTHS)))
    assert result.passed and result.tolerance == loss_tolerance(torch.bfloat16, result.reference)
    assert result.tolerance > 100 * loss_tolerance(torch.float32, result.reference)
    model = TinyLM()
    model.form = "flex"
    result = check_loss(step_of(model), read_batch(batch_of(LENGTHS)))
    assert result.passed and model.form == "flex" and "eager" in result.note
    assert result.message().endswith(f" ({result.note})") and result.to_json()["note"] == result.note
