"""Hostile input to the step certificates (issue 47): one line naming the bad value, in bounded time.

Before this round (measured on 049439c): labels None, a string or ragged gave torch's RuntimeError /
TypeError / ValueError; labels of int8, int16, int32 or uint8 and complex labels a RuntimeError from
cross_entropy; labels of 32 on a vocabulary of 32 "IndexError: Target 32 is out of bounds", -5 the same;
ids of 32 "IndexError: index out of range in self"; atol=inf and rtol=1e300 accepted, and a leaking model then
passed step[loss]; alone_fn=5, or one that raises, on a Hugging Face model passed (silently ignored);
cu_seq_lens_k disagreeing with cu_seq_lens_q and with position_ids passed every certificate; 4,096 two-token
documents ran with no bound (14 s on TinyLM here, past 60 s a certificate on a HF model).
"""

from __future__ import annotations

import math
import time

import pytest

torch = pytest.importorskip("torch")

from step_models import VOCAB, TinyLM, batch_of  # noqa: E402

from tensorcad.testing import assert_step_loss  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification import certify_step  # noqa: E402
from tensorcad.runtime.certification.step.limits import MAX_ATOL, MAX_RTOL, MAX_STEP_DOCUMENTS  # noqa: E402

LENGTHS = [[3, 5, 2], [4, 6]]


def _refused(path: str, call) -> str:
    with pytest.raises(TensorcadError) as caught:
        call()
    text = str(caught.value)
    assert caught.value.path == path, text
    assert "\n" not in text and len(text) <= 300, text
    return text


def _labels(value):
    batch = batch_of(LENGTHS)
    return {**batch, "labels": value}


BAD_LABELS = {
    "None": None, "a string": "abc", "ragged": [[1, 2, 3], [4]], "bytes": b"\x00\x01",
    "int8": batch_of(LENGTHS)["labels"].to(torch.int8), "int16": batch_of(LENGTHS)["labels"].to(torch.int16),
    "int32": batch_of(LENGTHS)["labels"].to(torch.int32), "uint8": batch_of(LENGTHS)["labels"].clamp(0).to(torch.uint8),
    "complex": batch_of(LENGTHS)["labels"].to(torch.complex64), "3-d": batch_of(LENGTHS)["labels"][None, None],
}


@pytest.mark.parametrize("kind", sorted(BAD_LABELS))
def test_labels_of_no_integer_kind_are_refused_naming_them(kind):
    _refused("batch.labels", lambda: certify_step(TinyLM(), _labels(BAD_LABELS[kind])))


@pytest.mark.parametrize("value", [VOCAB, VOCAB + 7, -101, -5, -1, 2**62])
def test_labels_outside_the_vocabulary_or_ignore_index_are_refused(value):
    labels = batch_of(LENGTHS)["labels"].clone()
    labels[1, 3] = value
    text = _refused("batch.labels", lambda: certify_step(TinyLM(), _labels(labels)))
    assert f"{value:,}" in text or str(value) in text


def test_labels_outside_the_vocabulary_name_the_row_and_position_on_a_hf_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    batch = {k: v for k, v in batch_of(LENGTHS).items() if k != "documents"}
    labels = batch["labels"].clone()
    labels[0, 4] = VOCAB
    text = _refused("batch.labels", lambda: assert_step_loss(model, {**batch, "labels": labels}))
    assert "row 0" in text and "position 4" in text and f"{VOCAB}" in text
    ids = batch["input_ids"].clone()
    ids[1, 2] = VOCAB + 3
    _refused("batch.input_ids", lambda: assert_step_loss(model, {**batch, "input_ids": ids}))
    # alone_fn on a HF model was silently ignored: a non-callable, or one that would differ, is refused
    _refused("alone_fn", lambda: assert_step_loss(model, batch, alone_fn=5))
    _refused("alone_fn", lambda: assert_step_loss(model, batch, alone_fn=lambda ids, documents, positions: 1 / 0))
    assert assert_step_loss(model, batch, alone_fn="model").passed  # what a HF model runs alone anyway


