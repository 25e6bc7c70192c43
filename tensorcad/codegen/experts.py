"""The generated class of a mixture of experts: a router, the experts as (E, ...) tensors, eager gather/scatter.

The experts' weights are stored as transformers (5.x) stores them, one tensor for all
experts: `gate_up_proj` (E, 2 x hidden, C) for a gated activation (gate then up) or
`up_proj` (E, hidden, C), and `down_proj` (E, C, hidden); the router is `gate`, a
bias-free nn.Linear(C, E). So a Qwen3-MoE, Mixtral or OLMoE checkpoint loads by
renaming alone (`hf.weights`).

The forward pass is eager: each expert gathers the tokens routed to it, runs them,
and adds its weighted output back at their places (`index_add_`); an expert no token
chose runs on zero rows (no early exit, so the module exports). Dropless by default;
with a capacity factor, `keep` zeroes the weight of each routed (token, slot) past its expert's capacity in its group, counted
in the order the design says (`drop`: 'position' the group's earlier tokens first,
'probs' the higher scores first), so a dropped token passes by the residual alone.
"""

from __future__ import annotations

from ..design.model import Node
from .modules import MLPS, PLACEHOLDER

GATED = ("swiglu", "geglu")
# What each expert's activation does to its hidden features, given its gate (and up, when gated).
_ACT = {
    "swiglu": "F.silu(gate) * up",
    "geglu": 'F.gelu(gate, approximate="tanh") * up',
    "gelu": "F.gelu(h)",
    "gelu_tanh": 'F.gelu(h, approximate="tanh")',
    "relu": "F.relu(h)",
}


def config_keys(node: Node) -> dict:
    """The moe's numbers for `Config`; its choices (router, activation, drop) are written into the class."""
    p = node.params
    keys = {"dim": node.dim_in, "n_experts": p["experts"], "top_k": p["top_k"], "moe_hidden": p["hidden"],
            "moe_bias": p["bias"]}
    if p["shared"] is not None:
        keys.update(shared_hidden=p["shared"]["hidden"], shared_bias=p["shared"]["bias"])
    if p["routed_scale"] != 1.0:
        keys["routed_scale"] = p["routed_scale"]
    if p["capacity"] is not None:
        keys["capacity_factor"] = p["capacity"]
    return keys


def _doc(p) -> str:
    router = "softmax over the experts" if p["router"] == "softmax" else "a sigmoid of each expert's logit"
    chosen = ", chosen with a score-correction bias" if p["router_bias"] else ""
    normal = ", the top-k weights normalised to sum to 1" if p["normalize"] else ""
    shared = ", plus shared experts every token runs" if p["shared"] is not None else ""
    if p["capacity"] is None:
        drop = "Dropless: every routed token runs."
    else:
        group = "each row" if p["capacity_scope"] == "row" else "the whole batch"
        order = "earlier positions" if p["drop"] == "position" else "higher scores"
        drop = f"Capacity over {group}, {order} first; a dropped token adds nothing."
    return (f'    """Mixture of experts: {router}{chosen},\n    top-k experts{normal}{shared}.\n\n'
            f"    {drop}\n\n"
            "    Shapes: N tokens (B x T), E experts, K chosen a token, C model width.\n"
            '    """')


