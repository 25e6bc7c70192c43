"""The generated classes of the stateful mixers and of the block around one.

One class a concept, as `modules` writes them: `ShortConv` (LFM2's gated short
convolution), `SSM` (Mamba-2's mixer), `LinearAttention` (Gated DeltaNet), their two
gated norms, and the block around each (`ShortConvBlock`, ...). Each mixer hands the row's documents to the runtime
(`runtime/mixers.py`) when its state resets there (`design.mixers.resets`); one that does
not reset takes no documents at all, so the class says what it does. Sizes come from
`config`, by the fields `ConfigFields` names.
"""

from __future__ import annotations

from ..design.mixers import resets
from ..design.model import Node
from . import layout
from .modules import PLACEHOLDER, assign_call

GATED_NORM = (
    "GatedRMSNorm",
    '''class __CLASS__(nn.Module):
    """RMSNorm of x * silu(z) over each group of features (Mamba-2's gated norm)."""

    def __init__(self, dim, groups, eps):
        super().__init__()
        self.groups = groups
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, z):
        x32 = x.float() * F.silu(z.float())
        grouped = x32.view(*x32.shape[:-1], self.groups, -1)
        variance = grouped.pow(2).mean(-1, keepdim=True)
        grouped = grouped * torch.rsqrt(variance + self.eps)
        return self.weight * grouped.view(x32.shape).type_as(x)
''',
)

NORM_GATE = (
    "NormGate",
    '''class __CLASS__(nn.Module):
    """RMSNorm of each head's values, then a gate silu(z) (Gated DeltaNet's output norm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, z):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x32.type_as(x)) * F.silu(z)
''',
)


