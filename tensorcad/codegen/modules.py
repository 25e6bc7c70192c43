"""The nn.Module classes of a generated model: one small class per concept.

Leaf concepts (norms, MLPs) take their sizes as arguments, as nanoGPT's LayerNorm
does; attention and blocks read them from `config`. Each emitter returns class
source with `__CLASS__` where its name goes; `Classes` names each distinct source
once, so a concept used twice alike is one class.
"""

from __future__ import annotations

from . import layout
from .names import class_name

PLACEHOLDER = "__CLASS__"

NORMS = {
    "rmsnorm": (
        "RMSNorm",
        '''class __CLASS__(nn.Module):
    """Root-mean-square normalisation with a learned scale (Llama's RMSNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # computed in float32, as Llama does, then back to the input's dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return x32.type_as(x) * self.weight  # (B, T, C)
''',
    ),
    "rmsnorm_offset": (
        "OffsetRMSNorm",
        '''class __CLASS__(nn.Module):
    """Root-mean-square normalisation scaled by offset + weight (Gemma's RMSNorm)."""

    def __init__(self, dim, eps, offset):
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - offset))

    def forward(self, x):
        # all in float32, the offset added to the weight before scaling, as Gemma does
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (self.offset + self.weight.float())).type_as(x)  # (B, T, C)
''',
    ),
    "layernorm_nobias": (
        "BiaslessLayerNorm",
        '''class __CLASS__(nn.Module):
    """Layer normalisation with a learned scale and no bias, in float32 (Cohere's LayerNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        mean = x32.mean(-1, keepdim=True)
        variance = (x32 - mean).pow(2).mean(-1, keepdim=True)
        x32 = (x32 - mean) * torch.rsqrt(variance + self.eps)
        return (self.weight.float() * x32).type_as(x)  # (B, T, C)
''',
    ),
    "layernorm": (
        "LayerNorm",
        '''class __CLASS__(nn.Module):
    """Layer normalisation with a learned scale and bias."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
''',
    ),
}

MLPS = {
    "swiglu": (
        "SwiGLU",
        '''class __CLASS__(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)), three matrices."""

    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=bias)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (B, T, C)
''',
    ),
    "geglu": (
        "GeGLU",
        '''class __CLASS__(nn.Module):
    """GeGLU feed-forward: down(gelu_tanh(gate(x)) * up(x)), three matrices (Gemma)."""

    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=bias)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        gate = F.gelu(self.gate(x), approximate="tanh")  # (B, T, hidden)
        return self.down(gate * self.up(x))  # (B, T, C)
''',
    ),
    "gelu": (
        "MLP",
        '''class __CLASS__(nn.Module):
    """Feed-forward: proj(gelu(fc(x))), two matrices (nanoGPT's MLP)."""

    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))  # (B, T, C)
''',
    ),
    "gelu_tanh": (
        "TanhGeluMLP",
        '''class __CLASS__(nn.Module):
    """Feed-forward: proj(gelu(fc(x))) with GELU's tanh approximation (GPT-2's gelu_new)."""

    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))  # (B, T, C)
''',
    ),
    "relu": (
        "ReluMLP",
        '''class __CLASS__(nn.Module):
    """Feed-forward: proj(relu(fc(x))), two matrices (T5's DenseReluDense)."""

    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)))  # (B, T, C)
''',
    ),
}

POSITION_EMBEDDING = (
    "PositionEmbedding",
    '''class __CLASS__(nn.Module):
    """Adds a learned vector for each position: x + table[position]."""

    def __init__(self, n_positions, dim):
        super().__init__()
        self.table = nn.Embedding(n_positions, dim)

    def forward(self, x__POS_ARG__):
__POS_BODY__        return x + self.table(__POS_INDEX__)  # (B, T, C)
''',
)


def position_embedding(reads_positions: bool, port: str) -> str:
    """By the positions wired in (restarting per document), else by the index."""
    name, source = POSITION_EMBEDDING
    if reads_positions:
        source = source.replace("__POS_ARG__", f", {port}").replace("__POS_BODY__", "")
        return source.replace("__POS_INDEX__", port)
    body = "        index = torch.arange(x.shape[1], device=x.device)  # (T,)\n"
    source = source.replace("__POS_ARG__", "").replace("__POS_BODY__", body)
    return source.replace("__POS_INDEX__", "index")


class Classes:
    """Names each distinct class source once, in the order first asked for."""

    def __init__(self) -> None:
        self._by_source: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, concept: str, source: str, owner: str) -> str:
        if source in self._by_source:
            return self._by_source[source]
        name = concept
        if name in self._taken:
            name = class_name(owner) + concept
        base, n = name, 1
        while name in self._taken:
            n += 1
            name = f"{base}{n}"
        self._taken.add(name)
        self._by_source[source] = name
        return name

    def sources(self) -> list[str]:
        return [s.replace(PLACEHOLDER, n) for s, n in self._by_source.items()]


def keyword_args(ports: list[str], values: dict[str, str]) -> list[str]:
    return [f"{p}={values[p]}" for p in ports]


def assign_call(indent: str, target: str, fn: str, args: list[str], comment: str = "") -> list[str]:
    """`target = fn(args)`, with a shape comment when the line has room."""
    lines = layout.call(indent, f"{target} = {fn}(", args)
    if comment and len(lines) == 1 and len(lines[0]) + len(comment) + 2 <= layout.WIDTH:
        lines[0] += f"  {comment}"
    return lines

