"""The path each mixture-of-experts layer took in a recorded forward (issue 44): its implementation, dropless or
bounded by a capacity, the tokens it routed and, under a capacity, the routings it turned away.

Read with forward hooks on the modules that route, while a recording is open:

- transformers 5's experts (the classes ``use_experts_implementation`` wraps: Qwen3-MoE, Mixtral, OLMoE,
  DeepSeek-V3, ...) receive every token of the batch with its top-k experts, and compute each routing they
  are given: dropless. Their implementation is ``config._experts_implementation`` (eager, grouped_mm, ...);
- Switch Transformers' top-1 router returns each token's expert, zero where the expert's ``expert_capacity``
  was full: the zero rows are the tokens dropped;
- a generated ``MoE`` says its capacity factor (``capacity_factor``; none: dropless), and its own ``keep``
  says which routings fit.

A layer that routes the padding of a padded batch spends capacity (and, where the aux loss counts it, balance)
on tokens no document holds: the path counts them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch


@dataclass(frozen=True)
class ExpertsCall:
    """One mixture-of-experts layer's call as it routed."""

    layer: str  # the module's name in the model
    implementation: str  # transformers' experts implementation ("eager", "grouped_mm", ...), "switch", "generated"
    capacity: float | int | None  # the capacity (slots an expert takes, or a factor); None: dropless
    tokens: int  # tokens routed
    top_k: int
    experts: int
    dropped: int = 0  # routings past capacity
    padding: int = 0  # of the tokens routed, those the batch marks as padding (set by the check, which has the batch)

    @property
    def dropless(self) -> bool:
        return self.capacity is None

    def line(self) -> str:
        how = "dropless" if self.dropless else f"capacity {self.capacity:g}, {self.dropped} routing(s) dropped"
        pad = f", {self.padding} of them padding" if self.padding else ""
        return (f"{self.layer}: {self.implementation} experts, {how}; {self.tokens} tokens routed to top-{self.top_k} "
                f"of {self.experts}{pad}")

    def to_json(self) -> dict:
        return {"layer": self.layer, "implementation": self.implementation, "capacity": self.capacity,
                "tokens": self.tokens, "topK": self.top_k, "experts": self.experts, "dropped": self.dropped,
                "padding": self.padding}


def _transformers_experts(name: str, module: Any, args: tuple, kwargs: dict) -> ExpertsCall:
    hidden = args[0] if args else kwargs["hidden_states"]
    index = args[1] if len(args) > 1 else kwargs["top_k_index"]
    config = getattr(module, "config", None)
    implementation = getattr(config, "_experts_implementation", None) or "eager"
    experts = getattr(module, "num_experts", None) or int(module.gate_up_proj.shape[0])
    return ExpertsCall(name, implementation, None, int(hidden.reshape(-1, hidden.shape[-1]).shape[0]),
                       int(index.shape[-1]), int(experts))


def _switch_router(name: str, module: Any, output: Any) -> ExpertsCall:
    kept = output[0]  # (B, T, E) one-hot, zero where the capacity was full
    tokens = int(kept.reshape(-1, kept.shape[-1]).shape[0])
    return ExpertsCall(name, "switch", int(module.expert_capacity), tokens, 1, int(kept.shape[-1]),
                       dropped=tokens - int(kept.sum()))


def _generated(name: str, module: Any, args: tuple) -> ExpertsCall:
    x = args[0]
    flat = x.reshape(-1, x.shape[-1])
    factor = getattr(module, "capacity_factor", None)
    dropped = 0
    if factor is not None:  # the module's own routing and keep, once more: which routings fit
        scores = module.gate(flat).float()
        chosen = scores.topk(module.top_k, dim=-1).indices
        kept = module.keep(chosen, torch.ones(chosen.shape, dtype=flat.dtype, device=flat.device), x.shape[0])
        dropped = int((kept == 0).sum())
    return ExpertsCall(name, "generated", factor, int(flat.shape[0]), int(module.top_k), int(module.n_experts),
                       dropped=dropped)


@contextlib.contextmanager
def experts_recording(model: Any, calls: list[ExpertsCall]) -> Iterator[None]:
    """Append an ``ExpertsCall`` to ``calls`` for every routing layer's call inside the block."""
    handles = []
    for name, module in model.named_modules() if hasattr(model, "named_modules") else ():
        if hasattr(module, "_is_expert_parallel") and hasattr(module, "gate_up_proj"):
            def hook(m, args, kwargs, out, name=name):
                calls.append(_transformers_experts(name, m, args, kwargs))
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        elif hasattr(module, "expert_capacity") and hasattr(module, "classifier"):
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: calls.append(_switch_router(name, m, out))))
        elif type(module).__name__ == "MoE" and hasattr(module, "n_experts") and hasattr(module, "gate"):
            def generated(m, args, out, name=name):
                with torch.no_grad():
                    calls.append(_generated(name, m, args))
            handles.append(module.register_forward_hook(generated))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def with_padding(calls: list[ExpertsCall], padding: int, tokens: int) -> list[ExpertsCall]:
    """Each call that routed the batch's every token counts the batch's ``padding`` tokens among them."""
    return [replace(c, padding=padding) if padding and c.tokens == tokens else c for c in calls]


def experts_summary(experts: list[ExpertsCall]) -> str:
    """One phrase for every routing layer: how many, each kind of path once."""
    kinds: dict[str, int] = {}
    for c in experts:
        how = "dropless" if c.dropless else f"capacity {c.capacity:g}"
        key = f"{how} ({c.implementation}), top-{c.top_k} of {c.experts}"
        kinds[key] = kinds.get(key, 0) + 1
    return ", ".join(f"{n} layer{'s' if n != 1 else ''} {key}" for key, n in kinds.items())


__all__ = ("ExpertsCall", "experts_recording", "experts_summary", "with_padding")
