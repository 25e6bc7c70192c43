"""Eval parity: the packed eval loss against the documents evaluated one a padded row, computed in the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from step_models import TinyLM, batch_of, spans  # noqa: E402

from tensorcad.runtime.certification.step.eval_parity import check_eval_parity, unpacked_losses  # noqa: E402
from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.loss import check_loss  # noqa: E402
from tensorcad.runtime.certification.step.loop import step_of  # noqa: E402

LENGTHS = [[3, 9, 2, 6], [14, 6]]


def padded_by_hand(model, batch):
    """Every document a row of its own, right-padded with 0s, the padding a document apart: each target's loss."""
    pieces = spans(batch["documents"])
    longest = max(end - first for _, first, end in pieces)
    ids = torch.zeros(len(pieces), longest, dtype=torch.long)
    documents = torch.ones(len(pieces), longest, dtype=torch.long)
    positions = torch.zeros(len(pieces), longest, dtype=torch.long)
    for i, (r, first, end) in enumerate(pieces):
        n = end - first
        ids[i, :n], documents[i, :n] = batch["input_ids"][r, first:end], 0
        positions[i, :n], positions[i, n:] = torch.arange(n), torch.arange(longest - n)
    logits = model(ids, documents, positions)
    out = []
    for i, (r, first, end) in enumerate(pieces):
        targets = batch["labels"][r, first + 1:end]
        kept = targets != -100
        out.append(F.cross_entropy(logits[i, :end - first - 1][kept], targets[kept], reduction="none"))
    return out


def test_the_packed_eval_loss_is_the_unpacked_one():
    model, batch = TinyLM(), batch_of(LENGTHS)
    model.eval()
    with torch.no_grad():
        tokens = padded_by_hand(model, batch)
        got, _ = unpacked_losses(step_of(model), read_batch(batch))
    assert len(got.tokens) == 6 and got.rows == (0, 0, 0, 0, 1, 1) and got.counts == (2, 8, 1, 5, 13, 5)
    for mine, theirs in zip(got.tokens, tokens):
        assert torch.allclose(mine, theirs, atol=1e-6)
    model.train()  # eval parity runs in eval mode, and leaves the model as it was
    result = check_eval_parity(step_of(model), read_batch(batch))
    assert result.passed, result.message()
    assert model.training
    assert result.reference == pytest.approx(float(torch.cat(tokens).mean()), abs=1e-6)
    assert result.message() == (f"the packed eval loss {result.packed:.6g} equals the documents evaluated unpacked "
                                f"(one a padded row) under `token` ({result.reference:.6g}; gap {result.gap:.3g}, "
                                f"tolerance {result.tolerance:.3g}); its 34 targets are the documents' own, each "
                                "weighed as `token` weighs it")
    assert check_eval_parity(step_of(model), read_batch(batch), "document").reference == pytest.approx(
        float(sum(t.mean() for t in tokens) / 6), abs=1e-6)
    assert check_eval_parity(step_of(model), read_batch(batch), atol=0.0, rtol=1e-3).tolerance == pytest.approx(
        1e-3 * result.reference)


def test_a_model_that_leaks_only_in_eval_mode_fails_eval_parity_and_not_the_loss():
    model, batch = TinyLM(leak_in_eval=True), batch_of(LENGTHS)
    read = read_batch(batch)
    assert check_loss(step_of(model), read).passed  # train mode keeps documents apart
    result = check_eval_parity(step_of(model), read)
    assert not result.passed and result.weights.passed  # the right targets, computed otherwise
    assert result.message().startswith("the packed eval loss")
    assert result.message().endswith("otherwise than the documents evaluated unpacked (one a padded row)")


def test_the_padding_is_the_models_pad_token():
    class Config:
        pad_token_id = 5

    model = TinyLM()
    model.config = Config()
    seen = []
    original = TinyLM.forward

    def spy(self, ids, documents, positions=None):
        seen.append(ids)
        return original(self, ids, documents, positions)

    model.forward = spy.__get__(model)
    check_eval_parity(step_of(model), read_batch(batch_of([[3, 5]])))
    padded = seen[-1]
    assert padded.shape == (2, 5) and padded[0, 3:].tolist() == [5, 5]
    Config.pad_token_id = None
    check_eval_parity(step_of(model), read_batch(batch_of([[3, 5]])))
    assert seen[-1][0, 3:].tolist() == [0, 0]


def test_the_padded_rows_are_the_documents_the_padding_kept_apart():
    """What the unpacked run feeds the model, against the rows written out here: each document's tokens from
    position 0, the padding (right, the model's pad id) a document of its own, the ids in the batch's dtype."""
    model, batch = TinyLM(), batch_of([[3, 5], [2, 4, 2]])
    batch["input_ids"] = batch["input_ids"].int()  # a collator's int32 ids stay int32
    seen = []
    original = TinyLM.forward

    def spy(self, ids, documents, positions=None):
        seen.append((ids, documents, positions))
        return original(self, ids, documents, positions)

    model.forward = spy.__get__(model)
    unpacked_losses(step_of(model), read_batch(batch))
    ids, documents, positions = seen[-1]
    pieces = spans(batch["documents"])
    lengths = [end - first for _, first, end in pieces]
    assert ids.dtype == torch.int32 and ids.shape == (len(pieces), max(lengths))
    for i, ((r, first, end), n) in enumerate(zip(pieces, lengths)):
        assert ids[i, :n].tolist() == batch["input_ids"][r, first:end].tolist()
        assert ids[i, n:].tolist() == [0] * (max(lengths) - n)
        assert documents[i].tolist() == [0] * n + [1] * (max(lengths) - n)
        assert positions[i].tolist() == list(range(n)) + list(range(max(lengths) - n))


def test_the_tolerance_is_the_models_dtype():
    """A bfloat16 model is held to bfloat16's tolerance, not float32's (the dtype read from its parameters)."""
    from tensorcad.runtime.certification.step.loop import loss_tolerance

    model, batch = TinyLM().to(torch.bfloat16), batch_of(LENGTHS)
    result = check_eval_parity(step_of(model), read_batch(batch))
    assert result.passed, result.message()
    assert result.tolerance == loss_tolerance(torch.bfloat16, result.reference)
    assert result.tolerance > 100 * loss_tolerance(torch.float32, result.reference)


def test_a_flex_model_is_evaluated_in_its_eager_form_and_says_so():
    """On CPU FlexAttention has no backward: the model runs eager, the result notes it, the form is put back."""
    model, batch = TinyLM(), batch_of(LENGTHS)
    model.form = "flex"
    forms = []
    original = TinyLM.forward

    def spy(self, ids, documents, positions=None):
        forms.append(self.form)
        return original(self, ids, documents, positions)

    model.forward = spy.__get__(model)
    result = check_eval_parity(step_of(model), read_batch(batch))
    assert result.passed and forms and set(forms) == {"eager"} and model.form == "flex"
    assert result.note and "eager" in result.note
    assert result.message().endswith(f" ({result.note})") and result.to_json()["note"] == result.note


def test_a_float64_model_passes_at_float64_s_tolerance():
    """Its cross-entropies stay float64: taken in float32 they differed by 2.4e-7 against a 4.8e-10 tolerance."""
    from tensorcad.runtime.certification.step.loss import check_loss
    from tensorcad.runtime.certification.step.loop import loss_tolerance

    model, batch = TinyLM().to(torch.float64), read_batch(batch_of(LENGTHS))
    for result in (check_eval_parity(step_of(model), batch), check_loss(step_of(model), batch)):
        assert result.passed, result.message()
        assert result.tolerance == loss_tolerance(torch.float64, result.reference)
