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


def attention_flops(keys_per_query: float, head_dim: int, heads: int) -> float:
    """Forward FLOPs one query spends in one attention layer.

    q·k for each kept key: head_dim multiplies and adds (2·head_dim), and the
    weighted sum of the values: another 2·head_dim, per query head. Hence
    4 × keys × head_dim × heads (nanoGPT's estimate_mfu counts 2·2·T·head_dim
    per head for the full T×T; torchtitan's `get_num_flop_per_token` counts
    12·L·H·Q·T for forward plus backward over all T keys, i.e. 4 forward).
    """
    return 4.0 * keys_per_query * head_dim * heads


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


def kv_cache_bytes(seq: int, kv_heads: int, head_dim: int, layers: int, dtype_bytes: float) -> float:
    """A stream's KV cache at full context: a key and a value (2) of
    kv_heads × head_dim numbers for every position of every layer."""
    return 2.0 * seq * kv_heads * head_dim * layers * dtype_bytes
