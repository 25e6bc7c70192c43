"""The mixture-of-experts rules under packing: capacity dropping and a sequence-wise balance loss."""

from tensorcad.design import load
from tensorcad.rules import check
from moe_designs import BASE, MLP, design  # tests/, on sys.path (its conftest)


def found(moe: dict, documents: bool) -> dict[str, list]:
    out: dict[str, list] = {}
    for d in check(load(design({**BASE, **moe}, documents=documents))):
        if d.rule.startswith("moe-"):
            out.setdefault(d.rule, []).append(d)
    return out


def test_capacity_dropping_under_packing_warns_that_documents_depend_on_each_other():
    [d] = found({"capacity": 1.0, "drop": "position"}, documents=True)["moe-capacity-packed"]
    assert d.severity == "warn" and d.path == f"{MLP}.drop"
    assert "2 layers" in d.message and "capacity factor 1" in d.message and "its row" in d.message
    assert "depends on what it is packed with" in d.message


def test_a_batch_scoped_capacity_names_the_micro_batch():
    [d] = found({"capacity": 1.25, "drop": "probs", "capacity_scope": "batch"}, True)["moe-capacity-packed"]
    assert "the micro-batch (every row)" in d.message and "scored higher" in d.message


def test_dropless_or_unpacked_is_silent():
    assert found({}, documents=True) == {}
    assert found({"capacity": 1.0, "drop": "position"}, documents=False) == {}


def test_a_sequence_wise_aux_loss_under_packing_says_the_sequence_is_the_row():
    [d] = found({"aux_loss": 1e-4, "aux_scope": "sequence"}, True)["moe-sequence-aux-packed"]
    assert d.path == f"{MLP}.aux_scope" and "the sequence is the row" in d.message
    assert found({"aux_loss": 1e-4, "aux_scope": "micro_batch"}, True) == {}
    assert found({"aux_loss": 0.0, "aux_scope": "sequence"}, True) == {}
    assert found({"aux_loss": 1e-4, "aux_scope": "sequence"}, False) == {}
