"""Labels within documents: a crossing found where it is, in either shift convention, and named."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from step_models import batch_of, spans  # noqa: E402

from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.labels import check_labels  # noqa: E402

LENGTHS = [[3, 5, 2], [4, 6]]


def test_the_collators_labels_stay_within_documents():
    for labels in ("inside", "shifted"):
        result = check_labels(read_batch(batch_of(LENGTHS, labels=labels)))
        assert result.passed and not result.crossings
        assert result.supervised == 20 - 5 and result.documents == 5  # a target a token, less each document's last
        how = ("detected: labels equal input_ids at every supervised position (the loss shifts them)"
               if labels == "inside" else
               "detected: labels[t] equals input_ids[t + 1] at every supervised position (already shifted)")
        assert result.shift == labels and result.how == how
        assert result.message() == ("labels within documents: 15 targets over 5 documents, each predicted from a "
                                    f"position of its own document (labels {labels}: {how})")
        assert result.to_json() == {"passed": True, "crossings": 0, "first": None, "supervised": 15, "documents": 5,
                                    "shift": labels, "how": how, "conflict": None, "message": result.message()}


def test_labels_copied_from_the_ids_cross_at_every_boundary_and_the_first_is_named():
    batch = batch_of(LENGTHS)
    batch["labels"] = batch["input_ids"].clone()
    result = check_labels(read_batch(batch))
    # the crossings, found here by walking each row: a document's last position, when another follows in the row
    expected = [(r, end - 1) for r, first, end in spans(batch["documents"]) if end < 10]
    assert [(c.row, c.position) for c in result.crossings] == expected == [(0, 2), (0, 7), (1, 3)]
    first = result.crossings[0]
    assert (first.document, first.label_position, first.next_document) == (0, 3, 1)
    assert first.label == int(batch["input_ids"][0, 3])
    assert not result.passed
    assert result.message() == (f"row 0: the label at position 3 ({first.label}, the first of document 1) is "
                                "predicted from position 2, the last of document 0: the collator must write -100 "
                                "at every document's first label (DataCollatorWithFlattening does) (2 more crossings)")
    assert result.to_json() == {
        "passed": False, "crossings": 3, "supervised": 18, "documents": 5, "shift": "inside",
        "how": "detected: labels equal input_ids at every supervised position (the loss shifts them)",
        "conflict": None, "message": result.message(),
        "first": {"row": 0, "document": 0, "position": 2, "labelPosition": 3, "label": first.label,
                  "nextDocument": 1}}


def test_the_document_after_a_crossing_is_the_one_that_begins_there():
    batch = batch_of([[3, 1]])  # a one-token document last: the crossing's neighbour, then the row's end
    batch["labels"] = batch["input_ids"].clone()
    (crossing,) = check_labels(read_batch(batch)).crossings
    assert (crossing.position, crossing.label_position, crossing.next_document) == (2, 3, 1)


def test_shifted_labels_cross_at_a_documents_last_label_and_at_the_rows_end():
    batch = batch_of([[3, 2]], labels="shifted")
    ids = batch["input_ids"]
    batch["labels"][0, 2] = ids[0, 3]  # the first document's last output trained on the next one's first token
    result = check_labels(read_batch(batch, shift="shifted"))
    assert [(c.row, c.document, c.position, c.label_position) for c in result.crossings] == [(0, 0, 2, 2)]
    assert result.message() == (f"row 0: the label at position 2, the last of document 0, is {int(ids[0, 3])}, a "
                                "target past the document's end (document 1 begins at 3): the collator must write "
                                "-100 at every document's last label")
    batch = batch_of([[3, 2]], labels="shifted")
    batch["labels"][0, 4] = 5
    (crossing,) = check_labels(read_batch(batch, shift="shifted")).crossings
    assert crossing.next_document is None
    assert crossing.message() == ("row 0: the label at position 4, the last of document 1, is 5, a target past the "
                                  "document's end (the row ends there): the collator must write -100 at every "
                                  "document's last label")
    assert "1 more crossing)" in check_labels(read_batch({**batch, "labels": torch.where(
        torch.arange(5) == 2, ids[0, 3], batch["labels"])}, shift="shifted")).message()


def test_labels_the_loss_would_shift_twice_fail_saying_so():
    result = check_labels(read_batch(batch_of(LENGTHS, labels="shifted"), loss_shifts=True))
    assert not result.passed  # read as the loss reads them they cross too, but the message says why first
    assert "two tokens ahead" in result.message() and result.to_json()["conflict"] == result.message()
