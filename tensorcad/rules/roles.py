"""input-roles: what a mask reads, and what a rotation or position table turns by,
must trace back, through every stack it was handed into, to an input that holds it.

Token ids have the same shape and element type as documents or positions, so a
wire from `ids` into a mask's port would run without complaint and mean nothing:
this rule is what catches it.
"""

from __future__ import annotations

from typing import Iterator

from ..design.expr import reads
from ..design.masks import MADE_UP_ROLES
from ..design.mixers import documents_wire, mixers
from ..design.model import Design, Wire
from .registry import Diagnostic, rule

MASK_ROLES = MADE_UP_ROLES  # what a mask may read: what the engine can make up


def _route(wire: Wire) -> str:
    return " -> ".join(wire.route)


def _found(wire: Wire) -> str:
    return f"input {wire.source!r} (role {wire.role})" if wire.from_input else f"node {wire.source!r}"


@rule("input-roles", "error", "a mask's tensor must come from a documents or positions input; "
      "a rotation's or position table's positions from a positions input; a mixer's doc from a documents input")
def input_roles(design: Design, op, context) -> Iterator[Diagnostic]:
    for node, _ in design.walk():
        a = node.attention
        if a is not None and a.keep is not None:
            read = reads(a.keep)
            for port, wire in sorted(a.tensors.items()):
                if port in read and wire.role not in MASK_ROLES:
                    yield Diagnostic(
                        "input-roles", "error",
                        f"the mask reads port {port!r}, followed {_route(wire)} back to {_found(wire)}; "
                        "a mask may read only an input whose role is documents (or positions)",
                        f"{a.path}.mask",
                    )
        if node.kind in ("rope", "pos_embedding"):
            wire = node.wire("pos")
            if wire is not None and wire.role != "positions":
                what = "the rotation" if node.kind == "rope" else "the position table"
                yield Diagnostic(
                    "input-roles", "error",
                    f"{what} {node.name} turns by port 'pos', followed {_route(wire)} back to {_found(wire)}; "
                    "it must come from an input whose role is positions",
                    node.path,
                )
    for m in mixers(design):  # each mixer of the design file once, however many layers run it
        wire = documents_wire(m.node)
        if wire is not None and wire.role != "documents":
            yield Diagnostic(
                "input-roles", "error",
                f"the mixer {m.name} resets its state by port 'doc', followed {_route(wire)} back to "
                f"{_found(wire)}; it must come from an input whose role is documents",
                m.path,
            )
