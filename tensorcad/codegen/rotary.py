"""Rotary positions beyond plain rope, in a generated module: a scaling, part of a head, pairs side by side.

A rope that is plain (every feature, in halves, no scaling) keeps `prelude`'s
tables and `rotate`, so the code of every design that had one is unchanged. Any
other gets a `Rotary` class of its own (`rotary_class`) over the runtime below,
pasted in only when some rope needs it. The runtime computes what transformers'
rotary embedding computes (`modeling_rope_utils`), in the same order and dtypes,
so imported models match it: the inverse frequencies once (linear, llama3, yarn,
longrope's two sets), or on each call from the longest position of the batch
(dynamic, and longrope's choice between its sets); cos and sin at each position,
scaled by the attention factor (yarn, longrope); the first `rotary_dim` features
of a head turned, in halves or in adjacent pairs (Cohere).
"""

from __future__ import annotations

from typing import Any, Callable

from ..design.rope_scaling import attention_factor
from . import layout
from .modules import PLACEHOLDER, assign_call

ROTARY_RUNTIME = '''

# ---------------------------------------------------------------------------
# Rotary positions beyond plain rope: scaled frequencies, part of a head
# turned, adjacent pairs. Computed as transformers' rotary embeddings compute
# them (modeling_rope_utils), in the same order and dtypes.
# ---------------------------------------------------------------------------


def rope_frequencies(dim, theta):
    """Plain rotary's inverse frequencies: (dim / 2,) float32."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def linear_frequencies(dim, theta, factor):
    """Every frequency divided by factor (positions interpolated)."""
    return rope_frequencies(dim, theta) / factor


def llama3_frequencies(
    dim, theta, factor, low_freq_factor, high_freq_factor, original_context
):
    """Llama 3.1's: long wavelengths divided by factor, short ones kept, between smoothed."""
    inv_freq = rope_frequencies(dim, theta)
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def yarn_frequencies(
    dim, theta, factor, original_context, beta_fast, beta_slow, truncate
):
    """YaRN's: extrapolated frequencies blended into interpolated ones along a ramp."""

    # the feature whose frequency turns this many times over the original context
    def feature(rotations):
        return (dim * math.log(original_context / (rotations * 2 * math.pi))) / (
            2 * math.log(theta)
        )

    low, high = feature(beta_fast), feature(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a ramp of no width would divide by zero
    ramp = torch.clamp(
        (torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1
    )
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    extrapolated = 1 - ramp
    interpolation, extrapolation = 1.0 / (factor * pos_freqs), 1.0 / pos_freqs
    return interpolation * (1 - extrapolated) + extrapolation * extrapolated


def longrope_frequencies(dim, theta, factors):
    """Each frequency divided by its own factor (LongRoPE)."""
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (torch.tensor(factors, dtype=torch.float32) * theta**shape)


def dynamic_frequencies(dim, theta, factor, original_context, longest):
    """NTK scaling for a call whose longest position is longest (a tensor); plain within."""
    stretch = (factor * longest / original_context) - (factor - 1)
    base = theta * stretch ** (dim / (dim - 2))
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float().to(longest.device) / dim
    plain = rope_frequencies(dim, theta).to(longest.device)
    return torch.where(longest > original_context, 1.0 / (base**shape), plain)


def rotary_angles(inv_freq, positions, attention_factor=1.0, interleaved=False):
    """cos, sin at each position: (B, T) -> (B, 1, T, D_r) each, times attention_factor."""
    inv_freq = inv_freq.to(positions.device)
    freqs = positions[..., None].float() * inv_freq  # (B, T, D_r / 2)
    if interleaved:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)  # (B, T, D_r)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D_r)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    return cos[:, None], sin[:, None]


def rotate_pairs(x):
    """Adjacent pairs (2i, 2i+1) turned a quarter: (-x[2i+1], x[2i])."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def rotate_part(x, cos, sin, interleaved=False):
    """x (B, H, T, D), its first D_r features turned by cos, sin (B, 1, T, D_r)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    turned, kept = x[..., : cos.shape[-1]], x[..., cos.shape[-1] :]
    if interleaved:  # in float32, then back, as Cohere turns them
        turned = (turned.float() * cos + rotate_pairs(turned.float()) * sin).to(x.dtype)
    else:
        turned = turned * cos + rotate_half(turned) * sin
    return torch.cat((turned, kept), dim=-1)
'''

