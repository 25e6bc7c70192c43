"""The generated `Config` dataclass: the design's numbers, one field each.

Each top-level node contributes numbers under plain keys (`dim`, `n_head`, ...).
A key every node agrees on is one field (`dim` for a model whose stream is one
width throughout); a key nodes disagree on gets a field per node, prefixed by the
node's sanitised id (`encoder_n_layer`, `decoder_n_layer`). Tables' shapes are
always prefixed, since each belongs to its table.
"""

from __future__ import annotations

import json
from typing import Any

from ..design.model import Design, Node
from ..design.rope_scaling import is_plain
from . import experts, layout, rotary
from .names import Namer
from .latent import latent_keys

_ALWAYS_PREFIXED = ("shape",)
# A stateful mixer's numbers: Config field -> its param.
MIXER_KEYS = {
    "short_conv": {"conv_kernel": "kernel", "conv_bias": "bias"},
    "ssm": {"ssm_heads": "heads", "ssm_head_dim": "head_dim", "ssm_state": "state", "ssm_groups": "groups",
            "ssm_kernel": "kernel", "ssm_chunk": "chunk", "ssm_bias": "bias", "ssm_conv_bias": "conv_bias",
            "ssm_eps": "eps"},
    "linear_attention": {"lin_heads": "heads", "lin_k_heads": "k_heads", "lin_head_dim": "head_dim",
                         "lin_value_dim": "value_dim", "lin_kernel": "kernel", "lin_chunk": "chunk",
                         "lin_eps": "eps"},
}


def block_owner(stack: Node, block: str) -> str:
    """The owner of a hybrid stack's named block's numbers: fields it shares with nothing are prefixed so."""
    return f"{stack.id}.{block}"


def owners(design: Design) -> dict[str, dict[str, Any]]:
    """Each owner's numbers: the top-level nodes, and each named block of a hybrid stack."""
    out: dict[str, dict[str, Any]] = {}
    for n in design.nodes:
        out[n.id] = _keys(n, design.output)
        if n.kind == "stack" and n.params["layers"] is not None:
            for name, child in zip(n.params["layers"], n.children):
                out.setdefault(block_owner(n, name), _keys(child, design.output))
    return out


def _keys(node: Node, output: str) -> dict[str, Any]:
    p, kind = node.params, node.kind
    if kind == "embedding":
        keys = {"vocab_size": p["vocab"], "dim": p["dim"]}
        if p["scale"] is not None:
            keys["embed_scale"] = p["scale"]
        return keys
    if kind == "pos_embedding":
        return {"n_positions": p["context"], "dim": node.dim_in}
    if kind == "linear":
        out = "vocab_size" if node.id == output else "out_features"
        keys = {"dim": node.dim_in, out: p["out"], "bias": p["bias"]}
        if p["softcap"] is not None:
            keys["softcap"] = p["softcap"]
        if p.get("scale") is not None:
            keys["out_scale"] = p["scale"]
        return keys
    if kind in ("rmsnorm", "layernorm"):
        keys = {"dim": node.dim_in, "eps": p["eps"]}
        if p.get("offset"):
            keys["norm_offset"] = p["offset"]
        return keys
    if kind == "mlp":
        return {"dim": node.dim_in, "hidden": p["hidden"], "mlp_bias": p["bias"]}
    if kind == "moe":
        return experts.config_keys(node)
    if kind == "rope":
        return {"head_dim": p["head_dim"], "rope_theta": float(p["theta"])}
    if kind in ("sdpa", "gqa_attention"):
        keys: dict[str, Any] = {"n_head": p["heads"], "n_kv_head": p["kv_heads"], "head_dim": p["head_dim"]}
        if p["scale"] is not None:
            keys["attn_scale"] = p["scale"]
        if kind == "gqa_attention":
            keys = {"dim": node.dim_in, **keys, "attn_bias": p["bias"]}
            if p["qkv_bias"] is not None:
                keys["qkv_bias"] = p["qkv_bias"]
            if p["qk_norm"] is not None:
                keys["qk_norm_eps"] = p["qk_norm"]["eps"]
                if p["qk_norm"].get("offset"):
                    keys["qk_norm_offset"] = p["qk_norm"]["offset"]
            if p["latent"] is not None:
                keys.update(latent_keys(node))
            if p["rope"] is not None:
                rope = node.child("rope_q").params
                keys["rope_theta"] = float(rope["theta"])
                if not is_plain(rope):
                    keys.update(rotary.config_keys(rope))
        return keys
    if kind == "transformer_block":
        keys = {"dim": node.dim_in, "eps": p["eps"], **_keys(node.child("attention"), output),
                **_keys(node.child("mlp"), output)}
        if p["norm_offset"]:
            keys["norm_offset"] = p["norm_offset"]
        if p.get("residual_scale") is not None:
            keys["residual_scale"] = p["residual_scale"]
        return keys
    if kind in MIXER_KEYS:
        return {"dim": node.dim_in, **{key: p[param] for key, param in MIXER_KEYS[kind].items()}}
    if kind == "mixer_block":
        keys = {"dim": node.dim_in, "eps": p["eps"], **_keys(node.child("mixer"), output)}
        if p["mlp"] is not None:
            keys.update(_keys(node.child("mlp"), output))
        return keys
    if kind == "stack":
        if p["layers"] is not None:  # a hybrid stack: its blocks' numbers are theirs (`owners`)
            return {"n_layer": node.repeat * len(node.children), "layer_types": tuple(p["layers"]) * node.repeat}
        # blocks taken in turn (alternating windows) differ in their masks only, no number
        return {"n_layer": node.repeat * sum(c.repeat for c in node.children), **_keys(node.children[0], output)}
    if kind == "table":
        return {"shape": tuple(p["shape"])}
    raise AssertionError(f"no config keys for kind {kind!r}")


