"""design.masks: the mask facts every layer asks, pinned on parsed designs."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.design import masks
from dataclasses import replace

from tensorcad.design.expr import Compare, Read, Var
from tensorcad.errors import TensorcadError

DOCS = {"doc": "documents", "pos": "positions"}


def _attention(mask="doc(b, q) == doc(b, kv)", causal=True, window=None):
    raw = tensorcad.load("nano-sort").to_dict()
    attention = raw["nodes"][1]["params"]["block"]["params"]["attention"]
    attention.update(causal=causal, mask=mask)
    if window is not None:
        attention["window"] = window
    (a, _), *_ = tensorcad.load(raw).attentions()
    return a


def _read(port, at):
    return Read(port, (Var("b"), Var(at)))


@pytest.mark.parametrize("expr, same", [
    (Compare("==", _read("doc", "q"), _read("doc", "kv")), True),
    (Compare("==", _read("doc", "kv"), _read("doc", "q")), True),
    (Compare(">=", _read("doc", "q"), _read("doc", "kv")), False),
    (Compare("==", _read("doc", "q"), _read("doc", "q")), False),
    (Compare("==", _read("pos", "q"), _read("pos", "kv")), False),  # positions, not documents
])
def test_same_document_is_exactly_the_equality_of_a_documents_port(expr, same):
    assert masks.is_same_document(expr, DOCS) is same


def test_facts_of_a_document_causal_attention():
    f = masks.facts(_attention("doc(b, q) == doc(b, kv)"))
    assert f.same_document and f.causal and f.window is None and f.document_causal
    assert f.reads_documents and set(f.reads.values()) == {"documents"} and not f.keeps_all


def test_a_window_is_a_part_of_its_own():
    f = masks.facts(_attention("doc(b, q) == doc(b, kv)", window=16))
    assert f.same_document and f.window == 16 and not f.document_causal


def test_no_mask_reads_nothing():
    raw = tensorcad.load("gpt2-small").to_dict()
    raw["nodes"][2]["params"]["block"]["params"]["attention"]["causal"] = False
    (attention, _), *_ = tensorcad.load(raw).attentions()
    f = masks.facts(attention)
    assert f.keeps_all and not f.reads_documents and not f.same_document and f.reads == {}


def test_countable_splits_causal_and_same_document():
    keep = _attention("doc(b, q) == doc(b, kv)").keep
    role_of = {port: w.role for port, w in _attention("doc(b, q) == doc(b, kv)").tensors.items()}
    assert masks.countable(keep, role_of) == (True, True)
    assert masks.keeps_only_the_past(keep)
    leaky = _attention("doc(b, q) >= doc(b, kv)")
    assert masks.countable(leaky.keep, role_of) is None


def test_only_documents_and_positions_can_be_made_up():
    assert masks.made_up_roles(_attention("doc(b, q) == doc(b, kv)")) == {
        p: "documents" for p in _attention("doc(b, q) == doc(b, kv)").tensors}
    with pytest.raises(TensorcadError, match="can only make up documents or positions"):
        a = _attention()
        masks.made_up_roles(replace(a, tensors={p: replace(w, role="tokens") for p, w in a.tensors.items()}))


def test_the_block_is_flexattentions_default():
    flex_attention = pytest.importorskip("torch.nn.attention.flex_attention")
    assert masks.BLOCK == flex_attention._DEFAULT_SPARSE_BLOCK_SIZE
