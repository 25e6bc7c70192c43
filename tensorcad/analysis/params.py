"""Counting a design's parameters from its resolved tree.

`total` counts every learned number once (a tied head reuses its embedding's
table); `embedding` the lookup tables; `matmul` every weight a token is
multiplied by, the LM head included even when tied, since the head's matmul
runs whether or not its table is shared (Kaplan et al. 2020, section 2.1).
In a mixture of experts a token multiplies the router, its top_k experts and the
shared ones only, so `matmul` counts those; `active` (only where a design has a
`moe`) is `total` less the routed experts a token skips, the figure model cards
publish as "active parameters" (Mixtral's 12.9B of 46.7B).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..design.mixers import is_stateful
from ..design.model import Design, Node
from .cost import mlp_weights, moe_active_weights
from .mixers import shape


@dataclass(frozen=True)
class ParamCount:
    total: int
    embedding: int
    matmul: int
    active: int | None = None  # total less the routed experts a token skips; None without a moe

    def to_json(self) -> dict[str, int]:
        out = {"total": self.total, "embedding": self.embedding, "matmul": self.matmul}
        if self.active is not None:
            out["active"] = self.active
        return out


def _mlp(dim: int, p) -> tuple[int, int]:
    """(params, weights) of one feed-forward of ``p``'s hidden, activation and bias."""
    weights = mlp_weights(dim, p["hidden"], p["activation"])
    matrices = weights // (dim * p["hidden"])
    return weights + (((matrices - 1) * p["hidden"] + dim) if p["bias"] else 0), weights


def expert_params(node: Node) -> int:
    """Params of one routed expert of a moe node."""
    return _mlp(node.dim_in, node.params)[0]


def idle_params(node: Node) -> int:
    """Params of the routed experts one token of a moe node is not sent to; 0 for any other node."""
    if node.kind != "moe":
        return 0
    return (node.params["experts"] - node.params["top_k"]) * expert_params(node)


def leaf_params(node: Node) -> tuple[int, int, int]:
    """(total, embedding, matmul) of one leaf node, run once."""
    p, d_in, d = node.params, node.dim_in, node.dim
    if node.kind == "embedding":
        n = p["vocab"] * p["dim"]
        return n, n, 0
    if node.kind == "pos_embedding":
        n = p["context"] * d
        return n, n, 0
    if node.kind == "linear":
        weights = d_in * d
        bias = d if p["bias"] else 0
        return (0 if p.get("tie") else weights) + bias, 0, weights
    if node.kind == "rmsnorm":
        return d, 0, 0
    if node.kind == "layernorm":
        return (2 if p.get("bias", True) else 1) * d, 0, 0
    if node.kind == "mlp":
        total, weights = _mlp(d, p)
        return total, 0, weights
    if node.kind == "moe":
        expert_total, expert_weights = _mlp(d_in, p)
        shared_total, shared_weights = _mlp(d_in, p["shared"]) if p["shared"] is not None else (0, 0)
        gate = d_in if p["shared_gate"] else 0
        router_bias = p["experts"] if p["router_bias"] else 0  # a bias chooses experts; it multiplies nothing
        total = d_in * p["experts"] + router_bias + p["experts"] * expert_total + shared_total + gate
        return total, 0, moe_active_weights(d_in, p["experts"], p["top_k"], expert_weights, shared_weights, gate)
    if node.kind == "table":
        return prod(p["shape"]), 0, 0
    if is_stateful(node):  # its projections are matmul weights; taps, decays and scales are not
        s = shape(node)
        return s.total, 0, s.projections
    return 0, 0, 0  # rope, sdpa and composites hold nothing of their own


def count_params(design: Design) -> ParamCount:
    total = embedding = matmul = idle = 0
    routed = False
    for node, times in design.walk():
        if node.children:
            continue
        t, e, m = leaf_params(node)
        total += t * times
        embedding += e * times
        matmul += m * times
        idle += idle_params(node) * times
        routed = routed or node.kind == "moe"
    return ParamCount(total, embedding, matmul, total - idle if routed else None)


def _subtree(node: Node, times: int = 1):
    yield node, times
    for child in node.children:
        yield from _subtree(child, times * node.repeat)


def mtp_params(design: Design, depth: int) -> ParamCount:
    """DeepSeek-V3's multi-token prediction modules, counted apart from the model's own parameters.

    Each of ``depth`` modules holds one block like the stack's last, a projection of the
    concatenated [norm(h); norm(emb)] (2 x dim to dim) and three norms like the model's final
    one (of h, of the embedding, before the head); the embedding and the output head are
    shared, so they add no parameter, but every depth multiplies by the head again (matmul).
    """
    from ..errors import TensorcadError

    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 8:
        raise TensorcadError("depth", f"expected an MTP depth in 1..8, got {depth!r}")
    stacks = [n for n in design.nodes if n.kind == "stack"]
    head = next((n for n in design.nodes if n.id == design.output), None)
    if not stacks or head is None or head.kind != "linear":
        raise TensorcadError("design", "multi-token prediction needs a stack of blocks and a linear output head")
    stack = stacks[-1]
    block = stack.children[(stack.repeat - 1) % len(stack.children)]
    total = matmul = 0
    for node, times in _subtree(block):
        if not node.children:
            t, _, m = leaf_params(node)
            total, matmul = total + t * times, matmul + m * times
    dim = head.dim_in
    projection = 2 * dim * dim
    final = next((n for n in design.nodes if n.id == head.sources.get("x")), None)
    norms = 3 * (leaf_params(final)[0] if final is not None and not final.children else dim)
    own = total + projection + norms
    return ParamCount(depth * own, 0, depth * (matmul + projection + head.dim_in * head.dim))
