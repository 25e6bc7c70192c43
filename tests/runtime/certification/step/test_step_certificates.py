"""The training step certified as a whole (`certify_step`) and as the registry's checks on a subject."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from step_models import TinyLM, batch_of, inside_labels  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.building.settings import Settings  # noqa: E402
from tensorcad.runtime.certification.subjects.model import ModelSubject  # noqa: E402
from tensorcad.runtime.certification.step.next_token import REDUCTION, SHIFT, next_token_labels, next_token_loss  # noqa: E402
from tensorcad.runtime.certification.registry import STEP_CHECKS, run_check  # noqa: E402
from tensorcad.runtime.certification.step.certificates import (  # noqa: E402
    HEADLINES,
    certify_step,
    collator_labels,
    subject_step,
)

LENGTHS = [[3, 9, 2, 6], [14, 6]]


def subject(model, lengths=LENGTHS, **kw):
    batch = batch_of(lengths)
    return ModelSubject(model, Settings(), given_batch=(batch["input_ids"], batch["documents"],
                                                         batch["position_ids"]), **kw)


def test_the_whole_step_and_some_of_it():
    report = certify_step(TinyLM(), batch_of(LENGTHS), accumulation="num_items_in_batch")
    assert list(report.results) == list(STEP_CHECKS) and report.passed and not report.failures
    assert report.message() == "\n".join(f"{name}: {r.message()}" for name, r in report.results.items())
    assert report.to_json() == {"passed": True, "results": {n: r.to_json() for n, r in report.results.items()},
                                "notRun": {}, "call": "", "causes": {}}  # a model_fn: no call to name
    assert report.results["step[accumulation]"].accumulation == "num_items_in_batch"
    assert report.results["step[gradients]"].reduction == "token"
    some = certify_step(TinyLM(), batch_of(LENGTHS), only=["step[loss]", "step[accumulation]"])
    assert list(some.results) == ["step[loss]"] and list(some.not_run) == ["step[accumulation]"]
    assert some.message() == (f"step[loss]: {some.results['step[loss]'].message()}\nstep[accumulation]: not run "
                              "(accumulation=None: the loop takes one batch a step)")
    declared = certify_step(TinyLM(), batch_of(LENGTHS, labels="shifted"), shift="shifted", reduction="document",
                            accumulation="mean", micro_batches=2, atol=0.01, rtol=0.05)
    assert declared.results["step[labels]"].how == "declared shift='shifted'"
    loss = declared.results["step[loss]"]
    assert loss.reduction == "document" and loss.tolerance == pytest.approx(0.01 + 0.05 * loss.reference)
    assert declared.results["eval[parity]"].tolerance == pytest.approx(0.01 + 0.05 * declared.results["eval[parity]"].reference)
    assert declared.results["step[gradients]"].comparison.tolerance == 0.05
    assert declared.results["step[accumulation]"].accumulation == "mean"
    failing = certify_step(TinyLM(leak=True), batch_of(LENGTHS), only=["step[labels]", "step[loss]"])
    assert list(failing.failures) == ["step[loss]"] and not failing.passed
    assert failing.message() == f"step[loss]: {failing.results['step[loss]'].message()}"
    assert failing.to_json()["results"]["step[loss]"]["passed"] is False
    micro = certify_step(TinyLM(), [batch_of([[3, 6]]), batch_of([[12, 10]])], accumulation="mean",
                         only=["step[accumulation]"])
    assert micro.results["step[accumulation]"].targets == (7, 20) and not micro.passed
    three = certify_step(TinyLM(), batch_of([[3, 6, 4, 5]]), accumulation="num_items_in_batch", micro_batches=3,
                         only=["step[accumulation]"])
    # one row cut at its documents (starts 0, 3, 9, 13): at 3 (nearest 6, a tie to the earlier) and 13 (nearest 12)
    assert three.results["step[accumulation]"].targets == (2, 5 + 3, 4)
    assert set(HEADLINES) == set(STEP_CHECKS)


def test_the_labels_a_collator_writes():
    batch = batch_of(LENGTHS)
    assert torch.equal(collator_labels(batch["input_ids"], batch["documents"]),
                       inside_labels(batch["input_ids"], batch["documents"]))


def test_the_generated_models_training_loss():
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    documents = torch.tensor([[0, 0, 0, 1, 1]])
    assert next_token_labels(ids, documents).tolist() == [[6, 7, -100, 9, -100]]
    scored = torch.tensor([[False, True, True, True, True]])
    assert next_token_labels(ids, documents, scored).tolist() == [[-100, 7, -100, 9, -100]]
    logits = torch.randn(1, 5, 10, generator=torch.Generator().manual_seed(0))
    labels = next_token_labels(ids, documents)
    want = torch.nn.functional.cross_entropy(logits[0, [0, 1, 3]], torch.tensor([6, 7, 9]), reduction="none")
    assert float(next_token_loss(logits, labels)) == pytest.approx(float(want.mean()))
    assert float(next_token_loss(logits, labels, 6)) == pytest.approx(float(want.sum() / 6))
    assert (REDUCTION, SHIFT) == ("token", "shifted")


def test_a_users_model_is_held_under_its_collators_labels_or_the_flattening_collators():
    model = TinyLM()
    s = subject(model)
    step, batch, shift = subject_step(s)
    assert step.model is model and step.loss is None and shift is None
    assert torch.equal(batch["labels"], inside_labels(batch["input_ids"], batch["documents"]))
    assert torch.equal(batch["position_ids"], s.given_batch[2])  # a Hugging Face model reads the packing off them
    assert all(run_check(s, name).passed for name in STEP_CHECKS)

    class Collated(ModelSubject):
        labels = None

    copied = Collated(model, Settings(), given_batch=s.given_batch)
    copied.labels = s.given_batch[0].clone()  # a packer that copies the ids
    check = run_check(copied, "step[labels]")
    assert not check.passed and check.message.startswith("labels cross documents\nrow 0: the label at position 3")
    assert check.figures["crossings"] == 4


def test_a_model_that_drops_out_or_a_batch_that_cannot_be_split_skips_saying_why():
    model = TinyLM()
    model.drop = nn.Dropout(0.1)
    check = run_check(subject(model), "step[loss]")
    assert check.skipped and "drop drops out 0.1 of its inputs" in check.message
    assert run_check(subject(model), "step[labels]").passed  # the labels need no model run
    one = run_check(subject(TinyLM(), lengths=[[12]]), "step[accumulation]")
    assert one.skipped and one.message == ("the batch cannot be accumulated: one row of 1 documents cannot be cut "
                                           "into 2 micro-batches of whole documents")


def test_bad_choices_are_refused():
    with pytest.raises(TensorcadError, match="unknown step certificate 'step\\[all\\]'"):
        certify_step(TinyLM(), batch_of(LENGTHS), only=["step[all]"])
    with pytest.raises(TensorcadError, match="unknown reduction"):
        certify_step(TinyLM(), batch_of(LENGTHS), reduction="sum")
    with pytest.raises(TensorcadError, match="unknown accumulation"):
        certify_step(TinyLM(), batch_of(LENGTHS), accumulation="sum", only=["step[accumulation]"])
    with pytest.raises(TensorcadError, match="a list of micro-batches is for step\\[accumulation\\] alone"):
        certify_step(TinyLM(), [batch_of(LENGTHS)])


def test_a_subjects_own_alone_is_how_its_documents_run_and_a_check_keeps_its_name():
    model, other = TinyLM(), TinyLM(seed=1)
    s = subject(model, alone=lambda ids, documents, positions: other(ids, documents, positions))
    check = run_check(s, "step[loss]")  # each document alone through another model: not the packed loss
    assert check.name == "step[loss]" and not check.passed
    assert check.message.startswith("the loss is not the documents' own\n")
    assert run_check(subject(model), "step[loss]").passed


def test_a_designs_subject_is_held_under_its_generated_models_training_loss():
    """A design's subject: its generated model, next-token labels shifted within documents, next_token_loss.
    The labels check needs no model run; building the design costs the test its time (a second or so)."""
    from tiny_designs import SETTINGS, design

    from tensorcad.runtime.building.subject import Subject

    s = Subject(design("doc(b, q) == doc(b, kv)"), SETTINGS)
    step, batch, shift = subject_step(s)
    assert step.model is not None and step.loss is next_token_loss and shift == SHIFT
    assert torch.equal(batch["labels"], next_token_labels(batch["input_ids"], batch["documents"]))
    check = run_check(s, "step[labels]")
    assert check.passed and check.figures["how"] == "declared shift='shifted'", check.message


def test_bad_choices_are_refused_in_one_line_naming_the_argument():
    with pytest.raises(TensorcadError) as caught:
        certify_step(TinyLM(), batch_of(LENGTHS), only=["step[all]"])
    assert caught.value.path == "only" and str(caught.value) == (
        f"only: unknown step certificate 'step[all]' ({', '.join(STEP_CHECKS)})")
    with pytest.raises(TensorcadError) as caught:
        certify_step(TinyLM(), [batch_of(LENGTHS)])
    assert str(caught.value) == ("batch: a list of micro-batches is for step[accumulation] alone: pass one batch "
                                 "dict")


def test_the_users_loss_and_alone_are_the_ones_certified():
    from step_models import row_mean_loss

    model, other, batch = TinyLM(), TinyLM(seed=1), batch_of(LENGTHS)
    by_row = certify_step(model, batch, loss=row_mean_loss, reduction="sequence", only=["step[loss]"])
    assert by_row.passed, by_row.message()  # the row mean is the sequence mean; the default token mean is not
    assert not certify_step(model, batch, reduction="sequence", only=["step[loss]"]).passed
    elsewhere = certify_step(model, batch, alone=lambda ids, documents, positions: other(ids, documents, positions),
                             only=["step[loss]"])
    assert not elsewhere.passed  # the documents alone through another model


def test_the_declared_reduction_and_rtol_reach_every_certificate():
    from step_models import row_mean_loss

    model, batch = TinyLM(), batch_of(LENGTHS)
    report = certify_step(model, batch, loss=row_mean_loss, reduction="sequence",
                          only=["step[gradients]", "step[accumulation]", "eval[parity]"])
    assert list(report.results) == ["step[gradients]", "eval[parity]"] and "step[accumulation]" in report.not_run
    assert all(r.reduction == "sequence" for r in report.results.values())
    report = certify_step(model, batch, loss=row_mean_loss, reduction="sequence", rtol=0.05,
                          accumulation="mean", only=["step[gradients]", "step[accumulation]"])
    assert report.results["step[gradients]"].reduction == "sequence" and report.passed, report.message()
    assert report.results["step[accumulation]"].comparison.tolerance == 0.05
