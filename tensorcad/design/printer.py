"""`tensorcad show`: the resolved design as indented text, stable enough to assert on."""

from __future__ import annotations

from typing import Any

from . import expr as E
from .model import Design, Node


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in sorted(v.items())) + "}"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _node(node: Node, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    repeat = f" x{node.repeat}" if node.repeat > 1 else ""
    width = f" {node.dim_in}->{node.dim}" if node.dim_in is not None and node.dim is not None else (
        f" ->{node.dim}" if node.dim is not None else "")
    out.append(f"{pad}{node.id}: {node.kind}{repeat}{width}")
    if node.attention is not None:
        a = node.attention
        out.append(f"{pad}  heads {a.heads}, kv_heads {a.kv_heads}, head_dim {a.head_dim}")
        if a.keep is not None:
            out.append(f"{pad}  keeps {E.to_text(a.keep)}")
        if a.score is not None:
            out.append(f"{pad}  score {E.to_text(a.score)}")
    else:
        shown = {k: v for k, v in node.params.items()
                 if node.kind not in ("transformer_block", "stack", "gqa_attention", "mixer_block")
                 or k not in ("attention", "mlp", "block", "mask", "score", "blocks", "mixer")}
        if node.kind == "stack" and shown.get("layers") is None:  # a hybrid stack's only
            shown.pop("layers", None)
        if shown:
            out.append(f"{pad}  " + ", ".join(f"{k} {_value(v)}" for k, v in shown.items()))
    for w in node.wires:
        origin = f"input {w.source} ({w.role})" if w.from_input else f"node {w.source}"
        out.append(f"{pad}  {w.port} <- {origin}")
    for c in node.children:
        _node(c, depth + 1, out)


def show(design: Design) -> str:
    out = [f"design {design.name} (context {design.context})", "inputs:"]
    out += [f"  {i.name}: {i.role}" for i in design.inputs]
    out.append("nodes:")
    for n in design.nodes:
        _node(n, 1, out)
    out.append(f"output: {design.output}")
    return "\n".join(out) + "\n"
