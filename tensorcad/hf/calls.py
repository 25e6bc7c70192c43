"""How the user's loop calls a Hugging Face model: the one ``call`` every certificate runs and names.

A certificate certifies the call the user makes (DESIGN.md, "the user's own
call"). For a transformers model two calls differ in what they pass besides
the batch, and transformers reads packing from ``position_ids`` only when
there is no cache, so the two can differ in their verdict:

- ``"trainer"``: what transformers' ``Trainer`` (and TRL's trainers, which are
  Trainers) passes: the batch as the collator gives it, the cache off
  (``Trainer`` writes ``TrainingArguments.use_cache``, False by default, into
  ``model.config.use_cache`` before it trains), and ``num_items_in_batch``
  when it accumulates. The default.
- ``"plain"``: ``model(**batch)``, nothing added: every setting as the
  model's config says (``use_cache: true`` is what ``save_pretrained``
  writes), as a hand-written loop calls it.

A model that takes no ``use_cache`` is called the same either way. Nothing here
imports torch or transformers.
"""

from __future__ import annotations

import inspect
from typing import Any

from tensorcad.errors import TensorcadError

CALLS = ("trainer", "plain")
DEFAULT_CALL = "trainer"
WHAT = {"trainer": "as transformers' Trainer calls it: use_cache=False",
        "plain": "model(**batch): the config's own settings"}


def check_call(call: Any, path: str = "call") -> str:
    """``call`` if it names one of `CALLS`; else a ``TensorcadError`` at ``path``."""
    if call not in CALLS:
        raise TensorcadError(path, f"unknown call {call!r} (calls: {', '.join(CALLS)}: {WHAT['trainer']}; "
                                   f"{WHAT['plain']})")
    return call


def _forward(model: Any) -> Any:
    inner = getattr(model, "_orig_mod", None)  # a torch.compile wrapper takes (*args, **kwargs): read its module
    return (inner if inner is not None else model).forward


def takes_cache(model: Any) -> bool:
    """Whether the model's forward takes ``use_cache``."""
    try:
        return "use_cache" in inspect.signature(_forward(model)).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def call_kwargs(model: Any, call: str) -> dict[str, Any]:
    """The keyword arguments ``call`` adds to the batch when it calls ``model``."""
    check_call(call)
    return {"use_cache": False} if call == "trainer" and takes_cache(model) else {}


def cache_of(model: Any, call: str) -> bool | None:
    """Whether the model's forward builds a cache under ``call`` (None: it takes no ``use_cache``)."""
    if not takes_cache(model):
        return None
    if call_kwargs(model, call):
        return False
    return bool(getattr(getattr(model, "config", None), "use_cache", False))


def call_line(model: Any, call: str) -> str:
    """What the report says of the call: its name, and what the model ran with."""
    check_call(call)
    cache = cache_of(model, call)
    if cache is None:
        return f"{call} ({WHAT[call]}; the model takes no use_cache)"
    said = "use_cache=False passed" if call == "trainer" else f"use_cache={cache} as the config says"
    return f"{call} ({WHAT[call].split(':')[0]}: {said})"
