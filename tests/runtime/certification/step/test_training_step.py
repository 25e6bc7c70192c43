"""The training step as the certificates run it: its parameters, its modes and forms, and what it refuses."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from step_models import TinyLM, batch_of  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.loop import loss_tolerance, step_of, token_cross_entropy  # noqa: E402


class WithForm(TinyLM):
    """A model with a generated model's form switch."""

    form = "flex"


def test_the_parameters_are_found_behind_a_model_fn_and_its_alone():
    model, other = TinyLM(), TinyLM(seed=1)
    model_fn = lambda ids, documents, positions: model(ids, documents, positions)  # noqa: E731
    alone = lambda ids, documents, positions: other(ids, documents, positions)  # noqa: E731
    named = step_of(model_fn, alone=alone).named_parameters()
    assert [n for n, _ in named] == [n for n, _ in model.named_parameters()] * 2
    assert {id(p) for _, p in named} == {id(p) for p in [*model.parameters(), *other.parameters()]}
    model.head.bias.requires_grad_(False)  # a frozen parameter is not trained, so not compared
    assert "head.bias" not in [n for n, _ in step_of(model).named_parameters()]
    with pytest.raises(TensorcadError) as caught:
        step_of(lambda ids, documents, positions: ids).named_parameters()
    assert str(caught.value) == ("model: no trainable parameters found in the model (itself, .module, .model or its "
                                 "closure): the step has nothing to train")
    with step_of(lambda ids, documents, positions: ids).mode(train=True) as note:
        assert note == ""  # no module, no form to switch


def test_modes_and_forms_are_put_back():
    model = WithForm().eval()
    step = step_of(model)
    with step.mode(train=True) as note:
        assert model.training and model.form == "eager"
        assert note == "the eager form: FlexAttention has no backward on CPU"
    assert not model.training and model.form == "flex"
    model.form = "eager"
    with step.mode(train=False) as note:
        assert note == "" and not model.training
    with pytest.raises(RuntimeError), step.mode(train=True):
        raise RuntimeError  # put back on the way out of a failure too
    assert not model.training


def test_a_model_that_drops_out_is_refused_naming_the_module():
    model = TinyLM()
    model.drop = nn.Dropout(0.1)
    with pytest.raises(TensorcadError) as caught, step_of(model).mode(train=True):
        pass
    assert str(caught.value) == ("model: drop drops out 0.1 of its inputs in train mode: the packed step and the "
                                 "documents alone would draw different masks; set p=0 for the certificate")
    assert model.training
    model.drop.p = 0.0
    with step_of(model).mode(train=True):
        pass

    class Config:
        attention_dropout = 0.2

    model.config = Config()
    with pytest.raises(TensorcadError) as caught, step_of(model).mode(train=True):
        pass
    assert str(caught.value) == ("model: config.attention_dropout is 0.2: the packed step and the documents alone "
                                 "would drop different scores; set it to 0 for the certificate")
    Config.attention_dropout = "none"  # not a rate: nothing read
    with step_of(model).mode(train=True):
        pass
    bare = nn.Dropout(0.3)  # the model itself: named by its class
    with pytest.raises(TensorcadError, match="^model: Dropout drops out 0.3"), step_of(bare).mode(train=True):
        pass
    with step_of(model).mode(train=False):  # eval mode drops nothing
        pass


def test_the_default_loss_and_the_tolerance():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[1, -100, 4], [0, 2, -100]])
    kept = targets != -100
    want = torch.nn.functional.cross_entropy(logits[kept], targets[kept], reduction="none")
    assert float(token_cross_entropy(logits, targets)) == pytest.approx(float(want.mean()))
    assert float(token_cross_entropy(logits, targets, 10)) == pytest.approx(float(want.sum() / 10))
    assert loss_tolerance(torch.float32, -4.0) == pytest.approx(1e-5 * 5)
    assert loss_tolerance(torch.bfloat16, 2.0) == pytest.approx(3e-2 * 3)
    assert loss_tolerance(torch.float32, 4.0, atol=0.0, rtol=1e-3) == pytest.approx(4e-3)
    assert loss_tolerance(torch.int8, 1.0) == pytest.approx(2e-5)  # a dtype without an entry: float32's


def test_a_loss_of_the_users_is_called_on_the_logits_and_the_labels_as_written():
    seen = []

    def mine(logits, labels):
        seen.append((logits.shape, labels))
        return logits.sum()

    read = read_batch(batch_of([[3, 4]]))
    assert step_of(TinyLM(), mine).packed_loss(read).shape == ()
    assert seen[0][0] == (1, 7, 32) and seen[0][1] is read.labels
    assert not step_of(TinyLM()).own_loss and not step_of(TinyLM()).hf


def test_a_flex_model_fn_with_no_parameters_is_taken_to_be_on_the_cpu():
    """No parameter to say where the model is: it is taken to be on the CPU, so its eager form is run."""
    def model_fn(ids, documents, positions):
        return ids

    model_fn.form = "flex"
    with step_of(model_fn).mode(train=True) as note:
        assert model_fn.form == "eager" and note == "the eager form: FlexAttention has no backward on CPU"
    assert model_fn.form == "flex"


def test_a_document_alone_is_one_document_from_position_0():
    model, seen = TinyLM(), []

    def alone(ids, documents, positions):
        seen.append((documents, positions))
        return model(ids, documents, positions)

    ids = torch.arange(5)[None] + 3
    logits = step_of(model, alone=alone).alone_logits(ids)
    documents, positions = seen[-1]
    assert documents.tolist() == [[0] * 5] and positions.tolist() == [[0, 1, 2, 3, 4]]
    assert torch.equal(logits, model(ids, torch.zeros_like(ids), torch.arange(5)[None]))


def test_documents_alone_over_micro_batches_are_numbered_by_their_row_in_the_whole_batch():
    from tensorcad.runtime.certification.step.loop import document_losses

    micro = [read_batch(batch_of([[3, 5], [4, 2, 2]], seed=i)) for i in range(3)]  # 2 rows each
    losses = document_losses(step_of(TinyLM()), micro)
    rows = [0, 0, 1, 1, 1] * 3
    want = [r + 2 * i for i in range(3) for r in rows[:5]]
    assert list(losses.rows) == want and [p[0] for p in losses.pieces] == want
    assert [w[0] for w in losses.where] == want


def test_an_alone_that_returns_other_shapes_is_refused_in_one_line():
    model = TinyLM()
    with pytest.raises(TensorcadError) as caught:
        from tensorcad.runtime.certification.step.loop import document_losses

        document_losses(step_of(model, alone=lambda ids, documents, positions: model(ids, documents, positions)[:, 1:]),
                        [read_batch(batch_of([[5, 3]]))])
    assert caught.value.path == "alone"
    assert str(caught.value) == "alone: outputs shaped (1, 4, 32) for a document of 5 tokens"


def test_a_parameter_reached_twice_is_compared_once():
    model = TinyLM()
    model_fn = lambda ids, documents, positions: model(ids, documents, positions)  # noqa: E731
    named = step_of(model_fn, alone=model_fn).named_parameters()  # the same model packed and alone
    assert [n for n, _ in named] == [n for n, _ in model.named_parameters()]
