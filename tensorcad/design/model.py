"""The resolved design: an immutable tree the rest of tensorcad reads.

Loading turns a design file into this tree once (validated, defaults filled,
composites expanded by the catalog, ports handed down by name, expressions
parsed), so analysis, rules and codegen never look at raw JSON again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from .expr import Expr


@dataclass(frozen=True)
class Input:
    name: str
    role: str  # tokens | documents | positions
    path: str


@dataclass(frozen=True)
class Wire:
    """Where the value at one port of a node comes from.

    `route` lists every port the value was handed through, outermost first
    (`layers.doc`, `layers.block.doc`, ...), so a rule can say the way it
    followed from the input to the reader.
    """

    port: str
    source: str  # an input name, or a top-level node id
    from_input: bool
    role: str | None  # the source input's role; None for a node
    route: tuple[str, ...]
    path: str  # where the design file wires it (the top-level `in`)


@dataclass(frozen=True)
class Attention:
    """What an attention kernel keeps and how it scores, with parsed expressions."""

    path: str
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    window: int | None
    mask: Expr | None  # the design's own mask expression
    score: Expr | None
    keep: Expr | None  # causal AND window AND mask: what the kernel keeps
    tensors: Mapping[str, Wire]  # ports a mask reads at (b, q) / (b, kv)
    tables: Mapping[str, Wire]  # ports a score reads as learned tables
    value_dim: int | None = None  # a head's value width where it is not head_dim (latent attention)
    cached: int | None = None  # numbers a token a layer a cache holds where it is not keys and values (a latent)

    @property
    def values(self) -> int:
        """A head's value width."""
        return self.value_dim if self.value_dim is not None else self.head_dim

    @property
    def flops_dim(self) -> float:
        """The head width the attention FLOPs count by: a score multiplies head_dim, a weighted sum value_dim, so
        4 x keys x flops_dim x heads is 2 x keys x (head_dim + value_dim) x heads."""
        return (self.head_dim + self.values) / 2

    @property
    def cache_numbers(self) -> int:
        """Numbers a token a layer a stream's cache holds: its keys and values, or the latent they come from."""
        return self.cached if self.cached is not None else self.kv_heads * (self.head_dim + self.values)


@dataclass(frozen=True)
class Node:
    id: str
    name: str  # dotted from the top, e.g. layers.block.attention.sdpa
    kind: str
    path: str  # JSON path of the params in the design file
    params: Mapping[str, Any]
    dim_in: int | None
    dim: int | None  # width of the output; None for a table
    wires: tuple[Wire, ...] = ()
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # port -> id, top level
    children: tuple["Node", ...] = ()
    repeat: int = 1
    attention: Attention | None = None

    def wire(self, port: str) -> Wire | None:
        return next((w for w in self.wires if w.port == port), None)

    def child(self, id: str) -> "Node":
        return next(c for c in self.children if c.id == id)


@dataclass(frozen=True)
class Design:
    name: str
    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]  # top level, in the order they compute
    output: str
    context: int  # the sequence length its presets and defaults assume
    source: Mapping[str, Any]  # the file's content, for printing and goldens
    mtp: int | None = None  # multi-token prediction's depth (DeepSeek-V3's), None: none

    def to_dict(self) -> dict[str, Any]:
        """A fresh, mutable copy of the file's content."""
        return copy.deepcopy(dict(self.source))

    def input(self, role: str) -> Input | None:
        return next((i for i in self.inputs if i.role == role), None)

    def past_context(self, seq: int) -> str | None:
        """Why a sequence of ``seq`` tokens is past what the design holds, or None.

        The one answer every surface gives: ``rules`` makes it an error, ``analyze``
        a warning line and a report flag, the editor starts at the context, and the
        generated model refuses such a row naming ``--seq``.
        """
        if seq <= self.context:
            return None
        return (f"the sequence is {seq:,} tokens, past the design's context of {self.context:,}: "
                f"run at --seq {self.context} or less, or raise the design's context")

    def node(self, id: str) -> Node:
        return next(n for n in self.nodes if n.id == id)

    def walk(self) -> Iterator[tuple[Node, int]]:
        """Every node with how many times it runs in one forward pass."""

        def visit(node: Node, times: int) -> Iterator[tuple[Node, int]]:
            yield node, times
            for c in node.children:
                yield from visit(c, times * node.repeat)

        for n in self.nodes:
            yield from visit(n, 1)

    def attentions(self) -> list[tuple[Attention, int]]:
        """Each attention kernel with the number of layers that run it."""
        return [(n.attention, t) for n, t in self.walk() if n.attention is not None]
