"""What multi-token prediction costs (issue 46): DeepSeek-V3's MTP modules, counted apart from the model.

A design with ``"mtp": {"depth": k}`` trains k modules beside the model, each one
block like the stack's last, a projection of [norm(h); norm(emb)] and three norms,
sharing the embedding and the output head (`params.mtp_params`). A token's forward
through them multiplies each module's weights and the head again (2 FLOPs a weight)
and runs each module's attention as the last block's runs it (its mask, its keys a
query under the same packing). Training pays 3 x that forward beside the model's;
serving pays nothing (the modules are dropped, or used only to draft tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..design.model import Design, Node
from ..design.masks import reads_documents
from ..packing import Packing
from .attention import ROWS, keys_per_query
from .cost import attention_flops, matmul_flops, train_flops
from .params import ParamCount, mtp_params
from .rows import packed_rows


@dataclass(frozen=True)
class MtpCost:
    depth: int
    params: ParamCount  # the modules' own (the shared embedding and head not again)
    fwd_per_token: float  # the modules' forward a token: their weights, the head again, their attention

    @property
    def train_per_token(self) -> float:
        return train_flops(self.fwd_per_token)

    def to_json(self) -> dict:
        return {"depth": self.depth, "params": self.params.to_json(), "fwdPerToken": self.fwd_per_token,
                "trainPerToken": self.train_per_token}


def _last_attention(design: Design):
    """The attention kernel of the stack's last block: the one each module's block runs."""
    stack = [n for n in design.nodes if n.kind == "stack"][-1]
    # repetition i runs block i mod n (design.expand): with the cycle whole, the stack repeats its n blocks; cut
    # short, the stack runs once and each block says how many repetitions run it
    repetitions = stack.repeat * sum(block.repeat for block in stack.children)
    block = stack.children[(repetitions - 1) % len(stack.children)]

    def walk(node: Node):
        if node.attention is not None:
            yield node.attention
        for child in node.children:
            yield from walk(child)

    return next(walk(block), None)


def mtp_cost(design: Design, seq: int, packing: Packing | None = None, seed: int = 0) -> MtpCost | None:
    """The design's MTP modules' params and FLOPs a token at ``seq`` (under ``packing``), or None without them."""
    if design.mtp is None:
        return None
    params = mtp_params(design, design.mtp)
    # a padded row runs its padding through the modules too: a real token carries its share, as the model's
    real = packed_rows(seq, packing, seed, ROWS).real_fraction if packing is not None else 1.0
    forward = matmul_flops(params.matmul) / real
    attention = _last_attention(design)
    if attention is not None:
        pack = packing if packing is not None and reads_documents(attention) else None
        keys = keys_per_query(attention, seq, pack, seed=seed).mean
        forward += design.mtp * attention_flops(keys, attention.flops_dim, attention.heads)
    return MtpCost(design.mtp, params, forward)


__all__ = ("MtpCost", "mtp_cost")