class ConfigFields:
    """Which Config field holds each (top-level node, key)."""

    def __init__(self, design: Design, names: Namer):
        self.owner_keys = owners(design)
        # A stack's blocks taken in turn whose numbers differ from its first (Gemma 3's rope bases) are owners too;
        # a hybrid stack's named blocks already are (`owners`).
        self.variants: dict[tuple[str, int], str] = {}
        for n in design.nodes:
            if n.kind != "stack" or n.params["layers"] is not None:
                continue
            for i, child in enumerate(n.children[1:], 1):
                keys = _keys(child, design.output)
                if keys != _keys(n.children[0], design.output):
                    self.variants[n.id, i] = f"{n.id}.{child.id}"
                    self.owner_keys[f"{n.id}.{child.id}"] = keys
        self.context = design.context
        values: dict[str, set] = {}
        for keys in self.owner_keys.values():
            for key, value in keys.items():
                values.setdefault(key, set()).add((type(value), value))
        self._names = names
        self._field: dict[tuple[str, str], str] = {}
        self.fields: dict[str, Any] = {"context": design.context}
        for owner, keys in self.owner_keys.items():
            for key, value in keys.items():
                shared = len(values[key]) == 1 and key not in _ALWAYS_PREFIXED
                name = key if shared else f"{names(owner)}_{key}"
                while name in self.fields and (owner, key) not in self._field and not shared:
                    name += "_"
                self._field[owner, key] = name
                self.fields.setdefault(name, value)

    def variant_owner(self, stack: str, i: int) -> str:
        """Whose numbers the stack's ``i``th block reads: its own when they differ from the first block's."""
        return self.variants.get((stack, i), stack)

    def __call__(self, owner: str, key: str) -> str:
        """`config.<field>` for a number of the top-level node `owner`."""
        return f"config.{self._field[owner, key]}"

    def source(self) -> str:
        lines = [
            "@dataclass",
            "class Config:",
            '    """The design\'s numbers; the defaults are the design itself."""',
            "",
        ]
        for name, value in self.fields.items():
            if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                # a hybrid stack's layer types, laid out as black lays a tuple out
                items = [json.dumps(v) for v in value]
                if len(items) == 1:
                    items[0] += ","
                lines += layout.call("    ", f"{name}: tuple = (", items)
                continue
            lines.append(f"    {name}: {_annotation(value)} = {value!r}")
        lines += ["", "", "CONFIG = Config()"]
        return "\n".join(lines) + "\n"


def _annotation(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, tuple):
        return "tuple"
    return type(value).__name__
