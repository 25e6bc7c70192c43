"""Calling the model under check: what it returns read as outputs, what it raises as one line.

Every certificate runs a user's ``model_fn(ids, documents, positions)`` many
times. What comes back may be a tensor (logits, log-probabilities, a hidden
state, a per-position loss), a tuple whose first item is the output, or a
Hugging Face ``ModelOutput`` / dict holding it under a name; `outputs_of`
reads it, and refuses in one line what it cannot read. An exception from the
model becomes a `ModelRaised` (a ``TensorcadError``: one line, the error
chained for a traceback) that says which run raised it and, when torch's
compiler is to blame, names torch's part: an inductor C++ build that fails on
this CPU is the machine's, not the model's.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from tensorcad.errors import TensorcadError

if TYPE_CHECKING:  # torch on first use: the registry imports this module and stays torch-free
    import torch

# What a Hugging Face output holds the outputs under, in the order they are looked for.
NAMED = ("logits", "last_hidden_state")


class ModelRaised(TensorcadError):
    """The model raised while a certificate ran it: the certificate cannot say anything of it."""


def outputs_of(value: Any, who: str = "model_fn") -> torch.Tensor:
    """The (B, T, ...) tensor in what a model returned."""
    import torch

    for name in NAMED:
        held = value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)
        if isinstance(held, torch.Tensor):
            return held
    if isinstance(value, Mapping):
        tensors = [k for k, v in value.items() if isinstance(v, torch.Tensor)]
        if len(tensors) == 1:
            return value[tensors[0]]
        raise TensorcadError(who, f"returned a {type(value).__name__} holding "
                                  f"{'no tensor' if not tensors else 'tensors ' + ', '.join(map(str, tensors))}: "
                                  "return the outputs to compare, or pick them with tensorcad.testing.call(..., output=NAME)")
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    if not isinstance(value, torch.Tensor):
        raise TensorcadError(who, f"expected a tensor of outputs, got {type(value).__name__}")
    return value


def torch_part(error: BaseException) -> str | None:
    """Which part of torch failed, when it is torch's compiler rather than the model; None otherwise."""
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    modules = [type(e).__module__ or "" for e in chain]
    if not any(m.startswith(("torch._inductor", "torch._dynamo")) for m in modules):
        return None
    frames = [f.name for e in chain for f in traceback.extract_tb(e.__traceback__)]
    path = "the compiled flex path" if any("flex_attention" in f for f in frames) else "the compiled path"
    if any("Cxx" in type(e).__name__ or "CppCompile" in type(e).__name__ for e in chain):
        return f"{path} failed to build on this CPU (inductor C++)"
    backend = "inductor" if any(m.startswith("torch._inductor") for m in modules) else "dynamo"
    return f"{path} failed in torch.compile ({backend})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def run_model(model_fn: Callable[..., Any], args: tuple, who: str = "model_fn") -> torch.Tensor:
    """``model_fn(*args)``'s outputs; an exception from it is one `ModelRaised` line naming ``who``."""
    try:
        value = model_fn(*args)
    except (TensorcadError, AssertionError, KeyboardInterrupt):
        raise
    except Exception as error:  # noqa: BLE001 - whatever the model raises becomes one line
        part = torch_part(error)
        if part is not None:
            raise ModelRaised(who, f"{part}: run it uncompiled or on CUDA ({_first_line(error)})") from error
        raise ModelRaised(who, f"raised {_first_line(error)}") from error
    return outputs_of(value, who)


def same_positions(alone: torch.Tensor, packed: torch.Tensor, who: str) -> None:
    """Refuse, in one line naming both shapes, outputs alone that cannot be compared with the packed ones."""
    if alone.shape != packed.shape:
        raise TensorcadError(who, f"outputs alone shaped {tuple(alone.shape)} cannot be compared position by "
                                  f"position with the packed row's {tuple(packed.shape)}")