# What each scaling's frequency function takes after (dim, theta), as the rope's params name them.
_ARGUMENTS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_context"),
    "yarn": ("factor", "original_context", "beta_fast", "beta_slow", "truncate"),
    "dynamic": ("factor", "original_context"),
    "longrope": (),
}


def config_keys(rope: dict[str, Any]) -> dict[str, Any]:
    """The Config numbers of a rope that is not plain: its rotated features, its scaling's parameters."""
    keys: dict[str, Any] = {"rotary_dim": rope["rotary_dim"]}
    scaling = rope["scaling"]
    if scaling is not None:
        for name, value in scaling.items():
            if name != "type" and value is not None and name not in ("attention_factor", "mscale", "mscale_all_dim"):
                keys[f"rope_{name}"] = value
        if scaling["type"] in ("yarn", "longrope"):
            keys["rope_attention_factor"] = attention_factor(scaling)
    return keys


def rotary_class(rope: dict[str, Any], field: Callable[[str], str]) -> str:
    """The source of a `Rotary` module for this rope (``field(key)``: its ``config.<name>``)."""
    scaling = rope["scaling"]
    kind = "plain" if scaling is None else scaling["type"]
    dim, theta = field("rotary_dim"), field("rope_theta")
    what = {"plain": "plain frequencies", "dynamic": "dynamic (NTK) scaling from each call's longest position",
            "longrope": "LongRoPE's short or long factors, by each call's longest position"}.get(kind, f"{kind} scaling")
    part = "" if rope["rotary_dim"] == rope["head_dim"] else f", the first {rope['rotary_dim']} features of a head"
    pairs = ", adjacent pairs" if rope["interleaved"] else ""
    lines = [
        f"class {PLACEHOLDER}(nn.Module):",
        f'    """Rotary positions: {what}{part}{pairs}; no params, only the angles change."""',
        "",
        "    def __init__(self, config):",
        "        super().__init__()",
    ]
    factor = field("rope_attention_factor") if kind in ("yarn", "longrope") else "1.0"
    lines.append(f"        self.attention_factor = {factor}  # multiplies cos and sin")
    if kind == "dynamic":
        lines += [f"        self.dim, self.theta = {dim}, {theta}",
                  f"        self.factor, self.original_context = {field('rope_factor')}, {field('rope_original_context')}"]
    elif kind == "longrope":
        lines.append(f"        self.original_context = {field('rope_original_context')}")
        for which in ("short", "long"):
            lines += assign_call(layout.BODY, f"{which}_inv_freq", "longrope_frequencies",
                                 [dim, theta, field(f"rope_{which}_factor")])
            lines.append(f'        self.register_buffer("{which}_inv_freq", {which}_inv_freq, persistent=False)')
    else:
        function = "rope_frequencies" if kind == "plain" else f"{kind}_frequencies"
        args = [dim, theta, *(field(f"rope_{name}") for name in _ARGUMENTS.get(kind, ()))]
        lines += assign_call(layout.BODY, "inv_freq", function, args)
        lines.append('        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (D_r / 2,)')
    lines += [
        "",
        "    def forward(self, x, positions=None):",
        '        """x (B, H, T, D) turned by each token\'s position (None: 0..T-1)."""',
        "        if positions is None:",
        "            positions = torch.arange(x.shape[-2], device=x.device)[None]  # (1, T)",
    ]
    if kind == "dynamic":
        lines += ["        # the longest position of the whole batch sets the frequencies, as transformers reads it",
                  "        longest = positions.max() + 1",
                  "        inv_freq = dynamic_frequencies(",
                  "            self.dim, self.theta, self.factor, self.original_context, longest",
                  "        )"]
    elif kind == "longrope":
        lines += ["        # past the original context (the batch's longest position) the long factors apply",
                  "        longer = positions.max() + 1 > self.original_context",
                  "        inv_freq = torch.where(longer, self.long_inv_freq, self.short_inv_freq)"]
    else:
        lines.append("        inv_freq = self.inv_freq")
    interleaved = "True" if rope["interleaved"] else "False"
    lines += assign_call(layout.BODY, "cos, sin", "rotary_angles",
                         ["inv_freq", "positions", "self.attention_factor", interleaved], "# (B, 1, T, D_r)")
    lines.append(f"        return rotate_part(x, cos, sin, interleaved={interleaved})  # (B, H, T, D)")
    return "\n".join(lines) + "\n"
