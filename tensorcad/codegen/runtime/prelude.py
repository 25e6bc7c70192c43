"""The fixed part of every generated module: imports and the attention and rotary runtime.

These are source text, not code this package runs: `tensorcad.generate` pastes them
into the module it writes (`IMPORTS` first, the runtimes before the design's mask
factories and modules). The block mask built from ranges is text of its own
(`block_ranges`), pasted into the attention runtime after `_block_mask`, and so is
each context-parallel rank's block mask (`cp_block_mask`).
Nothing here imports torch; the engine must stay free of it.

The contract with the generator (names the generated code calls):

- `attend(q, k, v, *, mask_mod=None, score_mod=None, form="flex", scale=None)`, and
  `recording_attend()`, the context manager recording its calls
- `_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device)`, `RUNTIME_PATHS`, `COMPILE`
- a mask whose blocks the ranges decide exactly carries `ranges`
  (`design.block_ranges`): its block mask is built from them, never point by point
- `cp_block_mask(mask_mod, layout, rank, world_size, B, H)`, `cp_mask_mod(...)`: a
  context-parallel rank's queries against the gathered keys (the same ranges)
- `rotary_tables(head_dim, max_len, theta)`, `rotate(x, cos, sin, positions=None)`
- a mask factory marks the `mask_mod` it returns with `reads` (the tensors it indexes)
  and, optionally, `uses_batch` / `uses_head` (see the legend in ATTENTION_RUNTIME).
"""

from __future__ import annotations

from .block_ranges import BLOCK_MASK_FROM_RANGES
from .cp_block_mask import CP_BLOCK_MASK

IMPORTS = '''\
import contextlib
import math
import sys
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import (
    BlockMask,
    create_block_mask,
    flex_attention,
)
'''

