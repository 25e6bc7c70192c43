"""Rules about mixtures of experts under packing: capacity that makes documents depend on each other, and a
sequence-wise auxiliary loss whose "sequence" is the packed row.

Packing is on when the operating point packs (``op.packing``) or when the design reads a documents input
(it is trained on packed rows). Routing itself is per token and keeps documents apart; two things do not:
- a capacity factor with dropping counts an expert's tokens over a group (a row, or the micro-batch), so a
  token of one document is dropped because tokens of another came first (Switch Transformers' expert
  capacity; Megatron-LM #5542: padding consumes capacity);
- DeepSeek-V3's sequence-wise balance loss averages the routing over one sequence; on a packed row the
  code's sequence is the row, not a document (Megatron-LM #5696).
"""

from __future__ import annotations

from typing import Iterator

from ..design.model import Design, Node
from ..errors import join
from .registry import Diagnostic, rule


def _packed(design: Design, op) -> bool:
    return (op is not None and op.packing is not None) or design.input("documents") is not None


def _moes(design: Design) -> list[tuple[Node, int]]:
    """Each moe node (one a design-file path: the walk visits a node once) with the layers that run it."""
    return [(node, times) for node, times in design.walk() if node.kind == "moe"]


@rule("moe-capacity-packed", "warn", "packing is on and a mixture of experts drops tokens past a capacity: "
      "a token of one document can be dropped for another document's tokens, so documents depend on each other")
def moe_capacity_packed(design: Design, op, context) -> Iterator[Diagnostic]:
    if not _packed(design, op):
        return
    for node, layers in _moes(design):
        p = node.params
        if p["drop"] == "none":
            continue
        group = "its row" if p["capacity_scope"] == "row" else "the micro-batch (every row)"
        order = "came earlier in" if p["drop"] == "position" else "scored higher in"
        yield Diagnostic(
            "moe-capacity-packed", "warn",
            f"{node.name} ({layers} layer{'s' if layers != 1 else ''}) drops tokens past capacity factor "
            f"{p['capacity']:g} counted over {group}: a token of one packed document is dropped when tokens of "
            f"other documents that {order} {group} filled its expert, so each document's output depends on what "
            "it is packed with; train dropless (capacity null, drop 'none') or raise the capacity until none drop",
            join(node.path, "drop"),
        )


@rule("moe-sequence-aux-packed", "warn", "packing is on and a load-balancing loss is scoped to the sequence: "
      "the sequence it averages over is the packed row, not a document")
def moe_sequence_aux_packed(design: Design, op, context) -> Iterator[Diagnostic]:
    if not _packed(design, op):
        return
    for node, layers in _moes(design):
        p = node.params
        if p["aux_scope"] != "sequence" or p["aux_loss"] == 0:
            continue
        yield Diagnostic(
            "moe-sequence-aux-packed", "warn",
            f"{node.name}'s sequence-wise balance loss (coefficient {p['aux_loss']:g}) averages the routing over "
            "a sequence; on packed rows the sequence is the row, so it balances the row's documents together, "
            "not each document as DeepSeek-V3 trains it (Megatron-LM #5696): compute it per document (the "
            "documents input) or scope it to the micro_batch",
            join(node.path, "aux_scope"),
        )
