"""The nodes of the stateful token mixers, the block around one, and a hybrid stack's blocks.

- `short_conv`, `ssm` and `linear_attention` are leaves: their numbers checked and
  filled (a linear attention's head widths from the stream's), their `doc` wire kept
  (`design.mixers` reads the reset from it).
- `mixer_block` is norm, the mixer, then norm and `mlp` when it has one, with residuals.
  It hands its mixer `doc` only: in a hybrid stack the ports the attention blocks read
  (`pos`, tables) reach every block, and pass a mixer block by.
- a stack's `blocks` and `layers`: one child a name of the cycle, repetition i the
  (i mod n)th, so each child runs repeat / n times.

`MixerExpander` is the half of `Expander` (`expand.py`) that knows these kinds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import TensorcadError, join, shown
from .catalog import KINDS
from .mixers import DOCUMENTS_PORT, STATEFUL
from .model import Node, Wire
from .raw import as_object, check_kind, no_unknown


def block_spec(raw: Any, path: str, what: str) -> tuple[str, Any, str]:
    """(kind, params, params' path) of a `{kind, params}` object, the params also allowed beside the kind."""
    raw = as_object(raw, path)
    if "params" in raw:
        no_unknown(raw, ("kind", "params"), path, what)
    check_kind(raw.get("kind"), join(path, "kind"))
    if "params" in raw:
        return raw["kind"], raw["params"], join(path, "params")
    return raw["kind"], {k: v for k, v in raw.items() if k != "kind"}, path


class MixerExpander:
    """Builds the mixer kinds; `Expander` supplies `_build`, `_leaf` and `_hand`."""

    def _mixer(self, kind, id, name, path, params, dim_in, handed) -> Node:
        wires = [w for p, w in handed.items() if p == DOCUMENTS_PORT]
        return self._leaf(kind, id, name, path, params, dim_in, dim_in, wires)

    def _short_conv(self, id, name, path, params, dim_in, handed) -> Node:
        return self._mixer("short_conv", id, name, path, params, dim_in, handed)

    def _ssm(self, id, name, path, params, dim_in, handed) -> Node:
        if params["heads"] % params["groups"]:
            raise TensorcadError(join(path, "groups"), f"{params['groups']} groups do not divide "
                                                       f"{params['heads']} heads")
        return self._mixer("ssm", id, name, path, params, dim_in, handed)

    def _linear_attention(self, id, name, path, params, dim_in, handed) -> Node:
        heads = params["heads"]
        k_heads = params["k_heads"] or heads
        if heads % k_heads:
            raise TensorcadError(join(path, "k_heads"), f"{k_heads} query/key heads do not divide {heads} value heads")
        head_dim = params["head_dim"]
        if head_dim is None:
            if dim_in % heads:
                raise TensorcadError(join(path, "heads"), f"width {dim_in} is not divisible by {heads} heads; "
                                                          "give head_dim")
            head_dim = dim_in // heads
        value_dim = params["value_dim"] or head_dim
        params = {**params, "k_heads": k_heads, "head_dim": head_dim, "value_dim": value_dim}
        return self._mixer("linear_attention", id, name, path, params, dim_in, handed)

    def _mixer_block(self, id, name, path, params, dim_in, handed) -> Node:
        dim = params["dim"] if params["dim"] is not None else dim_in
        if dim != dim_in:
            raise TensorcadError(join(path, "dim"), f"{dim} differs from its input's width {dim_in}")
        mpath = join(path, "mixer")
        kind, inner, ipath = block_spec(params["mixer"], mpath, "a mixer")
        if kind not in STATEFUL:
            raise TensorcadError(join(mpath, "kind"), f"{shown(kind)} is not a stateful mixer "
                                                      f"({', '.join(STATEFUL)}); attention is a transformer_block")
        mixer = self._build(KINDS[kind], "mixer", f"{name}.mixer", ipath, inner, dim,
                            self._hand(handed, f"{name}.mixer", (DOCUMENTS_PORT,)))
        norm = KINDS[params["norm"]]

        def norm_leaf(id: str) -> Node:
            return self._leaf(norm.name, id, f"{name}.{id}", path, {"eps": params["eps"]}, dim, dim)

        children = [norm_leaf("mixer_norm"), mixer]
        if params["mlp"] is not None:
            mlp = self._build(KINDS["mlp"], "mlp", f"{name}.mlp", join(path, "mlp"), params["mlp"], dim, {})
            children += [norm_leaf("mlp_norm"), mlp]
        node = self._leaf("mixer_block", id, name, path, {**params, "dim": dim}, dim_in, dim, handed.values())
        return replace(node, children=tuple(children))

    def _named_blocks(self, name: str, path: str, params: dict, dim_in: int,
                      handed: dict[str, Wire]) -> list[Node]:
        """A hybrid stack's children: one a position of `layers`, each the block it names."""
        bpath, lpath = join(path, "blocks"), join(path, "layers")
        blocks, layers = params["blocks"], params["layers"]
        if blocks is None or layers is None:
            missing = "layers" if blocks is not None else "blocks"
            raise TensorcadError(join(path, missing), "missing: a stack needs a block, or blocks and layers")
        for key, what in (("windows", "window"), ("ropes", "rope")):
            if params[key] is not None:
                raise TensorcadError(join(path, key), f"{key} take a block in turn; with blocks, give each "
                                                      f"attention its own {what}")
        if not blocks:
            raise TensorcadError(bpath, "expected at least one named block")
        for i, block_name in enumerate(layers):
            if block_name not in blocks:
                raise TensorcadError(join(lpath, i), f"{shown(block_name)} is not a block "
                                                     f"(blocks: {', '.join(blocks)})")
        for block_name in blocks:
            if block_name not in layers:
                raise TensorcadError(join(bpath, block_name), f"block {shown(block_name)} is in no layer "
                                                              f"(layers name {', '.join(dict.fromkeys(layers))})")
        if params["repeat"] % len(layers):
            raise TensorcadError(lpath, f"{len(layers)} layers do not divide repeat {params['repeat']}")
        children = []
        for i, block_name in enumerate(layers):
            spath = join(bpath, block_name)
            kind_name, inner, ipath = block_spec(blocks[block_name], spath, "a block")
            kind = KINDS[kind_name]
            if kind.port("x") is None or kind.name in ("embedding", "stack"):
                raise TensorcadError(join(spath, "kind"), f"a stack repeats blocks that map x to x; "
                                                          f"{shown(kind_name)} does not")
            cid = "block" if i == 0 else f"block_{i}"
            child = self._build(kind, cid, f"{name}.{cid}", ipath, inner, dim_in, self._hand(handed, f"{name}.{cid}"))
            if child.dim != dim_in:
                raise TensorcadError(spath, f"the block maps width {dim_in} to {child.dim}; a stack needs them equal")
            children.append(child)
        return children
