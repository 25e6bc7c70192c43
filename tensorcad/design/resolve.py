"""Validate a design's content and resolve it into the immutable tree of `model`.

Every problem raises `TensorcadError` with the JSON path of the bad value.
Composite kinds are expanded here, by the catalog's rules:

- `stack` repeats its block; the block's `x` is the previous repetition's output.
- `transformer_block` is norm, `gqa_attention`, norm, `mlp`, with residuals.
- `gqa_attention` is q, k, v projections, a rotation of q and k, `sdpa`, o.

Ports a composite does not use itself are handed down by name to the child
that can take them, so a `doc` wired into a stack reaches every mask in it.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import keyword
import re

from ..errors import TensorcadError, did_you_mean, join, shown
from . import expr as E
from .catalog import KINDS, ROLES
from .expr.nodes import FUNCTIONS, INDEX_NAMES, SCORE_NAME
from .model import Attention, Design, Input, Node, Wire
from .schema import Kind, check_params

_TOP_KEYS = ("name", "description", "context", "inputs", "nodes", "output", "hf")
_NODE_KEYS = ("id", "kind", "in", "params", "description")
MAX_NODES = 10_000
MAX_ID = 64
# A port handed down by name is read in expressions and named in generated
# code, so it is a plain identifier that no expression name already means:
# the indices, score, an attention's own params, the functions, and the
# projections' q/k/v ports it would shadow.
PORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED_PORTS = frozenset({*INDEX_NAMES, SCORE_NAME, *FUNCTIONS, "k", "v", "x",
                            "heads", "kv_heads", "head_dim", "window", "self", "torch", "math"})


def _check_id(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TensorcadError(path, f"{what} must be a non-empty string, got {shown(value)}")
    if len(value) > MAX_ID or not value.isprintable():
        raise TensorcadError(path, f"{what} {shown(value, MAX_ID)} must be at most {MAX_ID} printable characters")
    return value


def _object(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise TensorcadError(path, f"expected an object, got {type(value).__name__}")
    return value


def _no_unknown(obj: dict, allowed: tuple[str, ...], path: str, what: str) -> None:
    for key in obj:
        if key not in allowed:
            raise TensorcadError(join(path, str(key)), f"unknown key {shown(key)} in {what} (keys: {', '.join(allowed)})")


def _check_kind(value: Any, path: str) -> None:
    """A kind is a string the catalog lists (a list or an object is refused before any lookup can fail)."""
    if not isinstance(value, str) or value not in KINDS:
        near = did_you_mean(value, KINDS) if isinstance(value, str) else ""
        raise TensorcadError(path, f"unknown kind {shown(value)}{near} (kinds: {', '.join(KINDS)})")


def _check_hf(hf: Any) -> None:
    """`hf`: where an imported design came from (`tensorcad import-hf`) and what its
    config held that the design carries rather than computes; it names the weight map."""
    _object(hf, "hf")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or not model_type.isidentifier() or len(model_type) > MAX_ID:
        raise TensorcadError("hf.model_type", f"must be a Hugging Face model_type such as 'llama', got {model_type!r}")
    _no_unknown(hf, ("model_type", "carried"), "hf", "the hf block")
    if "carried" in hf:
        _object(hf["carried"], "hf.carried")


class _Resolver:
    def __init__(self, raw: dict):
        self.raw = raw
        self.inputs: dict[str, Input] = {}
        self.nodes: dict[str, Node] = {}  # resolved top-level nodes by id
        self.raw_nodes: dict[str, tuple[int, dict]] = {}

    # -- top level -----------------------------------------------------------------

    def design(self) -> Design:
        raw = _object(self.raw, "")
        _no_unknown(raw, _TOP_KEYS, "", "a design")
        for key in ("name", "inputs", "nodes", "output"):
            if key not in raw:
                raise TensorcadError(key, "missing (a design needs name, inputs, nodes and output)")
        name = raw["name"]
        if not isinstance(name, str) or not name or len(name) > 200:
            raise TensorcadError("name", "must be a string of 1 to 200 characters")
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
        return Design(
            name=name,
            inputs=tuple(self.inputs.values()),
            nodes=tuple(self.nodes[i] for i in order),
            output=output,
            context=context,
            source=MappingProxyType(raw),
        )

    def _inputs(self, raw: Any) -> None:
        raw = _object(raw, "inputs")
        if not raw:
            raise TensorcadError("inputs", "a design needs at least one input of role tokens")
        for name, spec in raw.items():
            path = join("inputs", name)
            _check_id(name, path, "an input name")
            spec = _object(spec, path)
            _no_unknown(spec, ("role", "description"), path, "an input")
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
            node = _object(node, path)
            _no_unknown(node, _NODE_KEYS, path, "a node")
            if "id" not in node:
                raise TensorcadError(join(path, "id"), "missing")
            id = _check_id(node["id"], join(path, "id"), "an id")
            if id in self.raw_nodes or id in self.inputs:
                raise TensorcadError(join(path, "id"), f"duplicate id {shown(id)}")
            if "kind" not in node:
                raise TensorcadError(join(path, "kind"), "missing")
            _check_kind(node["kind"], join(path, "kind"))
            wires = _object(node.get("in", {}), join(path, "in"))
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

    # -- kinds ----------------------------------------------------------------------

    def _build(self, kind: Kind, id: str, name: str, path: str, raw_params: Any,
               dim_in: int | None, handed: dict[str, Wire]) -> Node:
        params = check_params(kind, raw_params, path)
        if not kind.extra_ports:
            for port, w in handed.items():
                if kind.port(port) is None:
                    raise TensorcadError(w.path, f"port {shown(port)} is handed to {name} ({kind.name}), which reads no such port")
        build = getattr(self, f"_{kind.name}")
        return build(id=id, name=name, path=path, params=params, dim_in=dim_in, handed=handed)

    def _leaf(self, kind: str, id, name, path, params, dim_in, dim, wires=()) -> Node:
        return Node(id, name, kind, path, MappingProxyType(params), dim_in, dim, tuple(wires))

    def _embedding(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("embedding", id, name, path, params, None, params["dim"], handed.values())

    def _pos_embedding(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("pos_embedding", id, name, path, params, dim_in, dim_in, handed.values())

    def _linear(self, id, name, path, params, dim_in, handed) -> Node:
        tie = params["tie"]
        if tie is not None:
            tpath = join(path, "tie")
            target = self.nodes.get(tie)
            if target is None or target.kind != "embedding":
                raise TensorcadError(tpath, f"{shown(tie)} is not an embedding node defined before this one")
            if (target.params["vocab"], target.params["dim"]) != (params["out"], dim_in):
                raise TensorcadError(
                    tpath,
                    f"a tied projection {dim_in} -> {params['out']} does not fit embedding {shown(tie)} "
                    f"({target.params['vocab']} x {target.params['dim']})",
                )
        return self._leaf("linear", id, name, path, params, dim_in, params["out"])

    def _rmsnorm(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("rmsnorm", id, name, path, params, dim_in, dim_in)

    def _layernorm(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("layernorm", id, name, path, params, dim_in, dim_in)

    def _mlp(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("mlp", id, name, path, params, dim_in, dim_in)

    def _table(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("table", id, name, path, params, None, None)

    def _rope(self, id, name, path, params, dim_in, handed) -> Node:
        if params["head_dim"] % 2:
            raise TensorcadError(join(path, "head_dim"), f"{params['head_dim']} is odd; rotary pairs features")
        if dim_in is not None and dim_in % params["head_dim"]:
            raise TensorcadError(join(path, "head_dim"), f"{params['head_dim']} does not divide the input width {dim_in}")
        return self._leaf("rope", id, name, path, params, dim_in, dim_in, [w for w in handed.values() if w.port == "pos"])

    def _sdpa(self, id, name, path, params, dim_in, handed) -> Node:
        heads, kv_heads = params["heads"], params["kv_heads"] or params["heads"]
        if heads % kv_heads:
            raise TensorcadError(join(path, "heads"), f"{heads} is not divisible by kv_heads {kv_heads}")
        head_dim = params["head_dim"]
        if head_dim is None:
            q = handed.get("q")
            qdim = self.nodes[q.source].dim if q else None
            if qdim is None or qdim % heads:
                raise TensorcadError(join(path, "head_dim"), "missing: give head_dim")
            head_dim = qdim // heads
        for port, width in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            w = handed.get(port)
            if w is not None and self.nodes[w.source].dim != width:
                raise TensorcadError(w.path, f"{shown(w.source)} is {self.nodes[w.source].dim} wide; {port} needs {width}")
        attention = self._attention(path, params, heads, kv_heads, head_dim, handed)
        params = {**params, "kv_heads": kv_heads, "head_dim": head_dim}
        wires = [w for w in handed.values() if w.port not in ("q", "k", "v")]
        node = self._leaf("sdpa", id, name, path, params, dim_in, heads * head_dim, wires)
        return replace(node, attention=attention)

    def _attention(self, path, params, heads, kv_heads, head_dim, handed) -> Attention:
        tensors = {p: w for p, w in handed.items() if w.from_input}
        tables = {
            p: w for p, w in handed.items()
            if not w.from_input and p not in ("q", "k", "v") and self.nodes[w.source].kind == "table"
        }
        numbers = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
        if params["window"] is not None:
            numbers["window"] = params["window"]
        mask = score = None
        if params["mask"] is not None:
            mask = E.parse(params["mask"], E.Scope("mask", numbers, frozenset(tensors),
                                                   {p: len(self.nodes[w.source].params["shape"]) for p, w in tables.items()}),
                           join(path, "mask"))
        if params["score"] is not None:
            score = E.parse(params["score"], E.Scope("score", numbers, frozenset(tensors),
                                                     {p: len(self.nodes[w.source].params["shape"]) for p, w in tables.items()}),
                            join(path, "score"))
        read = (E.reads(mask) if mask is not None else frozenset()) | (E.reads(score) if score is not None else frozenset())
        for port, w in {**tensors, **tables}.items():
            if port not in read and port != "pos":
                raise TensorcadError(w.path, f"port {shown(port)} reaches {path}, whose mask and score read nothing by that name")
        causal = E.Compare(">=", E.Var("q"), E.Var("kv")) if params["causal"] else None
        window = None
        if params["window"] is not None:
            distance = E.Binary("-", E.Var("q"), E.Var("kv"))
            if not params["causal"]:
                distance = E.Call("abs", (distance,))
            window = E.Compare("<", distance, E.Param("window", params["window"]))
        return Attention(
            path=path, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            causal=params["causal"], window=params["window"], mask=mask, score=score,
            keep=E.all_of(causal, window, mask),
            tensors=MappingProxyType(tensors), tables=MappingProxyType(tables),
        )

    def _hand(self, handed: dict[str, Wire], child: str, ports=None) -> dict[str, Wire]:
        """Hand ports one level down, extending each route by the child's port."""
        return {
            p: replace(w, route=w.route + (f"{child}.{p}",))
            for p, w in handed.items()
            if ports is None or p in ports
        }

    def _gqa_attention(self, id, name, path, params, dim_in, handed) -> Node:
        heads = params["heads"]
        kv_heads = params["kv_heads"] or heads
        if heads % kv_heads:
            raise TensorcadError(join(path, "heads"), f"{heads} is not divisible by kv_heads {kv_heads}")
        head_dim = params["head_dim"]
        if head_dim is None:
            if dim_in % heads:
                raise TensorcadError(join(path, "heads"), f"width {dim_in} is not divisible by {heads} heads; give head_dim")
            head_dim = dim_in // heads
        bias = params["bias"]
        qkv_bias = bias if params["qkv_bias"] is None else params["qkv_bias"]
        children = [
            self._leaf("linear", "q", f"{name}.q", path, {"out": heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, heads * head_dim),
            self._leaf("linear", "k", f"{name}.k", path, {"out": kv_heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, kv_heads * head_dim),
            self._leaf("linear", "v", f"{name}.v", path, {"out": kv_heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, kv_heads * head_dim),
        ]
        if params["qk_norm"] is not None:
            # one RMSNorm of head_dim features for q and one for k, shared by every head (Qwen3)
            norm = check_params(KINDS["rmsnorm"], params["qk_norm"], join(path, "qk_norm"))
            params = {**params, "qk_norm": norm}
            for which in ("q", "k"):
                children.append(self._leaf("rmsnorm", f"{which}_norm", f"{name}.{which}_norm", join(path, "qk_norm"),
                                           norm, head_dim, head_dim))
        if params["rope"] is not None:
            rope_raw = params["rope"]
            rpath = join(path, "rope")
            rope = check_params(KINDS["rope"], {"head_dim": head_dim, **rope_raw}, rpath)
            if rope["head_dim"] != head_dim:
                raise TensorcadError(join(rpath, "head_dim"), f"{rope['head_dim']} differs from the attention's head_dim {head_dim}")
            for which, width in (("q", heads * head_dim), ("k", kv_heads * head_dim)):
                children.append(self._rope(f"rope_{which}", f"{name}.rope_{which}", rpath, rope, width,
                                           self._hand(handed, f"{name}.rope_{which}", ("pos",))))
        sdpa_params = {k: params[k] for k in ("heads", "kv_heads", "head_dim", "causal", "window", "mask", "score", "scale")}
        sdpa_params.update(kv_heads=kv_heads, head_dim=head_dim)
        sdpa = self._sdpa("sdpa", f"{name}.sdpa", path, sdpa_params, heads * head_dim,
                          self._hand(handed, f"{name}.sdpa"))
        children += [sdpa, self._leaf("linear", "o", f"{name}.o", path, {"out": dim_in, "bias": bias, "tie": None},
                                      heads * head_dim, dim_in)]
        params = {**params, "kv_heads": kv_heads, "head_dim": head_dim}
        node = self._leaf("gqa_attention", id, name, path, params, dim_in, dim_in, handed.values())
        return replace(node, children=tuple(children))

    def _transformer_block(self, id, name, path, params, dim_in, handed) -> Node:
        dim = params["dim"] if params["dim"] is not None else dim_in
        if dim != dim_in:
            raise TensorcadError(join(path, "dim"), f"{dim} differs from its input's width {dim_in}")
        norm = KINDS[params["norm"]]
        norm_params = {"eps": params["eps"]}
        if params["norm_offset"]:
            if norm.name != "rmsnorm":
                raise TensorcadError(join(path, "norm_offset"), f"an offset scales an rmsnorm; this block's norm is {norm.name}")
            norm_params["offset"] = params["norm_offset"]
        attention = self._build(KINDS["gqa_attention"], "attention", f"{name}.attention", join(path, "attention"),
                                params["attention"], dim, self._hand(handed, f"{name}.attention"))
        mlp = self._build(KINDS["mlp"], "mlp", f"{name}.mlp", join(path, "mlp"), params["mlp"], dim, {})
        def norm_leaf(id):
            return self._leaf(norm.name, id, f"{name}.{id}", path, norm_params, dim, dim)

        if params["post_norms"]:  # Gemma 2: each half's output normalised before its residual add
            children = (norm_leaf("attention_norm"), attention, norm_leaf("post_attention_norm"),
                        norm_leaf("mlp_norm"), mlp, norm_leaf("post_mlp_norm"))
        else:
            children = (norm_leaf("attention_norm"), attention, norm_leaf("mlp_norm"), mlp)
        node = self._leaf("transformer_block", id, name, path, {**params, "dim": dim}, dim_in, dim, handed.values())
        return replace(node, children=children)

    def _stack(self, id, name, path, params, dim_in, handed) -> Node:
        block = params["block"]
        bpath = join(path, "block")
        if "params" in block:
            _no_unknown(block, ("kind", "params"), bpath, "a block")
        kind_name = block.get("kind")
        _check_kind(kind_name, join(bpath, "kind"))
        kind = KINDS[kind_name]
        if kind.port("x") is None or kind.name in ("embedding", "stack"):
            raise TensorcadError(join(bpath, "kind"), f"a stack repeats a block that maps x to x; {shown(kind_name)} does not")
        if "params" in block:
            inner, ipath = block["params"], join(bpath, "params")
        else:  # the block's params may also sit beside its kind
            inner, ipath = {k: v for k, v in block.items() if k != "kind"}, bpath
        windows = params["windows"]
        if windows is None:
            variants = [inner]
        else:
            # one block per window, taken in turn: the stack runs the cycle repeat / n times
            wpath = join(path, "windows")
            if params["repeat"] % len(windows):
                raise TensorcadError(wpath, f"{len(windows)} windows do not divide repeat {params['repeat']}")
            if kind.name not in ("transformer_block", "gqa_attention"):
                raise TensorcadError(wpath, f"windows set an attention's window; a {kind.name} block has none")
            variants = []
            for w in windows:
                variant = dict(inner) if isinstance(inner, dict) else inner
                if kind.name == "transformer_block" and isinstance(inner, dict):
                    attention = inner.get("attention")
                    variant["attention"] = {**attention, "window": w} if isinstance(attention, dict) else attention
                elif isinstance(inner, dict):
                    variant["window"] = w
                variants.append(variant)
        children = []
        for i, variant in enumerate(variants):
            cid = "block" if i == 0 else f"block_{i}"
            child = self._build(kind, cid, f"{name}.{cid}", ipath, variant, dim_in, self._hand(handed, f"{name}.{cid}"))
            if child.dim != dim_in:
                raise TensorcadError(bpath, f"the block maps width {dim_in} to {child.dim}; a stack needs them equal")
            children.append(child)
        node = self._leaf("stack", id, name, path, params, dim_in, dim_in, handed.values())
        return replace(node, children=tuple(children), repeat=params["repeat"] // len(children))


def resolve(raw: Any) -> Design:
    """Validate a design's content (already parsed from JSON/YAML) into a Design."""
    try:
        return _Resolver(raw).design()
    except RecursionError:
        raise TensorcadError("", "the design nests too deeply") from None
