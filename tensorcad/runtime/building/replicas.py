"""`replica`: a transformers model's architecture and code path at a size that certifies in seconds on CPU.

What packing breaks on is the code path, not the size: the same class (so the
same ``model_type`` and forward), the same attention implementation, the same
layer types in the same cycle, windows, grouped-query ratio, tied embeddings,
rope settings and positions convention. What changes: the number of layers (a
whole number of cycles of each per-layer list, ``layer_types`` and SmolLM3's
``no_rope_layers``, at least ``layers``), the width
(``hidden``, heads of 16 channels, the query-to-key/value head ratio kept), the
MLP (twice the width), windows (no longer than ``window``, so the user's
documents are longer than the window and show whether it holds) and dropout
(off: the certificates compare runs, which dropout would make differ). The
vocabulary is kept unless ``vocab`` caps it: a user's batch indexes it (the guard
keeps it), a batch tensorcad draws does not (``tensorcad certify MODEL_DIR`` caps it).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from tensorcad.errors import TensorcadError

HEAD_CHANNELS = 16
DROPOUT_SUFFIXES = ("dropout", "pdrop", "dropout_prob", "dropout_rate")


def _period(types: list[str]) -> int:
    """The shortest cycle ``layer_types`` repeats a whole number of times (its length when it has none)."""
    for p in range(1, len(types) + 1):
        if len(types) % p == 0 and all(types[i] == types[i % p] for i in range(len(types))):
            return p
    return len(types)


# A config's lists of one entry a layer. SmolLM3's ``no_rope_layers`` is a cycle of its own (every fourth
# layer without rope): kept whole like ``layer_types``, and resized with the layers, as transformers reads
# entry ``i`` for layer ``i`` (a replica longer than the list it copied raised IndexError).
PER_LAYER = ("layer_types", "no_rope_layers")


def _layers(small: Any, config: Any, layers: int) -> int:
    """The replica's layer count: at least ``layers``, a whole cycle of every per-layer list that has one
    (``PER_LAYER``; with no cycle, the first layers holding each of its values), with the attention layers of
    a hybrid (``attn_layer_indices``) that fall in it."""
    stored = config.to_dict()  # stored lists (Mamba-2's and Bamba's derive their layer_types: read-only)
    lists = {k: list(stored[k]) for k in PER_LAYER if isinstance(stored.get(k), (list, tuple)) and stored[k]}
    count, cycle = layers, 1
    for values in lists.values():
        period = _period(values)
        if period < len(values):
            cycle = math.lcm(cycle, period)
        else:
            count = max(count, max(values.index(v) for v in set(values)) + 1)
    count = -(-count // cycle) * cycle
    for key, values in lists.items():
        setattr(small, key, [values[i % len(values)] for i in range(count)])
    indices = getattr(config, "attn_layer_indices", None)
    if isinstance(indices, (list, tuple)) and indices:
        count = max(count, min(indices) + 2)  # an attention layer and a mixer after it
        small.attn_layer_indices = [i for i in indices if i < count]
    return count


def _attention_heads(small: Any, config: Any, hidden: int) -> None:
    """Heads of 16 channels, the query-to-key/value ratio kept (a config with no attention keeps none)."""
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    if heads < 1:
        return
    kv = getattr(config, "num_key_value_heads", None) or heads
    ratio = max(1, heads // int(kv))
    new_heads = max(hidden // HEAD_CHANNELS, ratio)
    new_heads -= new_heads % ratio
    if hidden % new_heads:
        raise TensorcadError("hidden", f"{hidden} channels do not split into {new_heads} heads (ratio {ratio} kept)")
    small.num_attention_heads = new_heads
    if getattr(config, "num_key_value_heads", None) is not None:
        small.num_key_value_heads = new_heads // ratio
    if getattr(config, "head_dim", None) is not None and getattr(config, "num_attention_heads", None):
        small.head_dim = hidden // new_heads


def _mixer_heads(small: Any, config: Any, hidden: int) -> None:
    """A state-space mixer's heads (Mamba-2's, Bamba's) of 16 channels over its expanded width, groups kept
    where they still divide the heads."""
    for heads_key, dim_key, groups_key, expand_key in (("num_heads", "head_dim", "n_groups", "expand"),
                                                       ("mamba_n_heads", "mamba_d_head", "mamba_n_groups",
                                                        "mamba_expand")):
        if heads_key not in config.to_dict():  # (a config may alias num_heads to its attention heads: not listed)
            continue
        inner = int(getattr(config, expand_key, 2) or 2) * hidden
        setattr(small, dim_key, HEAD_CHANNELS)
        setattr(small, heads_key, inner // HEAD_CHANNELS)
        groups = int(getattr(config, groups_key, 1) or 1)
        setattr(small, groups_key, groups if (inner // HEAD_CHANNELS) % groups == 0 else 1)


def _set(config: Any, name: str, value: Any) -> None:
    if hasattr(config, name):
        setattr(config, name, value)


def replica_config(config: Any, layers: int = 2, hidden: int = 64, window: int = 16,
                   vocab: int | None = None) -> Any:
    """A copy of ``config`` at the replica's size (see the module's docstring for what is kept)."""
    for name, value in (("layers", layers), ("hidden", hidden), ("window", window), ("vocab", vocab or 1)):
        if not isinstance(value, int) or value < 1:
            raise TensorcadError(name, f"a replica's {name} is a whole number >= 1, not {value!r}")
    if hidden % HEAD_CHANNELS:
        raise TensorcadError("hidden", f"{hidden} is not a multiple of {HEAD_CHANNELS} (a head's channels)")
    small = copy.deepcopy(config)
    count = _layers(small, config, layers)
    small.num_hidden_layers = count
    small.hidden_size = hidden
    _attention_heads(small, config, hidden)
    _mixer_heads(small, config, hidden)
    if getattr(config, "intermediate_size", None) is not None:
        small.intermediate_size = 2 * hidden
    for name in ("moe_intermediate_size", "shared_expert_intermediate_size"):  # the experts' widths too, not
        if getattr(config, name, None):  # their count or top-k: the routing is the model's
            setattr(small, name, hidden)
    if getattr(config, "n_inner", None) is not None:
        small.n_inner = 2 * hidden
    if isinstance(getattr(config, "sliding_window", None), int):
        small.sliding_window = min(config.sliding_window, window)
    for name, value in config.to_dict().items():
        if isinstance(value, float) and name.endswith(DROPOUT_SUFFIXES):
            _set(small, name, 0.0)
    if vocab is not None and isinstance(getattr(config, "vocab_size", None), int):
        small.vocab_size = min(config.vocab_size, vocab)
    small._attn_implementation = getattr(config, "_attn_implementation", None)
    return small


def replica(model_or_config: Any, layers: int = 2, hidden: int = 64, window: int = 16, seed: int = 0) -> Any:
    """The replica of a transformers model (its class) or config (the causal LM ``AutoModelForCausalLM`` makes)."""
    config = getattr(model_or_config, "config", model_or_config)
    if not hasattr(config, "model_type") or not hasattr(config, "to_dict"):
        raise TensorcadError("model_or_config", f"{type(model_or_config).__name__} is not a transformers model or "
                                                "config: a replica copies one")
    small = replica_config(config, layers, hidden, window)
    torch.manual_seed(seed)
    if hasattr(model_or_config, "config"):
        model = type(model_or_config)(small)
    else:
        import transformers

        model = transformers.AutoModelForCausalLM.from_config(small, attn_implementation=small._attn_implementation)
    return model.eval()
