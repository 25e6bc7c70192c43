"""The layers of a design with stateful mixers: each block, its FLOPs a token, and what packing does to it.

A hybrid stack runs blocks of different kinds (Mamba-2 layers with attention every
n-th, as Hugging Face's `layer_types` give them). The report lists each distinct
block once, with the layers that run it and its FLOPs a token: its weights' 2 a token
(`cost.matmul_flops`), its attention's kept keys or its mixer's taps and scan
(`analysis.mixers`). Under a packing only attention whose mask reads documents is
moved by the document length; a mixer that resets is not (a reset zeroes numbers
and skips no multiply), so packing reaches it through the row's padding alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..design.masks import reads_documents
from ..design.mixers import STATEFUL, is_stateful, resets
from ..design.model import Design, Node
from ..packing import Packing
from .attention import ROWS, keys_per_query
from .cost import attention_flops, matmul_flops
from .mixers import mixing_flops
from .params import leaf_params
from .rows import packed_rows


@dataclass(frozen=True)
class LayerFlops:
    name: str  # the block's node, e.g. layers.block_1
    block: str | None  # the hybrid stack's name for it (its layer type)
    mixer: str  # "attention", or the stateful mixer's kind
    layers: int  # layers of one forward pass that run it
    fwd_per_token: float  # one layer's forward FLOPs a token, one document a row
    packed_fwd_per_token: float | None  # a real token's on packed rows
    documents: bool  # its mask reads documents, or its state resets at them
    moves_with_documents: bool  # the document length moves its FLOPs

    def to_json(self) -> dict:
        out = {"name": self.name, "mixer": self.mixer, "layers": self.layers, "fwdPerToken": self.fwd_per_token,
               "readsDocuments": self.documents, "movesWithDocumentLength": self.moves_with_documents}
        if self.block is not None:
            out["block"] = self.block
        if self.packed_fwd_per_token is not None:
            out["packedFwdPerToken"] = self.packed_fwd_per_token
        return out


def _leaves(node: Node):
    if not node.children:
        yield node
    for child in node.children:
        yield from _leaves(child)


def _block(node: Node, seq: int, packing: Packing | None, seed: int) -> tuple[float, float, str, bool]:
    """(FLOPs a token, of which per computed position, the mixer's kind, whether it reads documents)."""
    attention = per_position = 0.0
    mixer, documents = "none", False
    for leaf in _leaves(node):
        per_position += matmul_flops(leaf_params(leaf)[2])
        if leaf.attention is not None:
            a = leaf.attention
            pack = packing if packing is not None and reads_documents(a) else None
            attention += attention_flops(keys_per_query(a, seq, pack, seed=seed).mean, a.flops_dim, a.heads)
            mixer, documents = "attention", documents or reads_documents(a)
        elif is_stateful(leaf):
            per_position += mixing_flops(leaf, seq)
            mixer, documents = leaf.kind, documents or resets(leaf)
    return attention, per_position, mixer, documents


def _blocks(design: Design):
    """(node, hybrid block name or None, layers) for each distinct block, in forward order."""
    for node in design.nodes:
        if node.kind == "stack":
            names = node.params["layers"] or [None] * len(node.children)
            seen: set[str] = set()
            for name, child in zip(names, node.children):
                if (name or child.name) not in seen:  # a hybrid's block once, however often its cycle runs it
                    seen.add(name or child.name)
                    yield child, name, node.repeat * names.count(name) if name is not None else node.repeat
        elif node.kind in ("transformer_block", "mixer_block", *STATEFUL):
            yield node, None, 1


def layer_flops(design: Design, seq: int, packing: Packing | None, seed: int = 0) -> list[LayerFlops]:
    """Each distinct block's FLOPs a token, alone and (``packing`` given) on packed rows."""
    real = packed_rows(seq, packing, seed, ROWS).real_fraction if packing is not None else 1.0
    out = []
    for node, name, layers in _blocks(design):
        attention, per_position, mixer, documents = _block(node, seq, None, seed)
        packed = None
        if packing is not None:
            packed_attention, _, _, _ = _block(node, seq, packing, seed)
            packed = per_position / real + packed_attention  # padding is paid compute
        out.append(LayerFlops(node.name, name, mixer, layers, per_position + attention, packed, documents,
                              mixer == "attention" and documents))
    return out