def moe_source(node: Node, f, shared_class: str | None) -> str:
    """The class source (its name `PLACEHOLDER`); ``f(key)`` is the Config field of a key."""
    p = node.params
    gated = p["activation"] in GATED
    inner = "2 * hidden" if gated else "hidden"
    first = "gate_up_proj" if gated else "up_proj"
    lines = [f"class {PLACEHOLDER}(nn.Module):", _doc(p), "", "    def __init__(self, config):",
             "        super().__init__()",
             f"        self.n_experts, self.top_k = {f('n_experts')}, {f('top_k')}",
             f"        dim, hidden, experts = {f('dim')}, {f('moe_hidden')}, self.n_experts",
             "        self.gate = nn.Linear(dim, experts, bias=False)  # the router",
             f"        self.{first} = nn.Parameter(torch.empty(experts, {inner}, dim))",
             "        self.down_proj = nn.Parameter(torch.empty(experts, dim, hidden))",
             f"        for w in (self.{first}, self.down_proj):",
             "            torch.nn.init.normal_(w, mean=0.0, std=0.02)"]
    if p["bias"]:
        width = "2 * hidden" if gated else "hidden"
        lines += [f"        self.{first}_bias = nn.Parameter(torch.zeros(experts, {width}))",
                  "        self.down_proj_bias = nn.Parameter(torch.zeros(experts, dim))"]
    if p["router_bias"]:
        # chooses the experts, weights nothing; moved outside the optimiser by the aux-loss-free update
        lines.append("        self.score_bias = nn.Parameter(torch.zeros(experts), requires_grad=False)")
    if shared_class is not None:
        lines.append(f"        self.shared = {shared_class}(dim, {f('shared_hidden')}, {f('shared_bias')})")
        if p["shared_gate"]:
            lines.append("        self.shared_gate = nn.Linear(dim, 1, bias=False)")
    if p["routed_scale"] != 1.0:
        lines.append(f"        self.routed_scale = {f('routed_scale')}")
    if p["capacity"] is not None:
        lines.append(f"        self.capacity_factor = {f('capacity_factor')}")
    lines += ["", "    def forward(self, x):", "        B, T, C = x.shape", "        flat = x.reshape(-1, C)  # (N, C)",
              "        logits = self.gate(flat)  # (N, E)"]
    score = "logits.float().softmax(-1)" if p["router"] == "softmax" else "logits.float().sigmoid()"
    lines.append(f"        scores = {score}  # (N, E)")
    choose = "(scores + self.score_bias)" if p["router_bias"] else "scores"
    lines.append(f"        chosen = {choose}.topk(self.top_k, dim=-1).indices  # (N, K)")
    lines.append("        weights = scores.gather(-1, chosen)  # (N, K)")
    if p["normalize"]:
        lines.append("        weights = weights / weights.sum(-1, keepdim=True)")
    if p["routed_scale"] != 1.0:
        lines.append("        weights = weights * self.routed_scale")
    lines.append("        weights = weights.to(x.dtype)")
    if p["capacity"] is not None:
        groups = "B" if p["capacity_scope"] == "row" else "1"
        lines.append(f"        weights = weights * self.keep(chosen, weights, {groups})")
    lines += ["        out = torch.zeros_like(flat)",
              "        for e in range(self.n_experts):",
              # no early exit for an expert no token chose: a test of the count is a guard on data-dependent
              # size that torch.export cannot take (the export check); its zero-row matmul costs nothing
              "            token, slot = torch.where(chosen == e)  # the tokens routed to e"]
    bias = lambda name: f" + self.{name}_bias[e]" if p["bias"] else ""  # noqa: E731
    lines.append(f"            h = F.linear(flat[token], self.{first}[e]){bias(first)}")
    if gated:
        lines.append("            gate, up = h.chunk(2, dim=-1)")
    lines.append(f"            h = F.linear({_ACT[p['activation']]}, self.down_proj[e]){bias('down_proj')}")
    lines.append("            out.index_add_(0, token, h * weights[token, slot, None])")
    lines.append("        out = out.view(B, T, C)")
    if shared_class is not None:
        shared = "torch.sigmoid(self.shared_gate(x)) * self.shared(x)" if p["shared_gate"] else "self.shared(x)"
        lines.append(f"        out = out + {shared}")
    lines.append("        return out  # (B, T, C)")
    if p["capacity"] is not None:
        lines += ["", *_keep(p["drop"])]
    return "\n".join(lines) + "\n"


def _keep(drop: str) -> list[str]:
    """`keep(chosen, weights, groups)`: 1 for each routed (token, slot) within its expert's capacity, else 0."""
    lines = ["    def keep(self, chosen, weights, groups):",
             '        """1 where a routed (token, slot) is within its expert\'s capacity in its group."""',
             "        E = self.n_experts",
             "        routed = chosen.reshape(groups, -1)  # (G, M): a group's slots, position-major",
             "        capacity = math.ceil(self.capacity_factor * routed.shape[1] / E)",
             "        onehot = F.one_hot(routed, E)  # (G, M, E)"]
    if drop == "position":
        lines += ["        rank = (onehot.cumsum(1) * onehot).sum(-1)  # 1 for an expert's first slot, ...",
                  "        return (rank <= capacity).to(weights.dtype).view_as(weights)"]
    else:
        lines += ["        score = weights.reshape(groups, -1, 1).float()",
                  "        score = score.masked_fill(onehot == 0, -float(\"inf\"))  # (G, M, E)",
                  "        order = score.argsort(dim=1, descending=True, stable=True)",
                  "        rank = order.argsort(dim=1, stable=True)  # 0 for an expert's best score, ...",
                  "        rank = (rank * onehot).sum(-1)",
                  "        return (rank < capacity).to(weights.dtype).view_as(weights)"]
    return lines


def shared_mlp(node: Node) -> tuple[str, str] | None:
    """(concept, source) of the shared experts' mlp class, or None."""
    shared = node.params["shared"]
    return None if shared is None else MLPS[shared["activation"]]
