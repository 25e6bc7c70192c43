"""What each attention call of a forward was given, recorded where the kernel is chosen.

transformers' models look their attention function up in ``ALL_ATTENTION_FUNCTIONS``
(an ``AttentionInterface``) at every call, falling back to their own module's
``eager_attention_forward`` when the implementation is ``eager``. While a
recording is open, every key of that mapping, ``eager`` included, answers with a
wrapper that writes down what it was handed (the module, the mask, the keywords)
and then runs the function that would have run. A tensorcad-generated model
states its own hook, ``Model.recording_attend``. Nothing else changes: the same
kernels run on the same tensors, so a recorded training step is the step.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .experts import ExpertsCall, experts_recording

# The keywords an attention function reads that say how it treats documents and windows.
READ_KEYWORDS = ("is_causal", "sliding_window", "cu_seq_lens_q", "cu_seq_lens_k", "position_ids", "seq_idx")


@dataclass(frozen=True)
class AttentionCall:
    """One attention call as its kernel received it."""

    order: int  # the call's place in the forward
    layer: int  # the module's layer_idx (the call's order where it has none)
    implementation: str  # transformers' key ("eager", "sdpa", "flex_attention", ...); "generated:<form>"
    mask: Any  # the attention_mask argument (None, a tensor, a BlockMask), or a generated model's mask_mod
    queries: int
    keys: int
    rows: int
    keywords: dict[str, Any] = field(default_factory=dict)
    module: Any = None  # the attention module (transformers) or None (generated)


def _recorded(key: str, original: Callable | None, calls: list[AttentionCall]) -> Callable:
    def attention(module, query, key_states, value, attention_mask, *args, **kwargs):
        function = original
        if function is None:  # "eager": the function the module's own modeling file defines
            function = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
            if function is None:
                raise RuntimeError(f"{type(module).__name__}'s module defines no eager_attention_forward: "
                                   "tensorcad cannot record its eager path")
        layer = getattr(module, "layer_idx", None)
        calls.append(AttentionCall(
            order=len(calls), layer=layer if isinstance(layer, int) else len(calls), implementation=key,
            mask=attention_mask, queries=int(query.shape[-2]), keys=int(key_states.shape[-2]),
            rows=int(query.shape[0]), keywords={k: kwargs[k] for k in READ_KEYWORDS if k in kwargs},
            module=module))
        return function(module, query, key_states, value, attention_mask, *args, **kwargs)

    return attention


@contextlib.contextmanager
def _hf_recording(calls: list[AttentionCall]) -> Iterator[None]:
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:  # no transformers: nothing of it to record
        yield
        return
    saved = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    keys = [k for k in ALL_ATTENTION_FUNCTIONS if k != "eager"]
    originals = {k: ALL_ATTENTION_FUNCTIONS[k] for k in keys}
    try:
        for k in keys:
            ALL_ATTENTION_FUNCTIONS[k] = _recorded(k, originals[k], calls)
        ALL_ATTENTION_FUNCTIONS["eager"] = _recorded("eager", None, calls)
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS._local_mapping.clear()
        ALL_ATTENTION_FUNCTIONS._local_mapping.update(saved)


def _generated_around(calls: list[AttentionCall]) -> Callable:
    """A generated model's ``around`` hook: write the call down, then run it."""
    def around(run, q, k, v, **kwargs):
        calls.append(AttentionCall(order=len(calls), layer=len(calls), implementation=f"generated:{kwargs['form']}",
                                   mask=kwargs["mask_mod"], queries=int(q.shape[2]), keys=int(k.shape[2]),
                                   rows=int(q.shape[0])))
        return run(q, k, v, **kwargs)

    return around


class Calls(list):
    """The attention calls of a recorded block, in order; ``experts``: each mixture-of-experts layer's call."""

    def __init__(self, calls=(), experts=()):
        super().__init__(calls)
        self.experts: list[ExpertsCall] = list(experts)


@contextlib.contextmanager
def recording(model: Any) -> Iterator[Calls]:
    """Record every attention call made inside the block (a transformers model's, a generated model's), and how
    each mixture-of-experts layer routed (``.experts``)."""
    calls = Calls()
    generated = getattr(type(model), "recording_attend", None)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_hf_recording(calls))
        stack.enter_context(experts_recording(model, calls.experts))
        if generated is not None:
            stack.enter_context(generated(around=_generated_around(calls)))
        yield calls