class MixerWriter:
    """Writes the mixer classes; the generator it is part of supplies config, classes and ports."""

    def _documents(self, node: Node) -> tuple[list[str], str]:
        """(the forward's extra parameters, the documents argument of the runtime calls)."""
        if resets(node):
            doc = self.ports("doc")
            return [doc], doc
        return [], "None"

    def mixer_class(self, node: Node, owner: str) -> str:
        build = {"short_conv": self._short_conv, "ssm": self._ssm, "linear_attention": self._linear_attention}
        return build[node.kind](node, owner)

    def _conv_weights(self, channels: str, kernel: str, bias: str | None) -> list[str]:
        """The depthwise taps (channels, 1, K), as nn.Conv1d holds and initialises them."""
        lines = assign_call(layout.BODY, "self.conv_weight", "nn.Parameter", [f"torch.empty({channels}, 1, {kernel})"],
                            "# (channels, 1, K)")
        if bias is not None:
            lines += layout.statement(layout.BODY, "self.conv_bias = ",
                                      f"nn.Parameter(torch.zeros({channels})) if {bias} else None")
        else:
            lines.append("        self.conv_bias = None")
        return lines + ["        # uniform within 1 / sqrt(K), as nn.Conv1d initialises a depthwise kernel",
                        f"        bound = {kernel}**-0.5",
                        "        nn.init.uniform_(self.conv_weight, -bound, bound)"]

    def _short_conv(self, node: Node, owner: str) -> str:
        f = lambda key: self.config(owner, key)  # noqa: E731
        extra, doc = self._documents(node)
        reset = "# zero state at each document's start" if extra else ""
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Gated short convolution (LFM2): out(c * conv(b * h)) over the last K positions.',
            "",
            "    Shapes: B batch rows, T positions, C model width, K taps.",
            '    """',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
            *assign_call(layout.BODY, "self.in_proj", "nn.Linear", [f("dim"), f"3 * {f('dim')}", f"bias={f('conv_bias')}"],
                         "# b, c, h"),
            *self._conv_weights(f("dim"), f("conv_kernel"), f("conv_bias")),
            *assign_call(layout.BODY, "self.out_proj", "nn.Linear", [f("dim"), f("dim"), f"bias={f('conv_bias')}"]),
            "",
            f"    def forward({', '.join(['self', 'x', *extra])}):",
            "        b, c, h = self.in_proj(x).chunk(3, dim=-1)  # (B, T, C) each",
            *assign_call(layout.BODY, "y", "causal_conv", ["b * h", "self.conv_weight", "self.conv_bias", doc], reset),
            "        return self.out_proj(c * y)  # (B, T, C)",
        ]
        return self.classes("ShortConv", "\n".join(lines) + "\n", owner)

    def _ssm(self, node: Node, owner: str) -> str:
        f = lambda key: self.config(owner, key)  # noqa: E731
        extra, doc = self._documents(node)
        norm = self.classes(GATED_NORM[0], GATED_NORM[1], owner)
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Mamba-2\'s selective state-space mixer: a gated, chunked scan of H heads.',
            "",
            "    Each head h carries a P x N state: S = exp(dt A_h) S + dt x B^T, read as",
            "    S^T C, plus D_h x. Shapes: B batch rows, T positions, C model width,",
            "    H heads, P head dim, N state width, G groups of heads sharing B and C.",
            '    """',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
            f"        self.heads, self.head_dim = {f('ssm_heads')}, {f('ssm_head_dim')}",
            f"        self.groups, self.state = {f('ssm_groups')}, {f('ssm_state')}",
            f"        self.chunk = {f('ssm_chunk')}",
            "        inner = self.heads * self.head_dim",
            "        self.channels = inner + 2 * self.groups * self.state  # values, B and C",
            *assign_call(layout.BODY, "self.in_proj", "nn.Linear",
                         [f("dim"), "inner + self.channels + self.heads", f"bias={f('ssm_bias')}"],
                         "# z, x B C, dt"),
            *self._conv_weights("self.channels", f("ssm_kernel"), f("ssm_conv_bias")),
            "        # steps from 0.001 to 0.1 and decays A = 1 .. H, as Mamba-2 starts them;",
            "        # dt_bias is softplus^-1(dt)",
            "        dt = torch.exp(torch.linspace(math.log(1e-3), math.log(1e-1), self.heads))",
            "        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))",
            "        self.A_log = nn.Parameter(torch.log(torch.arange(1.0, self.heads + 1)))",
            "        self.D = nn.Parameter(torch.ones(self.heads))",
            *assign_call(layout.BODY, "self.norm", norm, ["inner", "self.groups", f("ssm_eps")]),
            *assign_call(layout.BODY, "self.out_proj", "nn.Linear", ["inner", f("dim"), f"bias={f('ssm_bias')}"]),
            "",
            f"    def forward({', '.join(['self', 'x', *extra])}):",
            "        B, T, C = x.shape",
            "        H, P, G, N = self.heads, self.head_dim, self.groups, self.state",
            "        z, xbc, dt = self.in_proj(x).split([H * P, self.channels, H], dim=-1)",
            *layout.statement(layout.BODY, "xbc = ", f"F.silu(causal_conv(xbc, self.conv_weight, self.conv_bias, {doc}))"),
            "        u, b, c = xbc.split([H * P, G * N, G * N], dim=-1)",
            "        u = u.view(B, T, H, P).transpose(1, 2)  # (B, H, T, P)",
            "        b = b.view(B, T, G, N).transpose(1, 2).repeat_interleave(H // G, dim=1)",
            "        c = c.view(B, T, G, N).transpose(1, 2).repeat_interleave(H // G, dim=1)",
            "        dt = F.softplus(dt + self.dt_bias).transpose(1, 2)  # (B, H, T)",
            "        A = -torch.exp(self.A_log)  # (H,)",
            *assign_call(layout.BODY, "y", "chunked_scan",
                         ["c", "b", "u * dt.unsqueeze(-1)", "dt * A[:, None]", doc, "self.chunk"], "# (B, H, T, P)"),
            "        y = y + u * self.D[:, None, None]",
            "        y = y.transpose(1, 2).reshape(B, T, H * P)",
            "        return self.out_proj(self.norm(y, z))  # (B, T, C)",
        ]
        return self.classes("SSM", "\n".join(lines) + "\n", owner)

    def _linear_attention(self, node: Node, owner: str) -> str:
        f = lambda key: self.config(owner, key)  # noqa: E731
        extra, doc = self._documents(node)
        delta = node.params["delta"]
        norm = self.classes(NORM_GATE[0], NORM_GATE[1], owner)
        rule = ("S = exp(g) (I - beta k k^T) S + beta k v^T (the delta rule)" if delta
                else "S = exp(g) S + k v^T (gated linear attention)")
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Gated DeltaNet\'s linear attention: each head\'s state, read by its query.',
            "",
            f"    {rule}; out = S^T q.",
            "    Shapes: B batch rows, T positions, C model width, H value heads, H_k",
            "    query/key heads, K query/key head dim, V value head dim.",
            '    """',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
            f"        self.heads, self.k_heads = {f('lin_heads')}, {f('lin_k_heads')}",
            f"        self.head_dim, self.value_dim = {f('lin_head_dim')}, {f('lin_value_dim')}",
            f"        self.chunk = {f('lin_chunk')}",
            "        keys, values = self.k_heads * self.head_dim, self.heads * self.value_dim",
            *assign_call(layout.BODY, "self.q", "nn.Linear", [f("dim"), "keys", "bias=False"]),
            *assign_call(layout.BODY, "self.k", "nn.Linear", [f("dim"), "keys", "bias=False"]),
            *assign_call(layout.BODY, "self.v", "nn.Linear", [f("dim"), "values", "bias=False"]),
            *assign_call(layout.BODY, "self.z", "nn.Linear", [f("dim"), "values", "bias=False"], "# the output's gate"),
            *assign_call(layout.BODY, "self.a", "nn.Linear", [f("dim"), "self.heads", "bias=False"], "# the decay's step"),
        ]
        if delta:
            lines += assign_call(layout.BODY, "self.b", "nn.Linear", [f("dim"), "self.heads", "bias=False"],
                                 "# beta, the delta rule's rate")
        lines += [
            *self._conv_weights("2 * keys + values", f("lin_kernel"), None),
            "        # decays A uniform in [1, 16] and unit step biases, as Gated DeltaNet starts them",
            "        A = torch.empty(self.heads).uniform_(1, 16)",
            "        self.A_log = nn.Parameter(torch.log(A))",
            "        self.dt_bias = nn.Parameter(torch.ones(self.heads))",
            *assign_call(layout.BODY, "self.norm", norm, ["self.value_dim", f("lin_eps")]),
            *assign_call(layout.BODY, "self.o", "nn.Linear", ["values", f("dim"), "bias=False"]),
            "",
            f"    def forward({', '.join(['self', 'x', *extra])}):",
            "        B, T, C = x.shape",
            "        H, H_k, K, V = self.heads, self.k_heads, self.head_dim, self.value_dim",
            "        qkv = torch.cat((self.q(x), self.k(x), self.v(x)), dim=-1)",
            *layout.statement(layout.BODY, "qkv = ", f"F.silu(causal_conv(qkv, self.conv_weight, None, {doc}))"),
            "        q, k, v = qkv.split([H_k * K, H_k * K, H * V], dim=-1)",
            "        # unit-length queries and keys, each serving H // H_k value heads",
            "        q = F.normalize(q.view(B, T, H_k, K), dim=-1).transpose(1, 2) * K**-0.5",
            "        k = F.normalize(k.view(B, T, H_k, K), dim=-1).transpose(1, 2)",
            "        q = q.repeat_interleave(H // H_k, dim=1)  # (B, H, T, K)",
            "        k = k.repeat_interleave(H // H_k, dim=1)  # (B, H, T, K)",
            "        v = v.view(B, T, H, V).transpose(1, 2)  # (B, H, T, V)",
            "        g = -torch.exp(self.A_log) * F.softplus(self.a(x) + self.dt_bias)  # (B, T, H)",
        ]
        args = ["q", "k", "v", "g.transpose(1, 2)", doc, "self.chunk"]
        if delta:
            lines.append("        beta = torch.sigmoid(self.b(x)).transpose(1, 2)  # (B, H, T)")
            args.append("beta")
        lines += [
            *assign_call(layout.BODY, "y", "chunked_scan", args, "# (B, H, T, V)"),
            "        y = self.norm(y.transpose(1, 2), self.z(x).view(B, T, H, V))  # (B, T, H, V)",
            "        return self.o(y.reshape(B, T, H * V))  # (B, T, C)",
        ]
        return self.classes("LinearAttention", "\n".join(lines) + "\n", owner)

    def mixer_block_class(self, node: Node, owner: str) -> str:
        mixer = node.child("mixer")
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Pre-norm residual block around a mixer: x + mixer(norm(x))'
            + (', then x + mlp(norm(x))."""' if node.params["mlp"] is not None else '."""'),
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
        ]
        for child in node.children:
            fn, args = self.construct(child, owner)
            lines += assign_call(layout.BODY, f"self.{child.id}", fn, args)
        ports = self.port_args(node)
        mixer_args = ["self.mixer_norm(x)", *(f"{p}={p}" for p in self._documents(mixer)[0])]
        lines += ["", f"    def forward({', '.join(['self', 'x', *ports])}):"]
        lines += assign_call(layout.BODY, "x", "x + self.mixer", mixer_args, "# (B, T, C)")
        if node.params["mlp"] is not None:
            lines.append("        x = x + self.mlp(self.mlp_norm(x))  # (B, T, C)")
        lines.append("        return x")
        concept = {"short_conv": "ShortConvBlock", "ssm": "SSMBlock", "linear_attention": "LinearAttentionBlock"}
        return self.classes(concept[mixer.kind], "\n".join(lines) + "\n", owner)

