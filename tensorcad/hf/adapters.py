"""Adapters: any model as the ``model_fn(ids, documents, positions) -> outputs`` the harness calls.

The harness runs a model on a packed batch: token ids (B, T), the document of
each position (B, T) and, optionally, each position within its document. A
generated model takes exactly those; anything else says how to map them.

```python
from tensorcad.testing import adapt, call, hf_causal_lm           # or from tensorcad.hf: the same functions
model_fn = hf_causal_lm(model)                         # packed position_ids, called as the Trainer calls it
model_fn = hf_causal_lm(model, call="plain")           # ... as model(**batch) calls it: the config's use_cache
model_fn = hf_causal_lm(model, packing="mask")         # a 4D mask (a BlockMask under flex_attention)
model_fn = call(model, ids="input_ids", positions="position_ids", output="logits", use_cache=False)
model_fn = adapt(anything)                             # what assert_isolated does with what it is given
```

``adapt`` never guesses: a callable that takes ``(ids, documents, positions)`` is
used as it is, a Hugging Face model is adapted, and anything else is refused
with one line saying what to wrap and how. torch and transformers are imported
only when an adapted model runs.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from tensorcad.errors import TensorcadError

from .calls import DEFAULT_CALL, call_kwargs, check_call
from .hybrid.packing import REFUSAL, mixer_hint, seq_idx_refusal

PACKINGS = ("position_ids", "mask", "flash_kwargs", "seq_idx")
# transformers' own attention implementations that take cu_seq_lens/max_length keyword
# arguments and ignore them without a word. A decoder is still kept apart under them: the
# flattened row's position_ids restart at every document, and with no mask and no cache
# transformers reads the documents from them. An encoder never reads packing from
# positions, so under these it would attend across documents: refused.
IGNORE_FLASH_KWARGS = ("eager", "sdpa", "flex_attention", "paged|eager")


def unwrapped(obj: Any) -> Any:
    """The module a ``torch.compile`` wrapper compiles (``_orig_mod``), else ``obj``: what it is, not how it runs."""
    inner = getattr(obj, "_orig_mod", None)
    return inner if inner is not None and type(obj).__name__ == "OptimizedModule" else obj


def is_hf_model(obj: Any) -> bool:
    """Whether ``obj`` is a transformers ``PreTrainedModel``, compiled or not (without importing transformers)."""
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return False
    try:
        return isinstance(unwrapped(obj), transformers.PreTrainedModel)
    except Exception:  # a half-imported transformers: not one of its models
        return False


def is_encoder(model: Any) -> bool:
    """Whether a Hugging Face model attends both ways (BERT-like), read from its attention modules."""
    model = unwrapped(model)
    flags = {bool(m.is_causal) for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)}
    if flags:
        return flags == {False}
    return not bool(getattr(model.config, "is_decoder", False)) and "CausalLM" not in type(model).__name__


def _outputs(value: Any, output: str | int | None) -> Any:
    if output is None:
        for name in ("logits", "last_hidden_state"):
            if hasattr(value, name) and getattr(value, name) is not None:
                return getattr(value, name)
        return value
    if isinstance(output, int):
        return value[output]
    if isinstance(value, dict) and output in value:
        return value[output]
    if hasattr(value, output):
        return getattr(value, output)
    raise TensorcadError("output", f"the model's result ({type(value).__name__}) has no {output!r}")


def _positions(documents: Any, positions: Any) -> Any:
    if positions is not None:
        return positions
    from tensorcad.packing import positions_of

    return positions_of(documents)


class _Adapted:
    """A model_fn that remembers the model it calls (the harness reads its config and diagnoses it)."""

    def __init__(self, model: Any, fn: Callable[[Any, Any, Any], Any], description: str, call: str | None = None):
        self.model = model
        self.config = getattr(model, "config", None)
        self._fn = fn
        self.description = description
        self.call = call  # a Hugging Face model's call (hf.calls), None for a call spelled out by keyword

    def __call__(self, ids: Any, documents: Any, positions: Any = None) -> Any:
        return self._fn(ids, documents, positions)

    def __repr__(self) -> str:
        return f"<model_fn {self.description}>"


# --- Hugging Face --------------------------------------------------------------------------------


def _window(config: Any) -> int | None:
    """The sliding window every layer uses, None for none; refused when layers differ (one 4D mask serves all)."""
    window = getattr(config, "sliding_window", None)
    kinds = set(getattr(config, "layer_types", None) or [])
    if kinds and kinds != {"full_attention"} and kinds != {"sliding_attention"}:
        raise TensorcadError("packing", f"the layers attend differently ({', '.join(sorted(kinds))}) but a 4D mask "
                                        "is shared by every layer: use packing='position_ids'")
    if kinds == {"full_attention"}:
        return None
    return int(window) if window else None


def document_mask(model: Any, documents: Any) -> Any:
    """The mask ``hf_causal_lm(packing="mask")`` passes: (B, 1, T, T) additive floats, or a BlockMask under flex.

    Same document; not later (decoders; an encoder drops the tril); within the
    model's sliding window when every layer has one (a 4D mask replaces the
    window transformers would otherwise build).
    """
    import torch

    encoder, window = is_encoder(model), _window(model.config)
    documents = documents.to(model.device)

    def same_document(b, h, q, kv):
        keep = documents[b, q] == documents[b, kv]
        if not encoder:
            keep = keep & (q >= kv)
        if window is not None:
            keep = keep & ((q - kv < window) if not encoder else ((q - kv).abs() < window))
        return keep

    B, T = documents.shape
    if model.config._attn_implementation == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(same_document, B, None, T, T, device=documents.device)
    q = torch.arange(T, device=documents.device)
    keep = same_document(torch.arange(B, device=documents.device)[:, None, None], None, q[None, :, None], q[None, None, :])
    dtype = next(model.parameters()).dtype
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)[:, None]


def hf_causal_lm(model: Any, packing: str = "position_ids", *, output: str | int | None = None,
                 call: str = DEFAULT_CALL) -> _Adapted:
    """A Hugging Face model as ``model_fn(ids, documents, positions) -> logits``, packed the way ``packing`` says.

    - ``"position_ids"``: the packed position ids (restarting per document, as
      ``DataCollatorWithFlattening`` gives them), no attention mask:
      transformers reads the documents from the restarting positions only
      when neither a 2D mask nor a cache exists (so ``call="plain"`` on a
      config with ``use_cache: true`` leaks, as the user's own loop would).
      Encoders do not read packing from positions at all, so they are refused: use ``"mask"``.
    - ``"mask"``: the document mask as a 4D mask (additive floats for eager and
      sdpa, a BlockMask for flex_attention; an encoder's has no tril).
    - ``"flash_kwargs"``: ``cu_seq_lens_q/k`` and ``max_length_q/k`` as the
      collator gives them, with the restarting position ids, the batch
      flattened to one row (and the outputs shaped back to its rows). Flash
      implementations and registered varlen attention functions read them;
      eager, sdpa and flex_attention ignore them but read the documents from
      the position ids, except in an encoder, which is refused under those.
    - ``"seq_idx"``: for the hybrid families whose stateful layers read them
      (``hybrid_packing.PATHS``: Bamba, Falcon-H1, LFM2), the packed position ids
      with ``seq_idx`` and ``cu_seqlens``, the batch flattened to one row as the
      collator flattens it. Only the CUDA kernels read them; where transformers
      refuses them, the call fails with one line naming the family, its
      stateful layers and what they need.

    ``call`` is how the user's loop calls the model (`hf.calls`): ``"trainer"``
    passes ``use_cache=False`` as transformers' Trainer does, ``"plain"``
    passes nothing but the batch. ``positions`` None: derived from the
    documents. The output is ``logits`` (``last_hidden_state`` for a bare
    encoder) unless ``output`` names another.
    """
    if packing not in PACKINGS:
        raise TensorcadError("packing", f"unknown packing {packing!r} (packings: {', '.join(PACKINGS)})")
    if not is_hf_model(model):
        raise TensorcadError("model", f"expected a transformers PreTrainedModel, got {type(model).__name__}")
    implementation = model.config._attn_implementation
    if packing == "flash_kwargs" and implementation in IGNORE_FLASH_KWARGS and is_encoder(model):
        raise TensorcadError("packing", f"'flash_kwargs' on {type(unwrapped(model)).__name__}, an encoder under "
                                        f"{implementation!r}: {implementation!r} ignores cu_seq_lens and transformers "
                                        "never reads an encoder's packing from position_ids (every token would see "
                                        "the whole row); use packing='mask'")
    if packing == "position_ids" and is_encoder(model):
        raise TensorcadError("packing", f"{type(unwrapped(model)).__name__} is an encoder: transformers never reads "
                                        "packing from its position_ids (every token would see the whole row); "
                                        "use packing='mask'")
    if packing == "mask":
        _window(model.config)  # refuse a model whose layers differ now, not on the first call
    if packing == "seq_idx" and seq_idx_refusal(unwrapped(model)) is not None:
        raise TensorcadError("packing", seq_idx_refusal(unwrapped(model)))
    extra = call_kwargs(model, check_call(call))

    def model_fn(ids, documents, positions=None):
        positions = _positions(documents, positions)
        if packing == "position_ids":
            return _outputs(model(input_ids=ids, position_ids=positions, **extra), output)
        if packing == "mask":
            mask = document_mask(model, documents)
            return _outputs(model(input_ids=ids, attention_mask=mask, position_ids=positions, **extra), output)
        if packing == "seq_idx":
            return _seq_idx_call(model, ids, documents, positions, extra, output)
        from tensorcad.packing import flash_kwargs_of

        B, T = ids.shape
        kwargs = flash_kwargs_of(documents.to("cpu"))
        kwargs = {k: (v.to(ids.device) if hasattr(v, "to") else v) for k, v in kwargs.items()}
        out = _outputs(model(input_ids=ids.reshape(1, B * T), position_ids=positions.reshape(1, B * T),
                             **kwargs, **extra), output)
        return out.reshape(B, T, *out.shape[2:])

    name = type(unwrapped(model)).__name__ + (", compiled" if unwrapped(model) is not model else "")
    return _Adapted(model, model_fn, f"hf_causal_lm({name}, packing={packing!r}, call={call!r})", call)


def _seq_idx_call(model: Any, ids: Any, documents: Any, positions: Any, extra: dict, output: Any) -> Any:
    """The batch as one row, with its seq_idx and cu_seqlens: transformers' refusal worded as the family's need."""
    from tensorcad.packing import cu_seqlens_of, documents_of_cu_seqlens, seq_idx_of

    B, T = ids.shape
    cu = cu_seqlens_of(documents.to("cpu"))
    seq_idx = seq_idx_of(documents_of_cu_seqlens(cu, B * T, 1))
    kwargs = {"seq_idx": seq_idx.to(ids.device), "cu_seqlens": cu.to(ids.device)}
    try:
        out = model(input_ids=ids.reshape(1, B * T), position_ids=positions.reshape(1, B * T), **kwargs, **extra)
    except ValueError as error:
        if REFUSAL not in str(error):
            raise
        raise TensorcadError("packing", f"{type(unwrapped(model)).__name__}: {mixer_hint(unwrapped(model))}") from None
    out = _outputs(out, output)
    return out.reshape(B, T, *out.shape[2:])


# --- any model, by keyword ---------------------------------------------------------------------


def _accepts(forward: Callable, names: list[str]) -> list[str]:
    """The names ``forward`` cannot take as keywords (none when it takes **kwargs)."""
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    taken = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                      inspect.Parameter.KEYWORD_ONLY)}
    return [n for n in names if n not in taken]


def call(model: Any, *, ids: str = "input_ids", documents: str | None = None, positions: str | None = None,
         output: str | int | None = None, **fixed: Any) -> _Adapted:
    """``model_fn`` that calls ``model(**{ids: ids, documents: documents, positions: positions}, **fixed)``.

    Each of ``ids``, ``documents`` and ``positions`` names the keyword the
    model takes it as (None: not passed; positions None at call time are
    derived from the documents). ``output`` picks the outputs from what the
    model returns: an attribute, a key or an index (default: ``logits``, else
    ``last_hidden_state``, else the value itself). ``fixed`` keywords are
    passed on every call (``use_cache=False``).
    """
    names = {"ids": ids, "documents": documents, "positions": positions}
    wanted = [n for n in names.values() if n is not None] + list(fixed)
    forward = getattr(model, "forward", model)
    missing = _accepts(forward, wanted)
    if missing:
        raise TensorcadError("call", f"{type(model).__name__}.forward takes no keyword {missing[0]!r}")
    if ids is None:
        raise TensorcadError("call.ids", "the token ids must be passed under some keyword")

    def model_fn(ids_, documents_, positions_=None):
        kwargs = dict(fixed)
        kwargs[ids] = ids_
        if documents is not None:
            kwargs[documents] = documents_
        if positions is not None:
            kwargs[positions] = _positions(documents_, positions_)
        return _outputs(model(**kwargs), output)

    shown = ", ".join(f"{k}={v!r}" for k, v in names.items() if v is not None)
    return _Adapted(model, model_fn, f"call({type(model).__name__}, {shown})")


# --- what the harness does with whatever it is given ---------------------------------------------


def _takes_three(fn: Callable) -> bool:
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True  # a builtin or C callable: nothing to read, so trust it
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    required = [p for p in parameters if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               inspect.Parameter.KEYWORD_ONLY)]
    return len(positional) >= 3 and len(required) <= 3 and all(p in positional[:3] for p in required)


def adapt(obj: Any, call: str = DEFAULT_CALL) -> Callable[[Any, Any, Any], Any]:
    """What the harness calls: ``obj`` itself when it takes ``(ids, documents, positions)``, else an adapter.

    A Hugging Face model is adapted with ``hf_causal_lm``: packed position ids
    for a decoder, a 4D mask for an encoder (transformers' encoders do not read
    packing from position ids), called as ``call`` says (`hf.calls`). Anything else whose call does not take three
    positional arguments is refused with a one-line ``TypeError`` saying what
    to wrap and how.
    """
    if isinstance(obj, _Adapted):
        return obj
    if is_hf_model(obj):
        return hf_causal_lm(obj, packing="mask" if is_encoder(obj) else "position_ids", call=call)
    if not callable(obj):
        raise TypeError(f"model_fn: expected a model or a callable, got {type(obj).__name__}")
    forward = obj.forward if hasattr(obj, "forward") and callable(getattr(obj, "forward")) else obj
    if _takes_three(forward):
        return obj
    try:
        signature = f"{inspect.signature(forward)}"
    except (TypeError, ValueError):
        signature = "(...)"
    raise TypeError(
        f"model_fn: {type(obj).__name__}{signature} does not take (ids, documents, positions); wrap it: "
        "tensorcad.testing.call(model, ids='input_ids', positions='position_ids', output='logits') or "
        "def model_fn(ids, documents, positions): ..."
    )


__all__ = ("PACKINGS", "adapt", "call", "document_mask", "hf_causal_lm", "is_encoder", "is_hf_model", "unwrapped")
