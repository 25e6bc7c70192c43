"""The training step of Hugging Face Llama and Qwen2, packed by DataCollatorWithFlattening, their own loss.

Every expected verdict is computed here first: each document run by itself
through the model (``model(input_ids=document)``), its cross-entropy against
its own next tokens, the token mean, and ``torch.autograd.grad`` of both.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import torch.nn.functional as F  # noqa: E402

from hf_setups import LENGTHS, collated, features, tiny_model  # noqa: E402

from tensorcad.testing import (  # noqa: E402
    CertificateError,
    assert_step_accumulation,
    assert_step_faithful,
    assert_step_labels,
    assert_step_loss,
)

FAMILIES = ("llama", "qwen2")


def spans(lengths):
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    return [(s, s + n) for s, n in zip(starts, lengths)]


def alone_loss(model, ids, lengths):
    """The token mean of every document run by itself, each trained on its own next tokens."""
    total, count = 0.0, 0
    for first, end in spans(lengths):
        logits = model(input_ids=ids[:, first:end], use_cache=False).logits[0]
        total = total + F.cross_entropy(logits[:-1], ids[0, first + 1:end], reduction="sum")
        count += end - first - 1
    return total / count


def packed_loss(model, batch, **extra):
    inputs = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    return model(**inputs, use_cache=False, **extra).loss


def flat_gradient(model, loss):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_collators_batch_and_the_models_own_loss_with_num_items_pass_all_five(family):
    model = tiny_model(family)
    ids, documents, positions, batch = collated(LENGTHS)
    model.train()
    count = int((batch["labels"][:, 1:] != -100).sum())  # as Trainer counts num_items_in_batch
    packed = packed_loss(model, batch, num_items_in_batch=torch.tensor(count))
    alone = alone_loss(model, ids, LENGTHS)
    assert abs(packed.item() - alone.item()) < 1e-5
    reference = flat_gradient(model, alone)
    assert float((flat_gradient(model, packed) - reference).norm()) < 1e-4 * float(reference.norm())
    model.eval()
    report = assert_step_faithful(model, batch, reduction="token", accumulation="num_items_in_batch")
    assert set(report.results) == {"step[labels]", "step[loss]", "step[gradients]", "step[accumulation]",
                                   "eval[parity]"} and report.passed and not report.not_run
    loss = report.results["step[loss]"]
    assert loss.packed == pytest.approx(packed.item(), abs=1e-5)
    assert loss.reference == pytest.approx(alone.item(), abs=1e-5)
    assert report.results["step[labels]"].how.startswith("the model's own loss shifts")
    assert report.results["step[accumulation]"].targets[0] + report.results["step[accumulation]"].targets[1] == count
    assert not model.training


def test_labels_copied_from_the_ids_fail_labels_at_the_first_boundary_and_the_loss():
    model = tiny_model("llama")
    ids, documents, positions, batch = collated(LENGTHS)
    batch = {**batch, "labels": ids.clone()}  # no -100 at the documents' first tokens
    model.train()
    with torch.no_grad():
        packed, alone = float(packed_loss(model, batch)), float(alone_loss(model, ids, LENGTHS))
    assert abs(packed - alone) > 1e-4  # the verdict: 7 targets from the next document
    first_end = LENGTHS[0]  # the first boundary, from the lengths the collator was given
    with pytest.raises(CertificateError) as caught:
        assert_step_labels(model, batch)
    crossing = caught.value.report.crossings[0]
    assert (crossing.row, crossing.document, crossing.position, crossing.label_position) == (0, 0, first_end - 1, first_end)
    assert len(caught.value.report.crossings) == len(LENGTHS) - 1
    assert str(caught.value).startswith(f"labels cross documents\nrow 0: the label at position {first_end} ")
    assert "the collator must write -100 at every document's first label" in str(caught.value)
    with pytest.raises(CertificateError) as caught:
        assert_step_loss(model, batch)
    assert caught.value.report.packed == pytest.approx(packed, abs=1e-5)
    assert caught.value.report.reference == pytest.approx(alone, abs=1e-5)


def test_the_cache_at_its_default_fails_the_loss():
    model = tiny_model("llama")
    ids, documents, positions, batch = collated(LENGTHS)
    with torch.no_grad():
        model.train()
        leaked = float(model(input_ids=ids, labels=batch["labels"], position_ids=positions).loss)
        alone = float(alone_loss(model, ids, LENGTHS))
    assert abs(leaked - alone) > 1e-4  # with a cache transformers reads no packing: documents see each other
    with pytest.raises(CertificateError, match="the documents' own, weighed as `token` weighs them: the packed "
                                               "forward computes them otherwise than the documents run alone"):
        assert_step_loss(model, {**batch, "use_cache": True})


def test_micro_batches_collated_apart_and_each_averaged_fail_and_num_items_in_batch_passes():
    model = tiny_model("qwen2")
    examples = features(LENGTHS)
    collator = transformers.DataCollatorWithFlattening()
    micro = [collator(examples[:2]), collator(examples[2:])]  # 47 and 105 targets
    counts = [int((b["labels"][:, 1:] != -100).sum()) for b in micro]
    assert counts == [47, 105]
    model.train()
    mean = sum(flat_gradient(model, packed_loss(model, b) / 2) for b in micro)
    ids = torch.cat([b["input_ids"] for b in micro], dim=1)
    reference = flat_gradient(model, alone_loss(model, ids, LENGTHS))
    gap = float((mean - reference).norm() / reference.norm())
    assert gap > 1e-2  # the verdict
    model.eval()
    with pytest.raises(CertificateError) as caught:
        assert_step_accumulation(model, micro, accumulation="mean")
    assert caught.value.report.comparison.total_gap == pytest.approx(gap, rel=1e-3)
    assert f"give a gradient {gap:.3g} of its norm away" in str(caught.value)
    assert "a target weighs 1/94 and 1/210, where the batch's token mean weighs each 1/152" in str(caught.value)
    result = assert_step_accumulation(model, micro)  # num_items_in_batch, the Trainer's way
    assert result.targets == (47, 105) and result.passed


def test_a_hugging_face_model_behind_the_adapter_keeps_its_own_loss():
    from tensorcad.hf import hf_causal_lm
    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.certification.subjects.model import ModelSubject
    from tensorcad.runtime.certification.step.certificates import subject_step

    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config)
    ids, documents, positions, _ = collated(LENGTHS)
    step, batch, shift = subject_step(ModelSubject(hf_causal_lm(hf), Settings(), given_batch=(ids, documents,
                                                                                             positions)))
    assert step.model is hf and step.own_loss and shift is None  # the collected item calls it as a Trainer does
    assert int((batch["labels"] == -100).sum()) == len(LENGTHS)  # the collator's -100s


def test_a_small_llama_its_own_loss_alone_and_padded():
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.certification.step.eval_parity import check_eval_parity
    from tensorcad.runtime.certification.step.batch import read_batch
    from tensorcad.runtime.certification.step.loss import check_loss
    from tensorcad.runtime.certification.step.loop import step_of

    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    lengths = (5, 9, 3)
    batch = transformers.DataCollatorWithFlattening(return_seq_idx=True)(
        [{"input_ids": list(range(k, k + n))} for k, n in zip((1, 8, 20), lengths)])
    step = step_of(model)
    assert step.hf and step.own_loss
    assert not step_of(model, lambda logits, labels: logits.sum()).own_loss
    read = read_batch({**batch, "documents": batch["seq_idx"].long()}, loss_shifts=True)
    inputs = step._hf_inputs(read, labels=False)
    assert "documents" not in inputs and "labels" not in inputs and inputs["use_cache"] is False
    assert step._hf_inputs(read, labels=True)["labels"] is read.inputs["labels"]
    assert read_batch({**batch, "use_cache": True}).inputs["use_cache"] is True  # the batch's own, kept
    with torch.no_grad():
        loss, logits = step.loss_and_logits(read)
        alone = [step.alone_logits(read.ids[:, s:e]) for s, e in spans(lengths)]
        count = int((batch["labels"][:, 1:] != -100).sum())
        summed, _ = step.loss_and_logits(read, count)
        padded = step.padded_logits(torch.tensor([[1, 2, 3], [4, 5, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]).bool())
        # a loss of the user's on the model's logits: the packed forward is the model's own, without the labels
        users = step_of(model, lambda logits, labels: F.cross_entropy(logits[0, :-1], labels[0, 1:])).logits(read)
    assert torch.equal(users, logits)
    assert logits.shape == (1, 17, 32) and float(summed) == pytest.approx(float(loss), rel=1e-6)
    assert float((logits[0, 5:14] - alone[1][0]).abs().max()) < 1e-5  # the second document, packed and alone
    assert padded.shape == (2, 3, 32)
    with torch.no_grad():
        assert float((padded[1, :2] - model(input_ids=torch.tensor([[4, 5]])).logits[0]).abs().max()) < 1e-5
    assert check_loss(step, read).passed and check_eval_parity(step, read).passed
    bare = transformers.LlamaModel(config)  # no head: no loss
    with pytest.raises(TensorcadError, match="^loss: LlamaModel returned no loss for the batch's labels$") as caught:
        step_of(bare).loss_and_logits(read)
    assert caught.value.path == "loss"


def test_the_step_certifies_the_call_the_loop_makes_and_names_it():
    # A config with the cache on (what save_pretrained writes): the Trainer's call (use_cache=False) keeps the
    # documents apart, a plain model(**batch) does not. Each verdict established first, by the model's own loss.
    model = tiny_model("llama")
    model.config.use_cache = True
    ids, documents, positions, batch = collated(LENGTHS)
    model.train()
    inputs = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    with torch.no_grad():
        alone = float(alone_loss(model, ids, LENGTHS))
        trainer = float(model(**inputs, use_cache=False).loss)
        plain = float(model(**inputs).loss)
    assert abs(trainer - alone) < 1e-5 < 1e-3 < abs(plain - alone)
    assert_step_loss(model, inputs, call="trainer")
    with pytest.raises(CertificateError, match="the loss is not the documents' own") as caught:
        assert_step_loss(model, inputs, call="plain")
    assert caught.value.report.packed == pytest.approx(plain, abs=1e-5)
    from tensorcad.runtime.certification import certify_step

    report = certify_step(model, inputs, only=["step[loss]"], call="plain")
    assert report.call == "plain (model(**batch): use_cache=True as the config says)"
    assert report.message().endswith("\ncall: plain (model(**batch): use_cache=True as the config says)")
    with pytest.raises(Exception, match="call: unknown call 'fast' \\(calls: trainer, plain"):
        certify_step(model, inputs, only=["step[loss]"], call="fast")


@pytest.mark.parametrize("rows", [1, 2])
def test_accumulation_on_a_batch_with_a_4d_mask_gives_a_verdict(rows):
    # A 4D block-diagonal mask (same document, not later) in the batch: each micro-batch's mask is cut with its
    # queries and keys, not handed whole to a shorter row (a raw shape error before). Llama has no window, so the
    # mask is faithful: established first by its own loss, packed under the mask against each document alone.
    from hf_setups import block_diagonal

    model = tiny_model("llama")
    ids, documents, positions, batch = collated(LENGTHS)
    inputs = {"input_ids": ids, "labels": batch["labels"], "position_ids": positions,
              "attention_mask": block_diagonal(documents)}
    if rows == 2:
        inputs = {k: torch.cat([v, v]) for k, v in inputs.items()}
    model.train()
    with torch.no_grad():
        packed = float(model(**{k: v[:1] for k, v in inputs.items()}, use_cache=False).loss)
        assert abs(packed - float(alone_loss(model, ids, LENGTHS))) < 1e-5
    result = assert_step_accumulation(model, inputs, accumulation="num_items_in_batch")
    assert result.passed
