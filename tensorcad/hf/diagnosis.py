"""Why a Hugging Face model leaked across packed documents: the setting to change, named.

transformers reads packed documents from restarting ``position_ids`` only when
no 2D ``attention_mask`` and no cache exist (``masking_utils._preprocess_mask_arguments``
calls ``find_packed_sequence_indices`` only then), and models create a cache
whenever ``use_cache`` is on, which ``config.use_cache`` turns on by default,
in train mode too. Its encoders (BERT's ``create_bidirectional_mask``) never
read packing from positions at all. So ``model(**collator_batch)`` in a custom
loop attends across documents without a word.

On a failed isolation the harness finds the Hugging Face models the callable
reaches (the callable itself, an adapter's model, its closure and defaults),
runs the batch once more with a forward pre-hook that records the keywords
each received, and names what to change.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..design.rope_scaling import ROW_DEPENDENT
from .adapters import is_encoder, is_hf_model, unwrapped
from .hybrid.packing import mixer_hint


# Families whose forward builds its masks without position_ids (transformers 5.24's GptOssModel hands
# create_causal_mask no position_ids): restarting positions never reach the mask, whatever the call.
MASKS_WITHOUT_POSITIONS = {"gpt_oss": ("full_attention", "sliding_attention")}


def reachable_hf_models(model_fn: Any, depth: int = 3) -> list[Any]:
    """The Hugging Face models ``model_fn`` is, holds, or closes over, through up to ``depth`` functions
    (a wrapper of a wrapper of the model: a log-softmax around the user's call)."""
    seen: list[Any] = []

    def visit(candidate: Any, left: int) -> None:
        if is_hf_model(candidate):
            if not any(candidate is s for s in seen):
                seen.append(candidate)
            return
        held = getattr(candidate, "model", None)
        if is_hf_model(held):
            visit(held, left)
        function = getattr(candidate, "__func__", candidate)
        if left and inspect.isfunction(function):
            # What the function's code names: its closure, the module-level names it reads, its defaults.
            names = inspect.getclosurevars(function)
            for value in (*names.nonlocals.values(), *names.globals.values(), *(function.__defaults__ or ())):
                visit(value, left - 1)

    visit(model_fn, depth)
    return seen


def _restarts(positions: Any) -> bool:
    """Whether position ids restart inside a row (a packed batch)."""
    import torch

    if not isinstance(positions, torch.Tensor) or positions.dim() != 2 or positions.shape[1] < 2:
        return False
    return bool((torch.diff(positions, dim=-1) != 1).any())


def _documents_as_mask(mask: Any, position_ids: Any) -> bool:
    """Whether a 2D attention_mask is document ids (0, 1, 2, ... a row), not a padding mask of 0s and 1s."""
    import torch

    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.is_floating_point() or mask.dtype == torch.bool:
        return False
    if bool((torch.diff(mask, dim=-1) < 0).any()):
        return False  # document ids only grow along a row
    if int(mask.max()) > 1:
        return True
    # 0s then 1s is left padding too; it is two documents when the positions restart where the value changes.
    # (Left padding's positions stand still over the pads; packed documents' count up inside each.)
    changes = torch.diff(mask, dim=-1) != 0
    if not (bool(changes.any()) and isinstance(position_ids, torch.Tensor) and position_ids.shape == mask.shape):
        return False
    steps = torch.diff(position_ids, dim=-1)
    return bool((position_ids[:, 1:][changes] == 0).all()) and bool((steps[~changes] == 1).all())


def diagnose(model: Any, kwargs: dict[str, Any], positions: Any = None) -> str | None:
    """The setting to change, given the keywords a Hugging Face model was called with; None if none is known."""
    import torch

    mixers = mixer_hint(unwrapped(model))  # layers that carry state: no setting of attention's is the cause
    if mixers is not None:
        return mixers
    position_ids = kwargs.get("position_ids", positions)
    if isinstance(position_ids, torch.Tensor) and position_ids.dim() == 3 and position_ids.shape[0] == 4:
        position_ids = position_ids[0]  # a vision-language row: its text positions are what packing reads
    mask = kwargs.get("attention_mask")
    packed = _restarts(position_ids)
    name = type(unwrapped(model)).__name__
    kinds = MASKS_WITHOUT_POSITIONS.get(getattr(model.config, "model_type", None))
    ones = isinstance(mask, torch.Tensor) and mask.dim() == 2 and bool((mask == 1).all())
    if kinds is not None and (mask is None or ones) and packed:  # dropping an all-ones mask would not help it
        return (f"{name} builds its attention masks without position_ids: transformers never reads packing for it, "
                "whatever the call; train it one document a row, or pass attention_mask as a dict of 4D document "
                f"masks by layer type ({', '.join(repr(k) for k in kinds)}), each within its layer's own window")
    dropped = _window_dropped(model, mask)
    if dropped is not None:
        return dropped
    if is_encoder(model):
        if mask is None or (isinstance(mask, torch.Tensor) and mask.dim() == 2):
            return (f"{name} is an encoder: transformers' bidirectional mask never reads packing from "
                    "position_ids; pass a 4D document mask (tensorcad.testing.hf_causal_lm(model, packing='mask'))")
        return None
    if _documents_as_mask(mask, position_ids):
        return ("the attention_mask holds document ids, but transformers reads a 2D attention_mask as padding "
                "(1 keep, 0 drop), never as documents: pass the documents as restarting position_ids and no "
                "attention_mask (tensorcad.testing.hf_causal_lm(model)), or a 4D document mask")
    if mask is None and position_ids is None:
        return ("pass position_ids: without them transformers counts positions straight through the row and "
                "cannot see where documents begin (the collator's position_ids, or "
                "tensorcad.packing.positions_of(documents)), with use_cache=False")
    if ones and packed:
        return ("drop the all-ones attention_mask: transformers detects packed documents from restarting "
                "position_ids only when attention_mask is None")
    if packed and mask is None:
        use_cache = kwargs.get("use_cache")
        if use_cache is None:
            use_cache = bool(getattr(model.config, "use_cache", False))
        if use_cache or kwargs.get("past_key_values") is not None:
            return ("pass use_cache=False (or set model.config.use_cache = False): with a cache, transformers "
                    "ignores the restarting position_ids and attends across documents")
    if mask is None and position_ids is not None and not packed:
        return ("the position_ids never restart: pass each token's position in its document "
                "(tensorcad.packing.positions_of(documents), the collator's position_ids)")
    return rope_cause(model, position_ids, kwargs.get("input_ids"))


def _window_dropped(model: Any, mask: Any) -> str | None:
    """A 4D mask handed to a model whose layers keep a window or a chunk: transformers uses it as given, for every
    layer, so unless it keeps that window itself (the test: no kept key further back than it) the window is lost."""
    import torch

    if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        return None
    config = model.config
    types = set(getattr(config, "layer_types", None) or [])
    window = getattr(config, "sliding_window", None) if (not types or "sliding_attention" in types) else None
    window = window or getattr(config, "attention_chunk_size", None)
    if not window:
        return None
    keep = mask > -1e4 if mask.is_floating_point() else mask.bool()  # an additive mask keeps its zeros
    T = keep.shape[-1]
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    if not bool((keep & (distance >= int(window)).to(keep.device)).any()):
        return None
    what = "attention_chunk_size" if getattr(config, "attention_chunk_size", None) == window else "sliding_window"
    return (f"the 4D attention_mask replaces the masks transformers builds, for every layer: it keeps keys past the "
            f"{what} of {window}, so the window is lost; pass restarting position_ids and no attention_mask "
            "(tensorcad.testing.hf_causal_lm(model))")


def rope_cause(model: Any, position_ids: Any, ids: Any = None) -> str | None:
    """A rope scaling that makes each document depend on the longest one of its batch, when it did here."""
    import torch

    parameters = getattr(model.config, "rope_parameters", None) or {}
    rope_type = parameters.get("rope_type") if isinstance(parameters, dict) else None
    if rope_type not in ROW_DEPENDENT:  # recomputed from the largest position in the whole batch
        return None
    original = (parameters.get("original_max_position_embeddings") if rope_type == "longrope"
                else getattr(model.config, "max_position_embeddings", None))
    if isinstance(position_ids, torch.Tensor) and position_ids.numel():
        longest = int(position_ids.max()) + 1
    elif isinstance(ids, torch.Tensor) and ids.dim() == 2:
        longest = ids.shape[1]
    else:
        return None
    if original is None or longest <= original:
        return None
    return (f"{rope_type!r} rope scaling recomputes the rotary frequencies from the largest position in the batch "
            f"({longest} > {original}): each document's outputs depend on the longest document beside it; "
            f"give documents longer than {original} tokens rows of their own")


def diagnose_failure(model_fn: Callable[..., Any], ids: Any, documents: Any, positions: Any) -> list[str]:
    """One line per Hugging Face model ``model_fn`` reaches whose call explains a leak, from one more run."""
    import torch

    models = reachable_hf_models(model_fn)
    if not models:
        return []
    calls: dict[int, dict[str, Any]] = {}

    def record(module, args, kwargs):
        # Positional arguments are named by the forward's own signature (model(ids, mask) is a call too).
        try:
            named = inspect.signature(unwrapped(module).forward).bind_partial(*args, **kwargs).arguments
        except TypeError:
            named = dict(kwargs)
        calls.setdefault(id(module), dict(named))

    handles = [m.register_forward_pre_hook(record, with_kwargs=True) for m in models]
    try:
        with torch.no_grad():
            model_fn(ids, documents, positions)
    except Exception:  # the diagnosis must never hide the verdict
        return []
    finally:
        for handle in handles:
            handle.remove()
    hints = [cause_of_call(model, calls[id(model)]) for model in models if id(model) in calls]
    return [hint for hint in hints if hint]


def cause_of_call(model: Any, kwargs: dict[str, Any]) -> str | None:
    """`diagnose`'s line for one call of ``model``, beginning with the model's class name."""
    hint = diagnose(model, kwargs)
    if not hint:
        return None
    name = type(unwrapped(model)).__name__
    return hint if hint.startswith(name) else f"{name}: {hint}"
