"""Multi-token prediction on a generated model: each head's targets held within documents, named when they cross.

The model is a generated two-layer design with the document mask, wrapped with
DeepSeek-V3's MTP modules (`runtime.building.mtp.with_mtp`: its embedding and head
shared, each depth a fresh block of its own class). The planted bug rolls the row
(``torch.roll``) instead of each document, as Megatron-LM #4495 did; the first
position each head must name is found here by walking the batch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.runtime.building.generated import build  # noqa: E402
from tensorcad.runtime.building.mtp import with_mtp  # noqa: E402
from tensorcad.runtime.certification import check_isolation  # noqa: E402
from tensorcad.runtime.certification.step.certificates import certify_step  # noqa: E402
from tensorcad.runtime.certification.step.next_token import SHIFT, next_token_labels, next_token_loss  # noqa: E402

VOCAB, LENGTHS = 64, [[7, 12, 3, 10], [20, 12]]


def generated():
    design = tensorcad.load({
        "name": "tiny-mtp", "context": 64, "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"},
                                                   "positions": {"role": "positions"}},
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": VOCAB, "dim": 32}},
            {"id": "layers", "kind": "stack", "in": {"x": "embed", "doc": "documents", "pos": "positions"},
             "params": {"repeat": 2, "block": {"kind": "transformer_block", "params": {
                 "mlp": {"hidden": 64}, "attention": {"heads": 4, "causal": True, "rope": {"theta": 10000},
                                                      "mask": "doc(b, q) == doc(b, kv)"}}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": VOCAB}},
        ],
        "output": "head",
    })
    return build(design, form="eager")


def batch():
    documents = torch.stack([torch.cat([torch.full((n,), d) for d, n in enumerate(row)]) for row in LENGTHS])
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "documents": documents, "labels": next_token_labels(ids, documents)}


def first_crossing(documents: torch.Tensor, k: int) -> tuple[int, int]:
    """(row, t): the first output a whole-row roll trains head k on another document's token, walked here."""
    rows, seq = documents.shape
    for r in range(rows):
        for t in range(seq - k - 1):
            # the main target at t + k is real (t + k + 1 in its document), but t + k is past t's document
            if documents[r, t + k] != documents[r, t] and documents[r, t + k + 1] == documents[r, t + k]:
                return r, t
    raise AssertionError("no crossing in this batch")


@pytest.mark.parametrize("depth", [1, 2])
def test_the_clean_roll_passes_every_step_certificate(depth):
    model = with_mtp(generated(), depth)
    report = certify_step(model, batch(), loss=next_token_loss, shift=SHIFT, accumulation="num_items_in_batch")
    assert report.passed, report.message()
    labels = report.results["step[labels]"]
    assert labels.depth == depth and labels.heads == ()
    assert f"the {depth} MTP heads' targets each within its document" in labels.message()
    # the heads' targets are the tokens k + 1 ahead within each document, written out here
    given = batch()
    targets = model.mtp_targets(given["labels"], given["documents"])
    ids, documents = given["input_ids"], given["documents"]
    for k in range(1, depth + 1):
        for r in range(ids.shape[0]):
            for t in range(ids.shape[1]):
                inside = t + k + 1 < ids.shape[1] and documents[r, t + k + 1] == documents[r, t]
                assert int(targets[k - 1, r, t]) == (int(ids[r, t + k + 1]) if inside else -100)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_roll_across_the_boundary_fails_step_labels_naming_the_head(depth):
    model = with_mtp(generated(), depth, roll="plain")
    given = batch()
    report = certify_step(model, given, loss=next_token_loss, shift=SHIFT, only=["step[labels]"])
    result = report.results["step[labels]"]
    assert not result.passed
    for k in range(1, depth + 1):
        r, t = first_crossing(given["documents"], k)
        d = int(given["documents"][r, t])
        line = next(h for h in result.heads if h.startswith(f"head {k}: "))
        end = int((given["documents"][r] == d).nonzero()[-1])
        assert line.startswith(f"head {k}: row {r}: the output at position {t} of document {d} (its last at {end}) "
                               "is trained on ")
        assert f"a target of document {d + 1}: the roll crosses the boundary at position" in line
    assert result.message().startswith("head 1: ")
    # the main head's labels are right: only the heads fail
    assert not result.crossings and not result.padded


@pytest.mark.parametrize("depth", [1, 2])
def test_every_head_is_isolated_only_with_the_roll_inside_documents(depth):
    given = batch()
    ids, documents = given["input_ids"], given["documents"]
    clean = with_mtp(generated(), depth)
    assert clean.all_logits(ids, documents).shape == (*ids.shape, (1 + depth) * VOCAB)
    assert check_isolation(clean.all_logits, ids, documents, vocab=VOCAB).passed
    planted = with_mtp(generated(), depth, roll="plain")
    leaked = check_isolation(planted.all_logits, ids, documents, vocab=VOCAB)
    assert not leaked.passed
    # what leaks is a document's last `depth` positions, reading the next document's first tokens
    for leak in leaked.leaks:
        assert leak.moved_document == leak.document - 1 and leak.moved_row == leak.row
