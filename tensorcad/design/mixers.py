"""Mixer facts: what a stateful token mixer carries and where its state resets, answered once.

Attention keeps packed documents apart with a mask. A mixer that carries state along
the row (a short convolution, a state-space scan, linear attention) has no mask to
give: it keeps documents apart only by *resetting* its state at each document's first
token, so that position t reads position s < t only when both lie in one document,
as if each document ran alone from zero state. A mixer resets exactly when its `doc`
port traces back, through every block and stack it was handed into, to an input of
role documents. Codegen (to hand the mixer the documents), the analysis (which layers
the document length moves, what state a stream keeps), the rules
(`mixer-crosses-documents`) and the runtime ask here, never a node's ports or params.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .model import Design, Node, Wire

# The kinds that carry state from one position to the next.
STATEFUL = ("short_conv", "ssm", "linear_attention")
# The port a stateful mixer reads its documents on (catalog: the kinds' `doc`).
DOCUMENTS_PORT = "doc"

# What each kind carries from one position to the next, in words.
STATE = {
    "short_conv": "the last kernel - 1 inputs of each channel",
    "ssm": "each head's head_dim x state matrix, and its convolution's last kernel - 1 inputs",
    "linear_attention": "each head's head_dim x value_dim matrix, and its convolution's last kernel - 1 inputs",
}

RESET = "its state is zero at each document's first token: no position reads an earlier document"


def is_stateful(node: Node) -> bool:
    return node.kind in STATEFUL


def documents_wire(node: Node) -> Wire | None:
    """The wire into the mixer's `doc` port, or None when nothing is wired there."""
    return node.wire(DOCUMENTS_PORT)


def resets(node: Node) -> bool:
    """Whether the mixer's state resets at each document's first token (its `doc` reads a documents input)."""
    wire = documents_wire(node)
    return wire is not None and wire.from_input and wire.role == "documents"


@dataclass(frozen=True)
class MixerFacts:
    """One stateful mixer of a design, in the terms every layer asks about."""

    kind: str
    name: str  # dotted from the top, e.g. layers.block_1.mixer
    path: str  # the JSON path of its params in the design file
    layers: int  # how many layers of one forward pass run it
    resets: bool  # its state resets at each document's first token
    state: str  # what it carries, in words
    node: Node

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "path": self.path, "layers": self.layers,
                "resets": self.resets, "state": self.state}


def facts(node: Node, layers: int = 1) -> MixerFacts:
    return MixerFacts(node.kind, node.name, node.path, layers, resets(node), STATE[node.kind], node)


def mixers(design: Design) -> list[MixerFacts]:
    """Each stateful mixer of the design file, with the layers that run it, in the order the forward pass
    meets them (a hybrid stack's block runs at several places of its cycle: one mixer, their layers summed)."""
    found: dict[str, MixerFacts] = {}
    for node, times in design.walk():
        if is_stateful(node):
            seen = found.get(node.path)
            found[node.path] = facts(node, times) if seen is None else replace(seen, layers=seen.layers + times)
    return list(found.values())


def reads_documents(design: Design) -> bool:
    """Whether any mixer resets at document starts: packing then moves what a mixer computes."""
    return any(m.resets for m in mixers(design))