@pytest.mark.parametrize("value", [VOCAB, -1, 10**6])
def test_ids_past_the_vocabulary_are_refused_on_a_model_fn(value):
    batch = batch_of(LENGTHS)
    ids = batch["input_ids"].clone()
    ids[0, 0] = value
    _refused("batch.input_ids", lambda: certify_step(TinyLM(), {**batch, "input_ids": ids}))


@pytest.mark.parametrize("name, value", [("atol", math.inf), ("rtol", 1e300), ("rtol", math.nan), ("atol", -1e-9),
                                         ("rtol", "1e-5"), ("atol", True), ("rtol", MAX_RTOL * 2),
                                         ("atol", MAX_ATOL * 2), ("rtol", -math.inf)])
def test_tolerances_are_finite_and_below_the_ceiling(name, value):
    _refused(name, lambda: certify_step(TinyLM(), batch_of(LENGTHS), **{name: value}))


def test_a_leaking_model_fails_at_the_ceiling_tolerances():
    # The ceilings are below what hides a leak: TinyLM attending across documents (its loss 0.049 off the documents'
    # own, its gradient 0.41 of its norm) fails step[gradients] at the loosest rtol and step[loss] at the loosest atol.
    leak, clean, batch = TinyLM(leak=True), TinyLM(), batch_of(LENGTHS)
    assert not certify_step(leak, batch, rtol=MAX_RTOL, only=["step[gradients]"]).passed
    assert not certify_step(leak, batch, atol=MAX_ATOL, only=["step[loss]"]).passed
    assert certify_step(clean, batch, rtol=MAX_RTOL, atol=MAX_ATOL, only=["step[loss]", "step[gradients]"]).passed


@pytest.mark.parametrize("alone", [5, "model", object()])
def test_an_alone_that_is_not_callable_is_refused(alone):
    _refused("alone", lambda: certify_step(TinyLM(), batch_of(LENGTHS), alone=alone))


def _flash(batch: dict, **changed) -> dict:
    cu = torch.tensor([0, 3, 8, 10, 14, 20], dtype=torch.int32)
    out = {k: v for k, v in batch.items() if k != "documents"}
    return {**out, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu.clone(), "max_length_q": 6, "max_length_k": 6, **changed}


def test_cu_seq_lens_k_must_agree_with_cu_seq_lens_q():
    batch = batch_of(LENGTHS)
    assert certify_step(TinyLM(), _flash(batch), only=["step[labels]"]).passed  # the agreeing batch is read
    other = torch.tensor([0, 3, 6, 10, 14, 20], dtype=torch.int32)
    _refused("batch.cu_seq_lens_k", lambda: certify_step(TinyLM(), _flash(batch, cu_seq_lens_k=other)))
    _refused("batch.cu_seq_lens_k", lambda: certify_step(TinyLM(), _flash(batch, cu_seq_lens_k=other[:3])))
    _refused("batch.cu_seq_lens_k", lambda: certify_step(TinyLM(), _flash(batch, cu_seq_lens_k=None)))
    _refused("batch.cu_seq_lens_q", lambda: certify_step(TinyLM(), _flash(batch, cu_seq_lens_q="x")))


def test_thousands_of_documents_are_refused_at_once_past_the_cap():
    started = time.perf_counter()
    text = _refused("batch", lambda: certify_step(TinyLM(), batch_of([[2] * 4096])))
    assert time.perf_counter() - started < 2.0
    assert f"{MAX_STEP_DOCUMENTS:,}" in text and "4,096" in text
    started = time.perf_counter()
    assert certify_step(TinyLM(), batch_of([[2] * MAX_STEP_DOCUMENTS]), accumulation="num_items_in_batch").passed
    assert time.perf_counter() - started < 30  # measured 1.9 s on TinyLM
