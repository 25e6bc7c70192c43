"""The capacity cause to the letter (issue 44's mutation): the line it gives is the first token the test's own walk
finds, scanning rows, documents, layers and each document's tokens in order, for a row-scoped and a batch-scoped
capacity, on a design whose positions restart at each document (so a document alone is run at its own positions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from moe_designs import BASE, design  # noqa: E402 - tests/, on sys.path
from test_capacity import SETTINGS, routed, walk  # noqa: E402 - this folder, on sys.path

from tensorcad.runtime.building.subject import Subject  # noqa: E402
from tensorcad.runtime.certification.design.capacity import capacity_cause  # noqa: E402

FACTOR = 0.5


def positioned(scope):
    raw = design({**BASE, "capacity": FACTOR, "drop": "position", "capacity_scope": scope}, documents=True)
    raw["inputs"]["pos"] = {"role": "positions"}
    raw["nodes"][1]["in"]["pos"] = "pos"
    return raw


def expected_line(subject, scope):
    """The first (row, document, layer, token, slot) the packed batch drops and the document alone keeps, by the
    test's walk over the routers' choices (each row a group, or the whole batch one)."""
    ids, documents, positions = subject.batch
    model = subject.model("eager")
    names = [n for n, m in model.module.named_modules() if hasattr(m, "capacity_factor")]
    model.form = "flex"
    rows, width = ids.shape
    packed = {}
    for name in names:
        chosen = routed(subject, name, ids, documents, positions)  # (B, T, K)
        if scope == "row":
            packed[name] = torch.stack([walk(chosen[r], FACTOR) for r in range(rows)]), chosen
        else:
            packed[name] = walk(chosen.reshape(rows * width, -1), FACTOR).reshape(rows, width, -1), chosen
    for row in range(rows):
        for document in torch.unique(documents[row]).tolist():
            where = torch.nonzero(documents[row] == document).flatten()
            first, end = int(where[0]), int(where[-1]) + 1
            for name in names:
                kept, chosen = packed[name]
                alone = walk(routed(subject, name, ids[row:row + 1, first:end],
                                    torch.zeros_like(ids[row:row + 1, first:end]),
                                    torch.arange(end - first)[None])[0], FACTOR)
                lost = (kept[row, first:end] == 0) & (alone != 0)
                if bool(lost.any()):
                    position, slot = (int(i) for i in torch.nonzero(lost)[0])
                    expert = int(chosen[row, first + position, slot])
                    over = "each row" if scope == "row" else "the whole batch"
                    return (f"{name}: its experts' capacity (factor {FACTOR:g}, counted over {over}) drops token "
                            f"{position} of document {document} of row {row} at expert {expert}, which that "
                            "document alone keeps: in a packed row documents compete for each expert's slots; "
                            "a capacity of null is dropless and keeps them apart"), (row, first, position)
    return None, None


@pytest.mark.parametrize("scope", ["row", "batch"])
def test_the_named_token_is_the_first_the_tests_walk_finds(scope):
    subject = Subject(positioned(scope), SETTINGS)
    ids, documents, _ = subject.batch
    assert ids.shape[0] > 1  # rows and the batch are different groups
    line, (row, first, position) = expected_line(subject, scope)
    assert line is not None and (position > 0 or scope == "batch")  # by row: a token inside its document
    model = subject.model("eager")
    assert capacity_cause(subject) == line
    assert model.form == "flex"  # left as every other check finds it
