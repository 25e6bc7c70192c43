"""tensorcad.testing.assert_step_*: the training step's certificates as plain assertions, on a model and a batch dict."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tensorcad.testing  # noqa: E402
from tensorcad.testing import (  # noqa: E402
    CertificateError,
    assert_eval_parity,
    assert_step_accumulation,
    assert_step_faithful,
    assert_step_gradients,
    assert_step_labels,
    assert_step_loss,
)
from tensorcad.errors import TensorcadError  # noqa: E402


class Masked(nn.Module):
    """One causal attention layer within documents (``leak``: across them)."""

    def __init__(self, leak: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.qkv, self.out = nn.Embedding(32, 16), nn.Linear(16, 48), nn.Linear(16, 32)
        self.leak = leak

    def forward(self, ids, documents, positions=None):
        q, k, v = self.qkv(self.embed(ids)).split(16, dim=-1)
        T = ids.shape[1]
        keep = torch.ones(T, T, dtype=torch.bool).tril()[None]
        if not self.leak:
            keep = keep & (documents[:, :, None] == documents[:, None, :])
        return self.out((q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf")).softmax(-1) @ v)


def batch(lengths=((3, 9, 4), (10, 6))) -> dict:
    documents = torch.tensor([[d for d, n in enumerate(row) for _ in range(n)] for row in lengths])
    ids = torch.randint(0, 32, documents.shape, generator=torch.Generator().manual_seed(0))
    first = torch.ones_like(documents, dtype=torch.bool)
    first[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return {"input_ids": ids, "documents": documents, "labels": ids.masked_fill(first, -100)}


def test_a_faithful_step_passes_all_its_certificates_and_reports_each():
    report = assert_step_faithful(Masked(), batch(), accumulation="num_items_in_batch")
    assert report.passed and list(report.results) == ["step[labels]", "step[loss]", "step[gradients]",
                                                      "step[accumulation]", "eval[parity]"]
    assert report.to_json()["passed"] and report.to_json()["notRun"] == {}
    quiet = assert_step_faithful(Masked(), batch())  # the loop takes one batch a step: said, not passed
    assert "step[accumulation]" not in quiet.results
    assert quiet.not_run == {"step[accumulation]": "accumulation=None: the loop takes one batch a step"}
    assert "step[accumulation]: not run (accumulation=None" in quiet.message()


def test_a_leaking_model_fails_naming_every_certificate_that_fails():
    with pytest.raises(CertificateError) as caught:
        assert_step_faithful(Masked(leak=True), batch(), accumulation="num_items_in_batch")
    report = caught.value.report
    assert set(report.failures) == {"step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]"}
    text = str(caught.value)
    assert text.startswith("the training step is not the documents' own\nstep[loss]: the packed loss")
    assert "step[labels]" not in text  # the labels are right: only what failed is told


@pytest.mark.parametrize("assertion, headline", [
    (assert_step_loss, "the loss is not the documents' own"),
    (assert_step_gradients, "the gradients are not the documents' own"),
    (assert_step_accumulation, "accumulation does not give the whole batch's gradient"),
    (assert_eval_parity, "the packed eval loss is not the unpacked one"),
])
def test_each_piece_raises_its_own_headline_with_its_result(assertion, headline):
    assert assertion(Masked(), batch()).passed
    with pytest.raises(CertificateError) as caught:
        assertion(Masked(leak=True), batch())
    assert str(caught.value).startswith(headline + "\n") and not caught.value.report.passed


def test_the_labels_piece_names_the_crossing_and_the_loops_choices_are_passed_on():
    bad = batch()
    bad["labels"] = bad["input_ids"].clone()
    with pytest.raises(CertificateError, match="labels cross documents\nrow 0: the label at position 3 "):
        assert_step_labels(Masked(), bad)
    assert assert_step_labels(Masked(), batch()).shift == "inside"

    def row_mean(logits, labels):
        return torch.stack([F.cross_entropy(logits[r, :-1], labels[r, 1:]) for r in range(len(labels))]).mean()

    assert assert_step_loss(Masked(), batch(), loss=row_mean, reduction="sequence").passed
    with pytest.raises(CertificateError, match="as the `sequence` mean does"):
        assert_step_loss(Masked(), batch(), loss=row_mean, reduction="document")
    assert assert_step_gradients(Masked(), batch(), loss=row_mean, reduction="sequence").passed
    assert assert_step_accumulation(Masked(), batch(), accumulation="mean", micro_batches=2, loss=row_mean,
                                    reduction="sequence").passed  # one row a micro-batch: each its row's mean


def test_a_model_fn_an_alone_fn_and_bad_input():
    model = Masked()
    model_fn = lambda ids, documents, positions: model(ids, documents, positions)  # noqa: E731
    assert assert_step_loss(model_fn, batch(), alone_fn=model_fn).passed
    with pytest.raises(TensorcadError, match="a list of micro-batches is for step\\[accumulation\\] alone"):
        assert_step_faithful(model, [batch(), batch()])
    with pytest.raises(TensorcadError, match="unknown reduction"):
        assert_step_faithful(model, batch(), reduction="mean")
    with pytest.raises(TensorcadError, match="unknown accumulation"):
        assert_step_faithful(model, batch(), accumulation="sum")
    from tensorcad.runtime.certification import certify_step

    with pytest.raises(TensorcadError, match="unknown step certificate 'step'"):
        certify_step(model, batch(), only=["step"])
    assert set(tensorcad.testing.__all__) >= {"assert_step_faithful", "assert_step_labels", "assert_step_loss",
                                    "assert_step_gradients", "assert_step_accumulation", "assert_eval_parity"}
