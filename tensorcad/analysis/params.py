"""Counting a design's parameters from its resolved tree.

`total` counts every learned number once (a tied head reuses its embedding's
table); `embedding` the lookup tables; `matmul` every weight a token is
multiplied by, the LM head included even when tied, since the head's matmul
runs whether or not its table is shared (Kaplan et al. 2020, section 2.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..design.mixers import is_stateful
from ..design.model import Design, Node
from .mixers import shape


@dataclass(frozen=True)
class ParamCount:
    total: int
    embedding: int
    matmul: int

    def to_json(self) -> dict[str, int]:
        return {"total": self.total, "embedding": self.embedding, "matmul": self.matmul}


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
        matrices = 3 if p["activation"] in ("swiglu", "geglu") else 2  # gated: gate, up, down
        weights = matrices * d * p["hidden"]
        bias = ((matrices - 1) * p["hidden"] + d) if p["bias"] else 0
        return weights + bias, 0, weights
    if node.kind == "table":
        return prod(p["shape"]), 0, 0
    if is_stateful(node):  # its projections are matmul weights; taps, decays and scales are not
        s = shape(node)
        return s.total, 0, s.projections
    return 0, 0, 0  # rope, sdpa and composites hold nothing of their own


def count_params(design: Design) -> ParamCount:
    total = embedding = matmul = 0
    for node, times in design.walk():
        if node.children:
            continue
        t, e, m = leaf_params(node)
        total += t * times
        embedding += e * times
        matmul += m * times
    return ParamCount(total, embedding, matmul)


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