ATTENTION_RUNTIME = '''

# ---------------------------------------------------------------------------
# Attention runtime
#
# Shape letters:
#   B     batch rows                  T  query positions
#   H     query heads                 S  key positions
#   H_kv  key/value heads             D  head dim
#
# A mask_mod(b, h, q_idx, kv_idx) -> bool keeps a score; a
# score_mod(score, b, h, q_idx, kv_idx) -> score rewrites one. These are
# FlexAttention's signatures. The eager form calls the same functions with
# broadcast index tensors, so one definition serves both forms.
#
# Attributes a mask_mod may carry, set by the factory that made it:
#   reads       the tensors the mask indexes (a row's documents). The block mask is
#               shared while they are the same tensors at the same version, and the
#               mask is built for every row (B) since its rows differ.
#               Absent or () for a mask of positions only.
#   uses_batch  False when the mask never reads b: one block mask serves all rows.
#   uses_head   False when the mask never reads h: one block mask serves all heads.
#               Absent means True, which is always correct, only larger.
#   ranges      {"documents": (B, T) ids or None, "behind": n, "ahead": n}: the mask
#               keeps -ahead <= q - kv <= behind (None: unbounded; a tuple: one a
#               head) within one document. Its blocks are then decided from each
#               block's first and last position and document, exactly as
#               create_block_mask decides them, without evaluating the mask at
#               every score (_block_mask_from_ranges). Absent: create_block_mask.
# A score_mod that reads a table (T5's bias) carries `reads` too; it decides
# whether training needs gradients through the attention.
# ---------------------------------------------------------------------------

# Which pieces torch.compile is tried on. Set one False to keep it uncompiled
# (tests, debugging); a piece whose compile fails is never tried again.
COMPILE = {"flex_attention": True, "create_block_mask": True}

# The path each piece last ran: block_mask "from_ranges" | "create_block_mask";
# create_block_mask "compiled" | "eager"; flex_attention "compiled" | "uncompiled";
# attend "flex" | "eager" | "eager-training-fallback".
RUNTIME_PATHS = {}

# name -> compiled callable, or None once compiling failed here
_COMPILED = {}
# messages already warned in this process
_WARNED = set()
# mask name -> (fingerprint, BlockMask, tensors read, their states): one entry per mask
_BLOCK_MASKS = {}


def _warn_once(message):
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def _run_compiled(name, fn, fallback_path, *args, **kwargs):
    """fn(*args, **kwargs), through torch.compile where it works on this machine."""
    if COMPILE.get(name, False) and _COMPILED.get(name, fn) is not None:
        try:
            if name not in _COMPILED:
                # The first call compiles, silently, for seconds (about 15 on a CPU): say so.
                sys.stderr.write(
                    f"{__name__}: compiling {name} (first call only; about 15 s on a CPU)\\n"
                )
                _COMPILED[name] = torch.compile(fn)
            out = _COMPILED[name](*args, **kwargs)
            RUNTIME_PATHS[name] = "compiled"
            return out
        except Exception:
            # No compiler, an unsupported platform or a backend bug: the uncompiled
            # function computes the same thing, only slower.
            _COMPILED[name] = None
    RUNTIME_PATHS[name] = fallback_path
    return fn(*args, **kwargs)


def _block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device):
    """The BlockMask for mask_mod, built for the first layer that asks.

    Later layers handed a mask of the same name over the same tensors (the same
    objects, at the same _version) share it. Another batch's tensors replace the
    entry, so the cache holds one block mask per mask, never one per step.
    """
    reads = tuple(getattr(mask_mod, "reads", ()))
    # A mask that reads a row's tensor needs the real B: with B=None,
    # create_block_mask evaluates row 0 only (attention-gym#98).
    rows = B if reads or getattr(mask_mod, "uses_batch", True) else None
    heads = H if getattr(mask_mod, "uses_head", True) else None
    device = torch.device(device)
    # Numbers a mask closes over (a window, say) are part of what it keeps: two
    # masks of one name that differ only there must not share a block mask.
    captured = tuple(
        cell.cell_contents
        for cell in mask_mod.__closure__ or ()
        if not isinstance(cell.cell_contents, torch.Tensor)
    )
    fingerprint = (mask_mod.__code__, captured, rows, heads, Q_LEN, KV_LEN, device)
    states = tuple(_state_of(t) for t in reads)
    entry = _BLOCK_MASKS.get(mask_mod.__name__)
    # The entry holds the tensors themselves, so `is` cannot match a new tensor
    # that happens to reuse a freed one's memory.
    if (
        entry is not None
        and entry[0] == fingerprint
        and len(entry[2]) == len(reads)
        and all(held is t for held, t in zip(entry[2], reads))
        and all(_same_state(a, b) for a, b in zip(entry[3], states))
    ):
        return entry[1]
    ranges = getattr(mask_mod, "ranges", None)
    if ranges is not None and _ranges_fit(ranges, rows, Q_LEN, KV_LEN):
        RUNTIME_PATHS["block_mask"] = "from_ranges"
        block_mask = _block_mask_from_ranges(
            mask_mod, ranges, rows, heads, Q_LEN, KV_LEN, device
        )
    else:
        RUNTIME_PATHS["block_mask"] = "create_block_mask"
        block_mask = _run_compiled(
            "create_block_mask",
            create_block_mask,
            "eager",
            mask_mod,
            rows,
            heads,
            Q_LEN,
            KV_LEN,
            device=device,
        )
    _BLOCK_MASKS[mask_mod.__name__] = (fingerprint, block_mask, reads, states)
    return block_mask


''' + BLOCK_MASK_FROM_RANGES + CP_BLOCK_MASK + '''def _state_of(t):
    """What changes when t is edited in place: its version counter, or (for a
    tensor made under torch.inference_mode, which keeps none) a copy of it."""
    try:
        return t._version
    except RuntimeError:
        return t.clone()


def _same_state(a, b):
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return torch.equal(a, b)


def _needs_backward(q, k, v, score_mod):
    # flex_attention refuses q, k or v that require grad on CPU even under no_grad;
    # a learned table a score_mod reads needs a backward only while grad is on.
    tables = tuple(getattr(score_mod, "reads", ()))
    return any(t.requires_grad for t in (q, k, v)) or (
        torch.is_grad_enabled() and any(t.requires_grad for t in tables)
    )


# Open recordings of attend calls (see recording_attend): (calls, around) pairs.
_RECORDINGS = []


@contextlib.contextmanager
def recording_attend(around=None):
    """Record every attend call made inside the block; yields the list of calls.

    Each call is a dict of attend's keywords (mask_mod, score_mod, form, scale)
    with the shapes of q and k. `around(run, q, k, v, **kwargs)`, when given,
    runs in place of each attention and calls `run` for it (a tracer counts one
    call's FLOPs so). tensorcad's runtime reads the masks a model runs this way.
    """
    recording = ([], around)
    _RECORDINGS.append(recording)
    try:
        yield recording[0]
    finally:
        _RECORDINGS[:] = [r for r in _RECORDINGS if r is not recording]


def _around(around, run):
    def wrapped(q, k, v, **kwargs):
        return around(run, q, k, v, **kwargs)

    return wrapped


def attend(q, k, v, *, mask_mod=None, score_mod=None, form="flex", scale=None):
    """Attention of q over k, v: (B, H, T, D), (B, H_kv, S, D) -> (B, H, T, D).

    H is a multiple of H_kv (grouped-query attention). form "flex" runs
    FlexAttention; "eager" the same arithmetic in plain matmuls, which any
    device can differentiate and FlopCounterMode can count.
    """
    kwargs = {
        "mask_mod": mask_mod,
        "score_mod": score_mod,
        "form": form,
        "scale": scale,
    }
    run = _attend
    for calls, around in _RECORDINGS:
        calls.append({**kwargs, "q": tuple(q.shape), "k": tuple(k.shape)})
        if around is not None:
            run = _around(around, run)
    return run(q, k, v, **kwargs)


def _attend(q, k, v, *, mask_mod=None, score_mod=None, form="flex", scale=None):
    if form not in ("flex", "eager"):
        raise ValueError(f"form must be 'flex' or 'eager', not {form!r}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(
            f"{q.shape[1]} query heads do not share {k.shape[1]} key/value heads evenly"
        )
    if (
        form == "flex"
        and q.device.type == "cpu"
        and _needs_backward(q, k, v, score_mod)
    ):
        _warn_once(
            "flex_attention has no backward on CPU; using the eager form for training"
        )
        RUNTIME_PATHS["attend"] = "eager-training-fallback"
        return _attend_eager(q, k, v, mask_mod, score_mod, scale)
    RUNTIME_PATHS["attend"] = form
    if form == "flex":
        return _attend_flex(q, k, v, mask_mod, score_mod, scale)
    return _attend_eager(q, k, v, mask_mod, score_mod, scale)


def _attend_flex(q, k, v, mask_mod, score_mod, scale):
    B, H, T, D = q.shape
    S = k.shape[-2]
    block_mask = (
        None if mask_mod is None else _block_mask(mask_mod, B, H, T, S, q.device)
    )
    return _run_compiled(
        "flex_attention",
        flex_attention,
        "uncompiled",
        q,
        k,
        v,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=scale,
        enable_gqa=k.shape[1] != H,
    )


def _attend_eager(q, k, v, mask_mod, score_mod, scale):
    B, H, T, D = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    if H_kv != H:
        # query head h reads key/value head h // (H // H_kv), as enable_gqa does
        k = k.repeat_interleave(H // H_kv, dim=1)  # (B, H, S, D)
        v = v.repeat_interleave(H // H_kv, dim=1)  # (B, H, S, D)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    # index tensors shaped to broadcast, so a mask_mod or score_mod written for
    # FlexAttention's scalars evaluates every score at once
    b = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    h = torch.arange(H, device=q.device).view(1, H, 1, 1)
    q_idx = torch.arange(T, device=q.device).view(1, 1, T, 1)
    kv_idx = torch.arange(S, device=q.device).view(1, 1, 1, S)
    if score_mod is not None:
        scores = score_mod(scores, b, h, q_idx, kv_idx)  # (B, H, T, S)
    if mask_mod is None:
        probs = F.softmax(scores.float(), dim=-1).to(q.dtype)  # (B, H, T, S)
        return probs @ v  # (B, H, T, D)
    keep = mask_mod(b, h, q_idx, kv_idx)  # broadcasts to (B, H, T, S)
    keeps_any = keep.any(dim=-1, keepdim=True)  # (B, H, T, 1)
    # A row that keeps no key gets 0, as FlexAttention gives it: its scores are
    # made finite so softmax (and its gradient) has no NaN, then zeroed.
    scores = scores.masked_fill(~keep, float("-inf")).masked_fill(~keeps_any, 0.0)
    probs = (
        F.softmax(scores.float(), dim=-1).masked_fill(~keep, 0.0).to(q.dtype)
    )  # (B, H, T, S)
    return probs @ v  # (B, H, T, D)
'''

