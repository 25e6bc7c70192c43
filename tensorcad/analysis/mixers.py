"""A stateful mixer's figures: its parameters, its FLOPs a token and the state a stream keeps.

A mixer is a leaf of the design tree (`design.mixers`). Its linear projections are
matmul parameters, 2 FLOPs each a token (`cost.matmul_flops`); what it computes
beyond them, the convolution's taps and the chunked scan, is its *mixing*
(`cost.conv_flops`, `cost.scan_flops`), counted apart because it is not a weight
matmul. Neither depends on the document length: where attention's keys a query grow
with the document, a mixer does the same work for every token (`mixing_flops` takes
the row's length only for the scan's last, padded chunk).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..design.model import Node
from .cost import conv_flops, recurrent_step_flops, scan_flops


@dataclass(frozen=True)
class Scan:
    heads: int
    key: int  # the state's rows: an ssm's state width, a linear attention's head_dim
    value: int  # its columns: an ssm's head_dim, a linear attention's value_dim
    chunk: int
    delta: bool


@dataclass(frozen=True)
class MixerShape:
    """What one mixer holds and computes, in the numbers the formulas take."""

    projections: int  # weights of its linear projections (matmul parameters)
    own: int  # its other learned numbers: taps, biases, decays, skips, norm scales
    kernel: int
    conv_channels: int  # channels its causal convolution runs over
    scan: Scan | None  # None: a convolution alone

    @property
    def total(self) -> int:
        return self.projections + self.own


def shape(node: Node) -> MixerShape:
    p, d = node.params, node.dim_in
    k = p["kernel"]
    if node.kind == "short_conv":
        # in_proj to b, c and h (3 d), out_proj; taps over d channels
        biases = (3 * d + d + d) if p["bias"] else 0
        return MixerShape(4 * d * d, d * k + biases, k, d, None)
    if node.kind == "ssm":
        heads, P, N, G = p["heads"], p["head_dim"], p["state"], p["groups"]
        inner = heads * P
        channels = inner + 2 * G * N  # the convolution runs over values, B and C
        width = inner + channels + heads  # in_proj: the gate z, values/B/C, and dt
        biases = (width + d) if p["bias"] else 0
        own = channels * k + (channels if p["conv_bias"] else 0) + 3 * heads + inner + biases
        return MixerShape(d * width + inner * d, own, k, channels, Scan(heads, N, P, p["chunk"], False))
    if node.kind == "linear_attention":
        heads, k_heads, K, V = p["heads"], p["k_heads"], p["head_dim"], p["value_dim"]
        channels = 2 * k_heads * K + heads * V  # q, k and v
        # and the output gate z, the decay's step a and (the delta rule's) beta b
        width = channels + heads * V + (2 if p["delta"] else 1) * heads
        own = channels * k + 2 * heads + V  # taps, A_log and dt_bias, the gated norm's scale
        return MixerShape(d * width + heads * V * d, own, k, channels, Scan(heads, K, V, p["chunk"], p["delta"]))
    raise AssertionError(f"{node.kind} is not a stateful mixer")


def mixing_flops(node: Node, seq: int) -> float:
    """Forward FLOPs a token beyond the projections: the taps, and the scan over a row of ``seq``."""
    s = shape(node)
    flops = conv_flops(s.kernel, s.conv_channels)
    if s.scan is not None:
        flops += scan_flops(seq, s.scan.chunk, s.scan.heads, s.scan.key, s.scan.value, s.scan.delta)
    return flops


def decode_flops(node: Node) -> float:
    """Decode FLOPs a token beyond the projections: the taps over the carried inputs, one state step."""
    s = shape(node)
    flops = conv_flops(s.kernel, s.conv_channels)
    if s.scan is not None:
        flops += recurrent_step_flops(s.scan.heads, s.scan.key, s.scan.value, s.scan.delta)
    return flops


def state_numbers(node: Node) -> int:
    """Numbers a stream keeps for one layer of this mixer, at any context: the convolution's
    last kernel - 1 inputs of each channel, and each head's key × value state."""
    s = shape(node)
    numbers = (s.kernel - 1) * s.conv_channels
    if s.scan is not None:
        numbers += s.scan.heads * s.scan.key * s.scan.value
    return numbers
