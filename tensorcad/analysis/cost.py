"""Every cost formula of the analysis, each term derived where it is written.

Norms, activations, softmax and rotations are not counted: they are O(dim) a
token against O(dim^2) for the matmuls, and every reference formula below
leaves them out too.
"""

from __future__ import annotations

from dataclasses import dataclass


def matmul_flops(matmul_params: int) -> float:
    """Forward FLOPs a token spends in weight matmuls.

    A token multiplies each weight once and adds the product: 2 FLOPs per
    weight (Kaplan et al. 2020, Table 1, C_forward = 2N; nanoGPT's
    `estimate_mfu`, "6N" for forward plus backward).
    """
    return 2.0 * matmul_params


def attention_flops(keys_per_query: float, head_dim: float, heads: int) -> float:
    """Forward FLOPs one query spends in one attention layer (``head_dim``: `Attention.flops_dim`, the mean of
    the q/k and value widths where they differ, as in a latent attention).

    q·k for each kept key: head_dim multiplies and adds (2·head_dim), and the
    weighted sum of the values: another 2·head_dim, per query head. Hence
    4 × keys × head_dim × heads (nanoGPT's estimate_mfu counts 2·2·T·head_dim
    per head for the full T×T; torchtitan's `get_num_flop_per_token` counts
    12·L·H·Q·T for forward plus backward over all T keys, i.e. 4 forward).
    """
    return 4.0 * keys_per_query * head_dim * heads


def mlp_weights(dim: int, hidden: int, activation: str) -> int:
    """Weights of one feed-forward: gate, up and down for a gated activation (SwiGLU, GeGLU), fc and proj
    otherwise (Shazeer 2020, GLU variants: three matrices of dim x hidden)."""
    return (3 if activation in ("swiglu", "geglu") else 2) * dim * hidden


def moe_active_weights(dim: int, experts: int, top_k: int, expert: int, shared: int, gate: int) -> int:
    """Weights one token multiplies in a mixture-of-experts layer: the router's dim x experts logits (every
    expert scored), the top_k experts it is sent to, the shared experts and the shared experts' gate, each
    costing 2 FLOPs a token as in `matmul_flops`. The experts it is not sent to cost it nothing (Fedus et
    al. 2021, Switch Transformers, section 2: a top-1 model spends a dense model's FLOPs a token; Megatron-LM
    `num_floating_point_operations`' moe_layer_flops counts routed 4 x h x ffn x topk x 3/2 for SwiGLU,
    i.e. 2 per weight, plus the shared experts'). Capacity drops lower it for the tokens dropped; this
    is the dropless figure, and the one a capacity factor bounds from above."""
    return dim * experts + top_k * expert + shared + gate


def train_flops(forward: float) -> float:
    """Training FLOPs a token: the forward pass and a backward pass costing twice
    it (gradients with respect to activations and to weights): 3 × forward
    (Kaplan et al. 2020, C ≈ 6N; Narayanan et al. 2021, Megatron-LM, appendix)."""
    return 3.0 * forward


def chinchilla_tokens(params: int, per_param: float = 20.0) -> float:
    """Compute-optimal training tokens: about 20 a parameter (Hoffmann et al. 2022, Table 3)."""
    return per_param * params


@dataclass(frozen=True)
class TrainingTime:
    seconds: float
    gpu_hours: float
    cost: float


def training_time(tokens: float, train_per_token: float, gpus: int, peak: float, mfu: float,
                  price_per_gpu_hour: float) -> TrainingTime:
    """Wall time at a given model FLOP utilisation: total FLOPs over the cluster's
    achieved rate (Chowdhery et al. 2022, PaLM, appendix B: MFU = observed
    throughput × 6N / peak)."""
    seconds = tokens * train_per_token / (gpus * peak * mfu)
    gpu_hours = seconds * gpus / 3600.0
    return TrainingTime(seconds, gpu_hours, gpu_hours * price_per_gpu_hour)


def kv_cache_bytes(seq: int, numbers: int, layers: int, dtype_bytes: float) -> float:
    """A stream's KV cache at full context: ``numbers`` a position a layer (a key and a value of kv_heads ×
    head_dim each, 2 × kv_heads × head_dim; a latent attention's kv_rank + rope_dim, DeepSeek-V2 section 2.1.4:
    its keys and values are rebuilt from the latent) for every position of every layer."""
    return float(seq) * numbers * layers * dtype_bytes


# --- stateful mixers (short convolutions, state-space scans, linear attention) -------------------
#
# Only contractions are counted, as for attention: the gates, the decays' exponentials,
# the norms and the element-wise resets are O(width) a token and left out. None of these
# depends on where documents begin: a reset zeroes numbers, it skips no multiply.


def conv_flops(kernel: int, channels: int) -> float:
    """Forward FLOPs a token spends in a depthwise causal convolution: each channel
    multiplies its `kernel` taps by the inputs they reach and adds them, 2 × kernel a
    channel (a tap reaching into another document reads a zero, still multiplied)."""
    return 2.0 * kernel * channels


def padded(seq: int, chunk: int) -> int:
    """Positions a chunked scan computes for a row of `seq`: whole chunks, the last padded."""
    return -(-seq // chunk) * chunk


def solve_flops(chunk: int) -> float:
    """FLOPs a right-hand column costs in the unit lower-triangular solve (I + A) X = B of
    one chunk, done by halves: X_top from the top half, then the bottom half's B less
    A_bottom-left @ X_top (2 × h × (L - h) a column), each half solved the same way.
    For a chunk of 2^n positions that is L × (L - 1)."""
    if chunk <= 1:
        return 0.0
    half = chunk // 2
    return solve_flops(half) + solve_flops(chunk - half) + 2.0 * half * (chunk - half)


def scan_flops(seq: int, chunk: int, heads: int, key: int, value: int, delta: bool) -> float:
    """Forward FLOPs a token spends in the chunked scan of `heads` states of key × value.

    In a chunk of L positions (Mamba-2's SSD; Yang et al. 2024, Gated DeltaNet, section 3):
    the scores q·k of every pair, 2·L·key a position; those scores times the values,
    2·L·value; reading the state carried in (q @ S) and writing it out (kᵀ @ v),
    2·key·value each. The delta rule adds the pairs' k·k (2·L·key), the triangular
    solve giving each position's correction of its values and keys (`solve_flops`,
    key + value columns) and the correction read from the state (2·key·value). The
    row is cut into whole chunks, so a real token carries its share of the padding;
    the document length moves none of it.
    """
    L = chunk
    per_position = 2 * L * key + 2 * L * value + 4 * key * value
    if delta:
        per_position += 2 * L * key + solve_flops(L) * (key + value) / L + 2 * key * value
    return heads * per_position * padded(seq, L) / seq


def recurrent_step_flops(heads: int, key: int, value: int, delta: bool) -> float:
    """Decode FLOPs a token in one scan layer, stepping the state once: the write k vᵀ and
    the read Sᵀ q, 2·key·value each a head; the delta rule also reads kᵀ S first."""
    return heads * (6.0 if delta else 4.0) * key * value


def state_bytes(numbers: int, layers: int, dtype_bytes: float) -> float:
    """A stream's fixed state: the same numbers at any context, layer by layer."""
    return float(numbers) * layers * dtype_bytes
