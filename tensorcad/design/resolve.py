"""Validate a design's content and resolve it into the immutable tree of `model`.

Every problem raises `TensorcadError` with the JSON path of the bad value.
Here the design's top level is read: its keys, its inputs and their roles, the
order of its nodes (each wired only from what is defined before it) and each
node's ports and wires. Each node is then built by its kind (`expand`), where
the composite kinds are expanded by the catalog's rules and ports handed down
by name, so a `doc` wired into a stack reaches every mask in it.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ..errors import TensorcadError, join, shown
from .catalog import KINDS, ROLES
from .expand import Expander
from .expr.nodes import FUNCTIONS, INDEX_NAMES, SCORE_NAME
from .model import Design, Input, Node, Wire
from .raw import MAX_ID, as_object, check_id, check_kind, check_name, no_unknown

_TOP_KEYS = ("name", "description", "context", "inputs", "nodes", "output", "hf", "mtp")
_NODE_KEYS = ("id", "kind", "in", "params", "description")
MAX_NODES = 10_000
# A port handed down by name is read in expressions and named in generated
# code, so it is a plain identifier that no expression name already means:
# the indices, score, an attention's own params, the functions, and the
# projections' q/k/v ports it would shadow.
PORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED_PORTS = frozenset({*INDEX_NAMES, SCORE_NAME, *FUNCTIONS, "k", "v", "x",
                            "heads", "kv_heads", "head_dim", "window", "self", "torch", "math"})


def _check_hf(hf: Any) -> None:
    """`hf`: where an imported design came from (`tensorcad import-hf`) and what its
    config held that the design carries rather than computes; it names the weight map."""
    as_object(hf, "hf")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or not model_type.isidentifier() or len(model_type) > MAX_ID:
        raise TensorcadError("hf.model_type", f"must be a Hugging Face model_type such as 'llama', got {model_type!r}")
    no_unknown(hf, ("model_type", "carried"), "hf", "the hf block")
    if "carried" in hf:
        as_object(hf["carried"], "hf.carried")




class _Resolver(Expander):
    def __init__(self, raw: dict):
        self.raw = raw
        self.inputs: dict[str, Input] = {}
        self.nodes: dict[str, Node] = {}  # resolved top-level nodes by id
        self.raw_nodes: dict[str, tuple[int, dict]] = {}

    # -- top level -----------------------------------------------------------------

    def design(self) -> Design:
        raw = as_object(self.raw, "")
        no_unknown(raw, _TOP_KEYS, "", "a design")
        for key in ("name", "inputs", "nodes", "output"):
            if key not in raw:
                raise TensorcadError(key, "missing (a design needs name, inputs, nodes and output)")
        name = check_name(raw["name"], "name")
        if "description" in raw and not isinstance(raw["description"], str):
            raise TensorcadError("description", "must be a string")
        context = KINDS["pos_embedding"].param("context").check(raw.get("context", 2048), "context")
        if "hf" in raw:
            _check_hf(raw["hf"])
        self._inputs(raw["inputs"])
        order = self._order(raw["nodes"])
        for id in order:
            index, node = self.raw_nodes[id]
            self.nodes[id] = self._top_node(index, node)
        output = raw["output"]
        if not isinstance(output, str) or output not in self.nodes:
            raise TensorcadError("output", f"{shown(output)} is not a node (nodes: {', '.join(self.nodes)})")
        if self.nodes[output].dim is None:
            raise TensorcadError("output", f"{shown(output)} is a table, not a layer")
        mtp = self._mtp(raw["mtp"], output) if "mtp" in raw else None
        return Design(
            name=name,
            inputs=tuple(self.inputs.values()),
            nodes=tuple(self.nodes[i] for i in order),
            output=output,
            context=context,
            source=MappingProxyType(raw),
            mtp=mtp,
        )

    def _mtp(self, raw: Any, output: str) -> int:
        """Multi-token prediction's depth (DeepSeek-V3's): modules each of one block like the stack's last, sharing
        the embedding and the output head, trained on the tokens 2..depth + 1 ahead."""
        raw = as_object(raw, "mtp")
        no_unknown(raw, ("depth",), "mtp", "multi-token prediction")
        depth = raw.get("depth", 1)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 8:
            raise TensorcadError("mtp.depth", f"expected a depth of 1..8 modules, got {shown(depth)}")
        if not any(n.kind == "stack" for n in self.nodes.values()) or self.nodes[output].kind != "linear":
            raise TensorcadError("mtp", "multi-token prediction needs a stack of blocks and a linear output head "
                                        "(its modules repeat the stack's last block and share the head)")
        if not any(n.kind == "embedding" for n in self.nodes.values()):
            raise TensorcadError("mtp", "multi-token prediction embeds the tokens ahead: the design needs an embedding")
        return depth

    def _inputs(self, raw: Any) -> None:
        raw = as_object(raw, "inputs")
        if not raw:
            raise TensorcadError("inputs", "a design needs at least one input of role tokens")
        for name, spec in raw.items():
            path = join("inputs", name)
            check_id(name, path, "an input name")
            spec = as_object(spec, path)
            no_unknown(spec, ("role", "description"), path, "an input")
            role = spec.get("role", "tokens")
            if not isinstance(role, str) or role not in ROLES:
                raise TensorcadError(join(path, "role"), f"{shown(role)} is not a role ({', '.join(ROLES)})")
            if any(i.role == role for i in self.inputs.values()):
                raise TensorcadError(join(path, "role"), f"a second input of role {shown(role)}; a design takes at most one")
            self.inputs[name] = Input(name, role, path)
        if not any(i.role == "tokens" for i in self.inputs.values()):
            raise TensorcadError("inputs", "a design needs one input of role tokens")

    def _order(self, raw: Any) -> list[str]:
        """The nodes in an order where each comes after what it reads; refuses cycles."""
        if not isinstance(raw, list) or not raw:
            raise TensorcadError("nodes", "expected a non-empty list of nodes")
        if len(raw) > MAX_NODES:
            raise TensorcadError("nodes", f"{len(raw)} nodes; at most {MAX_NODES}")
        for index, node in enumerate(raw):
            path = join("nodes", index)
            node = as_object(node, path)
            no_unknown(node, _NODE_KEYS, path, "a node")
            if "id" not in node:
                raise TensorcadError(join(path, "id"), "missing")
            id = check_id(node["id"], join(path, "id"), "an id")
            if id in self.raw_nodes or id in self.inputs:
                raise TensorcadError(join(path, "id"), f"duplicate id {shown(id)}")
            if "kind" not in node:
                raise TensorcadError(join(path, "kind"), "missing")
            check_kind(node["kind"], join(path, "kind"))
            wires = as_object(node.get("in", {}), join(path, "in"))
            for port, ref in wires.items():
                ppath = join(join(path, "in"), port)
                if not isinstance(ref, str) or not ref:
                    raise TensorcadError(ppath, f"expected an input or node id, got {shown(ref)}")
                if not PORT_NAME.fullmatch(port) or keyword.iskeyword(port):
                    raise TensorcadError(ppath, f"port {shown(port)} is not a name (letters, digits and _, "
                                                "at most 64, not a Python keyword)")
            self.raw_nodes[id] = (index, node)
        for id, (index, node) in self.raw_nodes.items():
            for port, ref in node.get("in", {}).items():
                if ref not in self.raw_nodes and ref not in self.inputs:
                    known = ", ".join([*self.inputs, *self.raw_nodes])
                    raise TensorcadError(
                        f"nodes[{index}].in.{port}", f"dangling reference {shown(ref)} (inputs and nodes: {known})"
                    )
        order: list[str] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done

        def visit(id: str, trail: list[str]) -> None:
            if state.get(id) == 2:
                return
            if state.get(id) == 1:
                cycle = trail[trail.index(id):] + [id]
                index = self.raw_nodes[trail[-1]][0]
                raise TensorcadError(f"nodes[{index}].in", f"cycle {' -> '.join(cycle)}")
            state[id] = 1
            for ref in self.raw_nodes[id][1].get("in", {}).values():
                if ref in self.raw_nodes:
                    visit(ref, trail + [id])
            state[id] = 2
            order.append(id)

        for id in self.raw_nodes:
            visit(id, [])
        return order

    # -- one top-level node --------------------------------------------------------

    def _top_node(self, index: int, raw: dict) -> Node:
        path = join("nodes", index)
        kind = KINDS[raw["kind"]]
        id = raw["id"]
        wiring = raw.get("in", {})
        dim_in: int | None = None
        handed: dict[str, Wire] = {}
        sources: dict[str, str] = {}
        for port, ref in wiring.items():
            ppath = join(join(path, "in"), port)
            spec = kind.port(port)
            if spec is None and not kind.extra_ports:
                ports = ", ".join(p.name for p in kind.ports) or "none"
                raise TensorcadError(ppath, f"unknown port {shown(port)} for kind {shown(kind.name)} (ports: {ports})")
            if spec is None and port in RESERVED_PORTS:
                raise TensorcadError(ppath, f"port name {shown(port)} is reserved (an expression or projection already "
                                            f"means it: {', '.join(sorted(RESERVED_PORTS))}); rename the port")
            sources[port] = ref
            if port == "x" and kind.name == "embedding":
                if ref not in self.inputs:
                    raise TensorcadError(ppath, f"an embedding reads token ids from an input, not node {shown(ref)}")
            elif port == "x" or (kind.name == "sdpa" and port in ("q", "k", "v")):
                # hidden states: from a node, never an input of integer ids
                if ref in self.inputs:
                    raise TensorcadError(ppath, f"{shown(ref)} is an input of integer ids; port {shown(port)} takes hidden states from a node")
                if self.nodes[ref].dim is None:
                    raise TensorcadError(ppath, f"{shown(ref)} is a table; port {shown(port)} takes hidden states")
                if port == "x":
                    dim_in = self.nodes[ref].dim
                    continue
            handed[port] = self._wire(port, ref, ppath, f"{id}.{port}")
        for spec in kind.ports:
            if spec.required and spec.name not in wiring:
                raise TensorcadError(join(path, "in"), f"missing port {shown(spec.name)} for kind {shown(kind.name)}")
        node = self._build(kind, id, id, join(path, "params"), raw.get("params"), dim_in, handed)
        return replace(node, sources=MappingProxyType(sources))

    def _wire(self, port: str, ref: str, path: str, hop: str) -> Wire:
        if ref in self.inputs:
            return Wire(port, ref, True, self.inputs[ref].role, (hop,), path)
        node = self.nodes[ref]
        if node.kind != "table" and port not in ("q", "k", "v"):
            raise TensorcadError(path, f"port {shown(port)} is wired from node {shown(ref)}, which is neither an input nor a table")
        return Wire(port, ref, False, None, (hop,), path)

def resolve(raw: Any) -> Design:
    """Validate a design's content (already parsed from JSON/YAML) into a Design."""
    try:
        return _Resolver(raw).design()
    except RecursionError:
        raise TensorcadError("", "the design nests too deeply") from None
