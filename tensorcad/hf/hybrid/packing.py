"""How each hybrid family of transformers keeps packed documents apart, and what that needs.

Attention reads packing from restarting `position_ids`; a layer that carries state
(Mamba-2's scan, LFM2's short convolution) never sees them. transformers 5 keeps such
layers apart only through `seq_idx` (and `cu_seqlens`), and only inside the CUDA
kernels (`causal_conv1d`, `mamba_ssm`): its own torch code refuses them ("can't keep
packed sequences apart without causal_conv1d"), and Mamba2ForCausalLM passes its layers
nothing at all, so with position_ids alone every packed document after the first starts
from the last one's state.

`PATHS` says, family by family, which layers carry state and what keeps them apart;
`mixer_hint` words it for a failed certificate; `kernels_missing` says what is absent
here. No torch or transformers at import.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PackingPath:
    family: str  # as people name it
    mixer: str  # the layers that carry state, in words
    layer_type: str | None  # the config's layer_types entry naming them; None: every layer
    reads: str | None  # the keywords transformers keeps them apart by; None: nothing reaches them
    kernels: tuple[str, ...]  # the packages that read those keywords (CUDA)
    adapter: bool = True  # hf_causal_lm(model, packing="seq_idx") passes all it reads (seq_idx and cu_seqlens)


PATHS = {
    "mamba2": PackingPath("Mamba-2", "selective-scan", None, None, ()),
    "bamba": PackingPath("Bamba", "Mamba-2", "linear_attention", "seq_idx and cu_seqlens",
                         ("causal_conv1d", "mamba_ssm")),
    "falcon_h1": PackingPath("Falcon-H1", "Mamba-2 (beside attention in every layer)", None, "seq_idx and cu_seqlens",
                             ("causal_conv1d", "mamba_ssm")),
    "lfm2": PackingPath("LFM2", "short-convolution", "conv", "seq_idx", ("causal_conv1d",)),
    # Measured on transformers 5.24 (tests/hf/test_family_matrix.py): each leaks with restarting position_ids and no
    # cache; handed seq_idx and cu_seqlens, all but Jamba reach causal_conv1d's torch fallback, which refuses them.
    "jamba": PackingPath("Jamba", "Mamba", "linear_attention", None, ()),
    "zamba2": PackingPath("Zamba2", "Mamba-2 (in every layer, the shared attention beside some)", None,
                          "seq_idx and cu_seqlens", ("causal_conv1d", "mamba_ssm")),
    "nemotron_h": PackingPath("Nemotron-H", "Mamba-2", "linear_attention", "seq_idx and cu_seqlens",
                              ("causal_conv1d", "mamba_ssm")),
    "granitemoehybrid": PackingPath("Granite-MoE-Hybrid", "Mamba-2", "linear_attention", "seq_idx and cu_seqlens",
                                    ("causal_conv1d", "mamba_ssm")),
    "kimi_linear": PackingPath("Kimi-Linear", "Kimi delta attention", "linear_attention", "seq_idx and cu_seqlens",
                               ("causal_conv1d", "fla")),
    # its gated delta rule reads cu_seq_lens_q, which the seq_idx adapter does not pass
    "qwen3_next": PackingPath("Qwen3-Next", "gated delta net", "linear_attention",
                              "seq_idx and cu_seqlens (its convolution) and cu_seq_lens_q (its delta rule)",
                              ("causal_conv1d", "fla"), adapter=False),
}
# What transformers' torch fallback raises when handed seq_idx or cu_seqlens without the kernel.
REFUSAL = "can't keep packed sequences apart without"


def path_of(model: Any) -> PackingPath | None:
    return PATHS.get(getattr(getattr(model, "config", None), "model_type", None))


def stateful_layers(model: Any) -> list[int]:
    """The indices of the model's layers that carry state."""
    path, config = path_of(model), model.config
    layers = int(getattr(config, "num_hidden_layers", 0))
    if path is None:
        return []
    types = list(getattr(config, "layer_types", None) or [])
    if path.layer_type is None or len(types) != layers:
        return list(range(layers))
    return [i for i, t in enumerate(types) if t == path.layer_type]


def kernels_missing(path: PackingPath) -> list[str]:
    """The kernels this machine lacks (never imported: finding them is enough)."""
    return [k for k in path.kernels if importlib.util.find_spec(k) is None]


def _layers(indices: list[int], layers: int) -> str:
    if len(indices) == layers:
        return f"all {layers} layers"
    shown = ", ".join(map(str, indices[:8])) + (", ..." if len(indices) > 8 else "")
    return f"layer{'s' if len(indices) != 1 else ''} {shown}"


def mixer_hint(model: Any) -> str | None:
    """Why a hybrid family leaks across packed documents, and what it needs; None for any other model."""
    path = path_of(model)
    if path is None:
        return None
    indices = stateful_layers(model)
    where = _layers(indices, int(model.config.num_hidden_layers))
    head = (f"{path.family}'s {path.mixer} layers ({where}) carry state from one packed document into the "
            "next, and position_ids never reach them")
    fix = ("tensorcad import-hf --documents gives a model of the same weights that resets at each document "
           "(load them with load_hf_state_dict)")
    if path.reads is None:
        return (f"{head}; {type(model).__name__} passes its layers no seq_idx either, so no setting packs it "
                f"correctly: train it one document a row, or {fix}")
    missing = kernels_missing(path)
    kernels = " and ".join(path.kernels) + (" CUDA kernel reads" if len(path.kernels) == 1 else " CUDA kernels read")
    state = (f"not installed here ({', '.join(missing)} missing), so on this machine no setting packs it correctly"
             if missing else "installed here: pass them")
    how = " (tensorcad.testing.hf_causal_lm(model, packing='seq_idx'))" if path.adapter else ""
    return f"{head}: transformers keeps them apart only with {path.reads}{how}, which only the {kernels}, {state}; or {fix}"


def seq_idx_refusal(model: Any) -> str | None:
    """Why ``hf_causal_lm(model, packing="seq_idx")`` cannot apply to ``model``; None when it can."""
    path = path_of(model)
    name = type(model).__name__
    if path is None:
        families = ", ".join(k for k, p in PATHS.items() if p.reads is not None)
        return (f"packing='seq_idx' is for the hybrid families whose stateful layers read seq_idx ({families}); "
                f"{name} is none of them: use packing='position_ids'")
    if path.reads is None:
        return f"{name} passes its layers no seq_idx: {mixer_hint(model)}"
    if not path.adapter:
        return f"{name} reads {path.reads}, more than packing='seq_idx' passes: {mixer_hint(model)}"
    return None