ROTARY_RUNTIME = '''

# ---------------------------------------------------------------------------
# Rotary position embedding (Llama's rotate-half layout, as Hugging Face's
# LlamaRotaryEmbedding and apply_rotary_pos_emb compute it)
# ---------------------------------------------------------------------------


def rotary_tables(head_dim, max_len, theta=10000.0, device=None):
    """cos, sin of every position's angles: (max_len, D) each."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    )  # (D/2,)
    angles = torch.outer(
        torch.arange(max_len, dtype=torch.float32, device=device), inv_freq
    )
    angles = torch.cat((angles, angles), dim=-1)  # (max_len, D)
    return angles.cos(), angles.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary_at(cos, sin, positions):
    """The tables' rows at each token's position: (B, T) -> (B, 1, T, D) each."""
    return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)


def rotate(x, cos, sin, positions=None):
    """x (B, H, T, D) turned by each token's position.

    positions (B, T) index the tables, so they may restart per packed document;
    None turns token t by position t.
    """
    if positions is None:
        T = x.shape[-2]
        cos, sin = cos[:T], sin[:T]  # (T, D), broadcast over B, H
    else:
        cos, sin = rotary_at(cos, sin, positions)  # (B, 1, T, D)
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)
'''

PRELUDE = IMPORTS + ATTENTION_RUNTIME + ROTARY_RUNTIME
