"""rules/experts.py to the letter (issue 44's mutation): each warning word for word, when packing is on (a
documents input or an operating point that packs), the layers counted per moe node and each node apart."""

import copy

from moe_designs import BASE, MLP, design  # tests/, on sys.path (its conftest)

from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.design import load
from tensorcad.packing import Packing
from tensorcad.rules import check
from tensorcad.rules.registry import RULES

CAPACITY = ("layers.block.mlp ({layers}) drops tokens past capacity factor {factor} counted over {group}: a token "
            "of one packed document is dropped when tokens of other documents that {order} {group} filled its "
            "expert, so each document's output depends on what it is packed with; train dropless (capacity null, "
            "drop 'none') or raise the capacity until none drop")
SEQUENCE = ("layers.block.mlp's sequence-wise balance loss (coefficient {coef}) averages the routing over a "
            "sequence; on packed rows the sequence is the row, so it balances the row's documents together, not "
            "each document as DeepSeek-V3 trains it (Megatron-LM #5696): compute it per document (the documents "
            "input) or scope it to the micro_batch")


def moe_diagnostics(d, op=None):
    return [(x.rule, x.severity, x.path, x.message) for x in check(load(d), op) if x.rule.startswith("moe-")]


def test_the_rules_are_registered_as_warnings_with_their_docs():
    capacity, sequence = RULES["moe-capacity-packed"], RULES["moe-sequence-aux-packed"]
    assert capacity.severity == sequence.severity == "warn"
    assert capacity.doc == ("packing is on and a mixture of experts drops tokens past a capacity: a token of one "
                            "document can be dropped for another document's tokens, so documents depend on each "
                            "other")
    assert sequence.doc == ("packing is on and a load-balancing loss is scoped to the sequence: the sequence it "
                            "averages over is the packed row, not a document")


def test_both_warnings_word_for_word_on_one_layer():
    d = design({**BASE, "capacity": 1.25, "drop": "probs", "capacity_scope": "batch", "aux_loss": 1e-3,
                "aux_scope": "sequence"}, documents=True)
    d["nodes"][1]["params"]["repeat"] = 1
    assert moe_diagnostics(d) == [
        ("moe-sequence-aux-packed", "warn", f"{MLP}.aux_scope", SEQUENCE.format(coef="0.001")),  # by path
        ("moe-capacity-packed", "warn", f"{MLP}.drop",
         CAPACITY.format(layers="1 layer", factor="1.25", group="the micro-batch (every row)",
                         order="scored higher in")),
    ]


def test_a_row_scoped_position_drop_over_two_layers():
    d = design({**BASE, "capacity": 1.0, "drop": "position"}, documents=True)
    assert moe_diagnostics(d) == [
        ("moe-capacity-packed", "warn", f"{MLP}.drop",
         CAPACITY.format(layers="2 layers", factor="1", group="its row", order="came earlier in")),
    ]


def test_an_operating_point_that_packs_turns_the_rules_on_without_a_documents_input():
    d = design({**BASE, "capacity": 2.0, "drop": "position", "aux_loss": 0.01, "aux_scope": "sequence"})
    assert moe_diagnostics(d) == []  # no documents input, the default operating point packs nothing
    packs = OperatingPoint(seq=64, packing=Packing(16, 0))
    assert [r for r, *_ in moe_diagnostics(d, packs)] == ["moe-sequence-aux-packed", "moe-capacity-packed"]
    assert moe_diagnostics(d, OperatingPoint(seq=64)) == []


def test_each_moe_node_is_named_once_with_its_own_layers():
    d = design({**BASE, "capacity": 1.0, "drop": "position"}, documents=True)
    second = copy.deepcopy(d["nodes"][1])
    second["id"], second["in"]["x"], second["params"]["repeat"] = "more", "layers", 3
    d["nodes"].insert(2, second)
    d["nodes"][3]["in"]["x"] = "more"
    found = moe_diagnostics(d)
    assert [(path, message.split(" drops")[0]) for _, _, path, message in found] == [
        (f"{MLP}.drop", "layers.block.mlp (2 layers)"),
        ("nodes[2].params.block.params.mlp.drop", "more.block.mlp (3 layers)"),
    ]


def test_silent_where_nothing_drops_or_nothing_is_sequence_scoped():
    for moe in ({}, {"aux_loss": 0.0, "aux_scope": "sequence"},
                {"aux_loss": 1e-3, "aux_scope": "micro_batch"}, {"aux_loss": 1e-3, "aux_scope": "global_batch"}):
        assert moe_diagnostics(design({**BASE, **moe}, documents=True)) == [], moe
