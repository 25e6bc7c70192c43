"""The generated code of a latent attention (multi-head latent attention, DeepSeek-V2 section 2.1).

Written as transformers' ``DeepseekV3Attention`` computes it, so that its weights load one for one: q through
an optional low-rank latent (``q_a``, its RMSNorm, ``q_b``), every head's key and value from one latent
(``kv_a`` gives the latent and a rotary key shared by every head, ``kv_b`` the heads' unrotated keys and their
values), the last ``rope_dim`` features of each q/k head rotated, the rest not. The cache such a model keeps at
inference is the latent; training, as here, rebuilds the keys and values from it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..design.model import Node
from . import layout
from .modules import assign_call


def latent_init(node: Node, f: Callable[[str], str], norm: str) -> list[str]:
    """``__init__``'s projections and norms (``f(key)``: a config field; ``norm``: the RMSNorm class)."""
    latent = node.params["latent"]
    heads, head_dim, values = f("n_head"), f("head_dim"), f("value_dim")
    bias = f"bias={f('attn_bias')}"
    lines = [f"        self.rope_dim = {f('rope_dim')}  # the rotated features of each q/k head",
             f"        self.kv_rank, self.value_dim = {f('kv_rank')}, {values}"]
    if latent["q_rank"] is None:
        lines += assign_call(layout.BODY, "self.q", "nn.Linear", [f("dim"), f"{heads} * {head_dim}", bias])
    else:
        lines += assign_call(layout.BODY, "self.q_a", "nn.Linear", [f("dim"), f("q_rank"), bias])
        lines += assign_call(layout.BODY, "self.q_a_norm", norm, [f("q_rank"), f("latent_eps")])
        lines += assign_call(layout.BODY, "self.q_b", "nn.Linear", [f("q_rank"), f"{heads} * {head_dim}", bias])
    lines += assign_call(layout.BODY, "self.kv_a", "nn.Linear", [f("dim"), "self.kv_rank + self.rope_dim", bias],
                         "# the latent, then the shared rotary key")
    lines += assign_call(layout.BODY, "self.kv_a_norm", norm, ["self.kv_rank", f("latent_eps")])
    lines += assign_call(layout.BODY, "self.kv_b", "nn.Linear",
                         ["self.kv_rank", f"{heads} * ({head_dim} - self.rope_dim + self.value_dim)", bias])
    lines += assign_call(layout.BODY, "self.o", "nn.Linear", [f"{heads} * self.value_dim", f("dim"), bias])
    return lines


def latent_forward(node: Node, rotations: list[tuple[str, list[str]]]) -> list[str]:
    """``forward``'s q, k and v (B, H, T, D) and (B, H, T, Dv) from x; ``rotations``: for q and k, the rotating
    function and its arguments after the tensor (the tables, the positions)."""
    q = "self.q(x)" if node.params["latent"]["q_rank"] is None else "self.q_b(self.q_a_norm(self.q_a(x)))"
    lines = [
        f"        q = {q}  # (B, T, H * D)",
        "        q = q.view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)",
        "        q_pass, q_rot = q.split([self.head_dim - self.rope_dim, self.rope_dim], -1)",
        "        # the latent (B, T, L) and a rotary key (B, T, R) shared by every head",
        "        kv, k_rot = self.kv_a(x).split([self.kv_rank, self.rope_dim], dim=-1)",
        "        kv = self.kv_b(self.kv_a_norm(kv))  # (B, T, H * (D - R + Dv))",
        "        kv = kv.view(B, T, -1, self.head_dim - self.rope_dim + self.value_dim)",
        "        kv = kv.transpose(1, 2)  # (B, H, T, D - R + Dv)",
        "        k_pass, v = kv.split([self.head_dim - self.rope_dim, self.value_dim], -1)",
        "        k_rot = k_rot.view(B, T, 1, self.rope_dim).transpose(1, 2)  # (B, 1, T, R)",
    ]
    for (which, (fn, args)) in zip(("q_rot", "k_rot"), rotations):
        lines += assign_call(layout.BODY, which, fn, [which, *args])
    lines += [
        "        q = torch.cat((q_pass, q_rot), dim=-1)  # (B, H, T, D)",
        "        k_rot = k_rot.expand(-1, k_pass.shape[1], -1, -1)  # (B, H, T, R)",
        "        k = torch.cat((k_pass, k_rot), dim=-1)  # (B, H, T, D)",
    ]
    return lines


DOC = [
    '    """Multi-head latent attention: every key and value from one low-rank latent.',
    "",
    "    The last R features of a q/k head rotate (one rotated key for every head), the",
    "    rest do not; values are Dv wide.",
]


def latent_keys(node: Node) -> dict:
    """The Config numbers of a latent attention beside the attention's own."""
    latent, p = node.params["latent"], node.params
    keys = {"kv_rank": latent["kv_rank"], "rope_dim": latent["rope_dim"], "latent_eps": latent["eps"],
            "value_dim": p["value_dim"] or p["head_dim"]}
    if latent["q_rank"] is not None:
        keys["q_rank"] = latent["q_rank"]
    return keys


__all__ = ("DOC", "latent_forward", "latent_init", "latent_keys")
