"""A design's leak names its cause and fix: the attention whose mask keeps another document's key.

Issue 42's friction: a mask written ``doc(b, kv) <= doc(b, q)`` (each document
reading every earlier one) failed isolation with what moved and nothing else.
The pair the hint names is checked here against the batch by the test's own
reading of that mask; a second layer with the right mask is never named.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from tensorcad.runtime.building.settings import Settings  # noqa: E402
from tensorcad.runtime.building.subject import Subject  # noqa: E402
from tensorcad.runtime.certification.design.crossing import mask_cause  # noqa: E402
from tensorcad.runtime.certification.registry import certify  # noqa: E402

SETTINGS = Settings(seq=128, pack=32.0, spread=1.0, params=200_000, block_rows=32)
EARLIER = "doc(b, kv) <= doc(b, q)"
HINT = re.compile(r"(\S+): its mask `([^`]+)` keeps key (\d+) \(document (\d+)\) for query (\d+) \(document (\d+)\) "
                  r"of row (\d+): AND `doc\(b, q\) == doc\(b, kv\)` into the mask to keep each document to itself")


def layered(first_mask: str | None, second_mask: str | None) -> dict:
    """Two causal document layers, each with its own mask (None: no mask at all)."""
    dim, vocab = 64, 64

    def stack(source: str, mask: str | None) -> dict:
        attention = {"heads": 4, "head_dim": 16, "causal": True, "rope": {"theta": 10000}}
        attention.update({"mask": mask} if mask else {})
        wired = {"x": source, "doc": "documents"} if mask else {"x": source}
        return {"kind": "stack", "in": wired, "params": {"repeat": 1, "block": {
            "kind": "transformer_block", "params": {"dim": dim, "norm": "rmsnorm",
                                                    "mlp": {"hidden": 2 * dim, "activation": "swiglu"},
                                                    "attention": attention}}}}

    return {"name": "tiny-crossing", "context": 256,
            "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
            "nodes": [
                {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
                {"id": "first", **stack("embed", first_mask)},
                {"id": "second", **stack("first", second_mask)},
                {"id": "norm", "kind": "rmsnorm", "in": {"x": "second"}},
                {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": vocab}}],
            "output": "head"}


def _isolation(design: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return certify(design, SETTINGS, only=["isolation[eager]"])[0]


def test_a_mask_reading_earlier_documents_is_named_with_its_pair_and_its_fix():
    design = layered("doc(b, q) == doc(b, kv)", EARLIER)
    check = _isolation(design)
    assert check.status == "failed"
    [hint] = [line for line in check.message.splitlines() if HINT.fullmatch(line)]
    path, mask, key, key_doc, query, query_doc, row = HINT.fullmatch(hint).groups()
    assert "nodes[2]" in path and mask == EARLIER  # the second layer, as written; not the first
    _, documents, _ = Subject(design, SETTINGS).batch
    key, query, row = int(key), int(query), int(row)
    # the pair is one the written mask keeps (causal, an earlier document) and crosses two documents
    assert int(documents[row, key]) == int(key_doc) < int(documents[row, query]) == int(query_doc)
    assert key <= query
    # and the first such pair, read row by row, query by query: nothing the mask keeps across documents before it
    for r in range(row + 1):
        d = documents[r]
        kept = (d[None, :] <= d[:, None]) & torch.ones(len(d), len(d), dtype=torch.bool).tril() \
            & (d[None, :] != d[:, None])
        if r < row:
            assert not kept.any()
        else:
            assert tuple(int(i) for i in kept.nonzero()[0]) == (query, key)


def test_a_layer_with_no_mask_is_named_and_told_to_read_the_documents():
    check = _isolation(layered("doc(b, q) == doc(b, kv)", None))
    assert check.status == "failed"
    assert "nodes[2]" in check.message and "it has no mask and keeps key" in check.message
    assert ("AND a port wired from the documents input, read as `doc(b, q) == doc(b, kv)`, into the mask"
            in check.message)


def test_an_isolated_design_has_no_cause_and_passes():
    design = layered("doc(b, q) == doc(b, kv)", "doc(b, q) == doc(b, kv)")
    assert _isolation(design).status == "passed"
    subject = Subject(design, SETTINGS)
    assert mask_cause(subject.small, *subject.batch[1:]) is None


def test_one_document_a_row_crosses_nothing():
    subject = Subject(layered(EARLIER, EARLIER), replace(SETTINGS, pack=None))
    _, documents, positions = subject.batch
    assert mask_cause(subject.small, torch.zeros_like(documents), positions) is None
