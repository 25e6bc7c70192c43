"""rl[alignment]: every per-sample tensor comes back on its own sequence through the user's pack -> reorder -> unpack.

A rollout batch holds one row a sample: ``input_ids`` (S, L) with its
``attention_mask`` (or any loss mask `batch` reads), and tensors beside it,
one value a sample (S,) (advantages, rewards, scores) or one a token (S, L)
(old, reference and rollout log-probs, masks). The user's
``pipeline(batch) -> batch or [batch, ...]`` is what their loop does with it
before the loss: pack it into rows, reorder (a length sort, dynamic batch
sizing, bins), cut micro-batches, and unpack.

The certificate hands it a batch of canaries: each token id names its
sequence and position (``i * L + t + 1``, so the pipeline may move tokens but
cannot make one up), and each tensor's value names the tensor, the sequence
and, for one a token, the position. In whatever the pipeline returns (packed
rows (R, T) with the tensors beside the tokens, or rows of samples), every
token must carry its own sequence's value of every tensor, and every token of
every sequence must come back once. A failure says which tensor of which
sequence landed on which other (verl #2185's rewards, SkyRL's outputs in packed
order, prime-rl's reference log-probs in mixed bins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from tensorcad.errors import TensorcadError

from .batch import MASK_KEYS

KEY_STRIDE = 1 << 20  # each tensor's canaries in a range of their own; exact in float32 below 2**24
SHOWN = 3


@dataclass(frozen=True)
class Misplaced:
    key: str
    owner: int  # the sequence the token belongs to
    position: int  # within it
    found: int  # the sequence whose value it carries (-1: a value of no sequence)
    found_position: int  # for one value a token: the position it names
    where: str  # "row 0, column 5 of part 0"

    def message(self) -> str:
        if self.found < 0:
            return f"`{self.key}` at token {self.position} of sequence {self.owner} ({self.where}) holds no canary"
        if self.found == self.owner:
            return (f"`{self.key}` at token {self.position} of sequence {self.owner} ({self.where}) is its value at "
                    f"token {self.found_position}: shifted by {self.found_position - self.position}")
        return (f"`{self.key}` of sequence {self.found} landed on sequence {self.owner} (its token "
                f"{self.position}, {self.where})")


@dataclass(frozen=True)
class AlignmentResult:
    sequences: int
    keys: tuple[str, ...]
    misplaced: tuple[Misplaced, ...]
    missing: tuple[int, ...]  # sequences whose tokens did not all come back
    repeated: tuple[int, ...]  # ... came back more than once
    parts: int

    @property
    def passed(self) -> bool:
        return not self.misplaced and not self.missing and not self.repeated

    def message(self) -> str:
        keys = ", ".join(f"`{k}`" for k in self.keys)
        if self.passed:
            return (f"every token of the {self.sequences} sequences came back once over {self.parts} part(s), each "
                    f"with its own sequence's {keys}")
        told = []
        first_by_key: dict[str, Misplaced] = {}
        for m in self.misplaced:
            first_by_key.setdefault(m.key, m)
        for m in list(first_by_key.values())[:SHOWN]:
            count = sum(1 for x in self.misplaced if x.key == m.key)
            told.append(m.message() + (f" ({count} tokens misplaced)" if count > 1 else ""))
        if self.missing:
            told.append(f"sequence(s) {', '.join(map(str, self.missing[:8]))} did not come back whole")
        if self.repeated:
            told.append(f"sequence(s) {', '.join(map(str, self.repeated[:8]))} came back more than once")
        return "the per-sample tensors did not come back on their own sequences: " + "; ".join(told)

    def to_json(self) -> dict:
        return {"passed": self.passed, "sequences": self.sequences, "keys": list(self.keys), "parts": self.parts,
                "misplaced": [m.__dict__ for m in self.misplaced[:100]], "missing": list(self.missing),
                "repeated": list(self.repeated), "message": self.message()}


def canaries(batch: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[dict, torch.Tensor]:
    """The batch with canaries in place of ``input_ids`` and each of ``keys``; and the (S, L) mask of real tokens."""
    if "input_ids" not in batch:
        raise TensorcadError("batch.input_ids", "the batch holds no input_ids")
    ids = torch.as_tensor(batch["input_ids"])
    if ids.dim() != 2:
        raise TensorcadError("batch.input_ids", f"expected one row a sample (S, L), got {tuple(ids.shape)}")
    S, L = ids.shape
    if S * L + 1 >= KEY_STRIDE or len(keys) > 14:
        raise TensorcadError("batch", f"{S} x {L} tokens and {len(keys)} tensors are past what canaries can name "
                                      f"(S x L < {KEY_STRIDE}, at most 14 tensors)")
    mask_key = next((k for k in MASK_KEYS if k in batch), None)
    real = torch.as_tensor(batch[mask_key]).bool() if mask_key else torch.ones(S, L, dtype=torch.bool)
    if real.shape != ids.shape:
        raise TensorcadError(f"batch.{mask_key}", f"shape {tuple(real.shape)} differs from input_ids {(S, L)}")
    named = torch.arange(1, S * L + 1).reshape(S, L)
    out = dict(batch)
    out["input_ids"] = torch.where(real, named, torch.zeros_like(named)).to(ids.dtype)
    for n, key in enumerate(keys, start=1):
        if key not in batch:
            raise TensorcadError(f"batch.{key}", "not in the batch")
        value = torch.as_tensor(batch[key])
        if tuple(value.shape) == (S,):
            made = n * KEY_STRIDE + torch.arange(S)
        elif tuple(value.shape) == (S, L):
            made = n * KEY_STRIDE + named
        else:
            raise TensorcadError(f"batch.{key}", f"expected one value a sample ({S},) or a token ({S}, {L}), got "
                                                 f"{tuple(value.shape)}")
        out[key] = made.to(value.dtype if value.dtype.is_floating_point else torch.float64)
    return out, real


def _read(value: Any, key: str, n: int, S: int, L: int, owner: torch.Tensor, position: torch.Tensor,
          per_token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the sequence, the position) each token's value of ``key`` names (-1 where none)."""
    v = torch.as_tensor(value).detach().double().cpu()
    if v.dim() == 1 and v.shape[0] == owner.shape[0]:
        v = v[:, None].expand(owner.shape)  # one value a row: the row's tokens carry it
    if tuple(v.shape) != tuple(owner.shape):
        raise TensorcadError(f"pipeline.{key}", f"shape {tuple(v.shape)} matches neither the tokens "
                                                f"{tuple(owner.shape)} nor one value a row")
    code = v - n * KEY_STRIDE
    whole = (code == code.round()) & (code >= 0)
    code = code.round().long()
    if per_token:
        ok = whole & (code >= 1) & (code <= S * L)
        return torch.where(ok, (code - 1) // L, -1), torch.where(ok, (code - 1) % L, -1)
    ok = whole & (code < S)
    return torch.where(ok, code, -1), torch.where(ok, position, -1)


def check_alignment(pipeline: Callable[[dict], Any], batch: Mapping[str, Any], keys: tuple[str, ...] | list[str]
                    ) -> AlignmentResult:
    """``pipeline`` on a batch of canaries: every token back once, carrying its own sequence's ``keys``."""
    if not callable(pipeline):
        raise TensorcadError("pipeline", f"expected a callable (batch) -> batch or [batch, ...], got "
                                         f"{type(pipeline).__name__}")
    keys = tuple(keys)
    if not keys:
        raise TensorcadError("keys", "name at least one per-sample tensor to follow (advantages, rewards, ...)")
    made, real = canaries(batch, keys)
    S, L = real.shape
    per_token = {k: tuple(torch.as_tensor(made[k]).shape) == (S, L) for k in keys}
    out = pipeline(made)
    parts = [out] if isinstance(out, Mapping) else list(out) if isinstance(out, (list, tuple)) else None
    if not parts or not all(isinstance(p, Mapping) for p in parts):
        raise TensorcadError("pipeline", f"expected a batch dict or a list of them back, got {type(out).__name__}")
    seen = torch.zeros(S, L, dtype=torch.long)
    misplaced = []
    for p, part in enumerate(parts):
        if "input_ids" not in part:
            raise TensorcadError(f"pipeline[{p}].input_ids", "the returned batch holds no input_ids")
        ids = torch.as_tensor(part["input_ids"]).long().cpu()
        ids = ids[None] if ids.dim() == 1 else ids
        if bool(((ids < 0) | (ids > S * L)).any()):
            raise TensorcadError(f"pipeline[{p}].input_ids", "holds a token id that is no canary: the pipeline "
                                                             "made up tokens")
        token = ids > 0
        owner, position = (ids - 1) // L, (ids - 1) % L
        seen.view(-1).index_add_(0, (ids[token] - 1), torch.ones_like(ids[token]))
        for n, key in enumerate(keys, start=1):
            if key not in part:
                continue
            found, at = _read(part[key], key, n, S, L, owner, position, per_token[key])
            wrong = token & ((found != owner) | (at != position))
            for r, c in wrong.nonzero().tolist():
                misplaced.append(Misplaced(key, int(owner[r, c]), int(position[r, c]), int(found[r, c]),
                                           int(at[r, c]), f"row {r}, column {c}" + (f" of part {p}" if len(parts) > 1
                                                                                    else "")))
    missing = tuple(i for i in range(S) if bool((seen[i][real[i]] == 0).any()))
    repeated = tuple(i for i in range(S) if bool((seen[i][real[i]] > 1).any()))
    return AlignmentResult(S, keys, tuple(misplaced), missing, repeated, len(parts))
