"""Document isolation: changing one packed document's tokens moves nothing outside it.

Works for any callable ``model_fn(ids, documents, positions) -> outputs`` shaped
(B, T, ...): a generated model in either form, or a model someone wrote by hand.
For each document of each row (or a seeded sample of them), the document's tokens
are replaced by different ones and the whole batch is run again. Every output
outside that document, in its own row and in every other row, must be *bitwise*
equal to the unperturbed run: a masked score contributes an exact zero, so
"close" would only hide a leak that happens to be small.

A model whose outputs ignore the tokens would pass that trivially, so the check
also measures how far each perturbed document's *own* outputs moved
(``own_change``) and fails when any perturbation moved nothing at all.

Bitwise equality still has a floor: a leak smaller than half the spacing of the
outputs' dtype at their magnitude rounds away and moves no bit. The result states
that floor (``resolution``: half a ulp at the largest output) so a pass says what it
could not see rather than passing silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from tensorcad.errors import TensorcadError

from .calls import run_model


@dataclass(frozen=True)
class Leak:
    """Outputs of ``moved_document`` (row ``moved_row``) moved when ``document`` of ``row`` changed."""

    row: int
    document: int
    moved_row: int
    moved_document: int
    largest: float  # largest absolute change of an output outside the perturbed document
    first_position: int  # first position (in moved_row) whose output moved

    def message(self) -> str:
        where = "the same row" if self.moved_row == self.row else f"row {self.moved_row}"
        return (f"changing document {self.document} of row {self.row} moved document "
                f"{self.moved_document} of {where} by up to {self.largest:.3g}, first at "
                f"token {self.first_position} of the row")

    def to_json(self) -> dict:
        return {"row": self.row, "document": self.document, "movedRow": self.moved_row,
                "movedDocument": self.moved_document, "largest": self.largest,
                "firstPosition": self.first_position}


@dataclass(frozen=True)
class IsolationResult:
    leaks: tuple[Leak, ...]
    perturbed: int  # documents whose tokens were changed (one forward pass each)
    documents: int  # documents in the batch (perturbed is fewer when sampled)
    own_change: float  # smallest, over perturbed documents, of the largest change in their own outputs
    still: tuple[tuple[int, int], ...]  # (row, document) perturbations that moved nothing of their own
    compared: int  # outputs (positions) held to bitwise equality, over all passes
    resolution: float = 0.0  # half the dtype's spacing at the largest |output|: smaller leaks can round away
    dtype: str = ""  # the outputs' dtype, which sets the resolution
    scale: float = 0.0  # the largest |output| of the unperturbed run
    forwards: int = 0  # model runs made, the unperturbed one included
    method: str = "one document a forward"  # how the perturbations were grouped (`group_testing`)

    @property
    def passed(self) -> bool:
        return not self.leaks and not self.still and self.perturbed > 0

    def worst(self) -> Leak | None:
        return max(self.leaks, key=lambda leak: leak.largest, default=None)

    def message(self) -> str:
        if self.perturbed == 0:
            return "no document was perturbed"
        if self.leaks:
            worst = self.worst()
            more = len(self.leaks) - 1
            return worst.message() + (f" ({more} more leak{'s' if more != 1 else ''})" if more else "")
        if self.still:
            row, document = self.still[0]
            return (f"changing document {document} of row {row} moved none of its own outputs: "
                    "the model ignores its tokens, so isolation would pass vacuously")
        unseen = (f"; a leak under {self.resolution:.3g} (half a {self.dtype} ulp at outputs up to "
                  f"{self.scale:.3g}) can round away and cannot be seen at this dtype and scale"
                  if self.resolution > 0 else "")
        return (f"isolated: {self.perturbed} documents changed, every other output bitwise equal "
                f"(own outputs moved by at least {self.own_change:.3g}){unseen}")

    def to_json(self) -> dict:
        worst = self.worst()
        return {"passed": self.passed, "perturbed": self.perturbed, "documents": self.documents,
                "ownChange": self.own_change, "compared": self.compared, "leaks": len(self.leaks),
                "resolution": self.resolution, "dtype": self.dtype, "scale": self.scale,
                "forwards": self.forwards, "method": self.method,
                "worst": worst.to_json() if worst else None, "message": self.message()}


def _check_inputs(ids: torch.Tensor, documents: torch.Tensor, positions, vocab: int) -> None:
    for name, t in (("ids", ids), ("documents", documents), ("positions", positions)):
        if t is None and name == "positions":
            continue
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise TensorcadError(name, f"expected a (B, T) tensor, got {getattr(t, 'shape', type(t).__name__)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise TensorcadError(name, f"expected integers, got {t.dtype}")
        if t.shape != ids.shape:
            raise TensorcadError(name, f"shape {tuple(t.shape)} differs from ids {tuple(ids.shape)}")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise TensorcadError("vocab", f"expected an integer of at least 2, got {vocab!r}")
    if bool((documents[:, 1:] < documents[:, :-1]).any()):
        raise TensorcadError("documents", "document ids must never fall along a row")


def segments(documents: torch.Tensor) -> list[tuple[int, int, int, int]]:
    """(row, document, first, end) of every document piece, in row order."""
    docs = documents.cpu().numpy()
    out = []
    for r, row in enumerate(docs):
        if not len(row):  # a row of no tokens holds no document (it would index past its end)
            continue
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        ends = np.r_[starts[1:], len(row)]
        out.extend((r, int(row[s]), int(s), int(e)) for s, e in zip(starts, ends))
    return out


def pick(count: int, sample: int | None, seed: int) -> list[int]:
    """Indices of the pieces a check runs: all, or ``sample`` of them, seeded."""
    if sample is None or sample >= count:
        return list(range(count))
    if sample < 1:
        raise TensorcadError("sample", f"expected at least 1 document, got {sample}")
    return sorted(np.random.default_rng(seed).choice(count, size=sample, replace=False).tolist())


def check_isolation(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    vocab: int,
    sample: int | None = None,
    seed: int = 0,
) -> IsolationResult:
    """Perturb each document in turn and require every output outside it to stay bitwise equal."""
    _check_inputs(ids, documents, positions, vocab)
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    generator = torch.Generator().manual_seed(seed)
    # (row, document) of every position, to name what moved
    doc_of = documents.cpu()

    leaks: list[Leak] = []
    still: list[tuple[int, int]] = []
    own_changes: list[float] = []
    compared = 0
    with torch.no_grad():
        base = run_model(model_fn, (ids, documents, positions))
        if base.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(base.shape)} do not start with (B, T) = {tuple(ids.shape)}")
        # (B, T, everything else): the width spelt out, as -1 is ambiguous for a batch of no tokens
        width = int(np.prod(base.shape[2:], dtype=np.int64))
        base_flat = base.reshape(*ids.shape, width)
        for index in chosen:
            row, document, first, end = pieces[index]
            changed = ids.clone()
            # A shift in [1, vocab) makes every token differ from the one it replaces.
            shift = torch.randint(1, vocab, (end - first,), generator=generator).to(ids.device, ids.dtype)
            changed[row, first:end] = (ids[row, first:end] + shift) % vocab
            out = run_model(model_fn, (changed, documents, positions),
                            f"model_fn (document {document} of row {row} changed)").reshape(*ids.shape, width)

            inside = torch.zeros(ids.shape, dtype=torch.bool)
            inside[row, first:end] = True
            moved = (out != base_flat).any(dim=-1).cpu()  # (B, T): NaN != NaN counts as moved
            own = (out[row, first:end] - base_flat[row, first:end]).abs().max().item()
            own_changes.append(own)
            if not own > 0:
                still.append((row, document))
            compared += int((~inside).sum())
            outside = moved & ~inside
            if bool(outside.any()):
                leaks.extend(_leaks(out, base_flat, outside, doc_of, row, document))
    scale, resolution = _resolution(base_flat)
    return IsolationResult(
        leaks=tuple(leaks), perturbed=len(chosen), documents=len(pieces),
        own_change=min(own_changes) if own_changes else 0.0, still=tuple(still), compared=compared,
        resolution=resolution, dtype=str(base.dtype).removeprefix("torch."), scale=scale,
        forwards=len(chosen) + 1,
    )


def _resolution(outputs: torch.Tensor) -> tuple[float, float]:
    """(largest |output|, half the dtype's spacing there): 0 resolution for integer outputs."""
    if not outputs.dtype.is_floating_point or outputs.numel() == 0:
        return 0.0, 0.0
    finite = outputs.detach()[torch.isfinite(outputs.detach())].abs()
    if finite.numel() == 0:
        return 0.0, 0.0
    top = finite.max()
    spacing = torch.nextafter(top, torch.tensor(float("inf"), dtype=top.dtype)) - top
    return float(top), float(spacing) / 2


def _leaks(out, base, outside, doc_of, row, document) -> list[Leak]:
    """One Leak for each (row, document) piece whose outputs moved."""
    found = []
    diff = (out - base).abs().amax(dim=-1).cpu()  # (B, T)
    for moved_row in torch.nonzero(outside.any(dim=1)).flatten().tolist():
        where = torch.nonzero(outside[moved_row]).flatten()
        moved_docs = doc_of[moved_row, where]
        for moved_document in torch.unique(moved_docs).tolist():
            at = where[moved_docs == moved_document]
            largest = diff[moved_row, at].max().item()
            found.append(Leak(row, document, moved_row, int(moved_document),
                              float("nan") if largest != largest else float(largest), int(at[0])))
    return found
