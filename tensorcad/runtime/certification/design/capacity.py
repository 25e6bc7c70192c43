"""Which mixture of experts drops a packed token that its document alone keeps: a capacity leak, named.

An expert with a capacity takes at most ceil(factor x group tokens x top_k / experts) of a group's
routed tokens (a row, or the whole batch), so in a packed row one document's tokens can fill the
slots another's needed: its outputs then depend on its neighbours though no attention crosses.
When a design's isolation fails, each generated MoE's ``keep`` is read on the packed batch and on
each document run alone (the eager form, eval mode), and the first routed token dropped packed but
kept alone names the layer, the expert, the document and the position.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch


@contextlib.contextmanager
def _recorded(moes: list[tuple[str, Any]]) -> Iterator[dict[str, list]]:
    """Each MoE's calls of ``keep`` while the block runs: (chosen, kept, groups) a call, by module name."""
    seen: dict[str, list] = {name: [] for name, _ in moes}

    def wrap(name: str, keep: Any) -> Any:
        def recording(chosen, weights, groups):
            kept = keep(chosen, weights, groups)
            seen[name].append((chosen.detach(), kept.detach(), groups))
            return kept
        return recording

    for name, module in moes:
        module.keep = wrap(name, type(module).keep.__get__(module))  # the instance's, over the class's
    try:
        yield seen
    finally:
        for _, module in moes:
            del module.keep


def capacity_cause(subject: Any) -> str | None:
    """The line naming the first token a packed row drops that its document alone keeps; None when none is."""
    model = subject.model("eager")
    try:
        moes = [(name, m) for name, m in model.module.named_modules() if hasattr(m, "capacity_factor")
                and callable(getattr(type(m), "keep", None))]
        if not moes:
            return None
        ids, documents, positions = subject.batch
        with torch.no_grad(), _recorded(moes) as packed:
            model.module(**subject._inputs((ids, documents, positions)))
        for row in range(ids.shape[0]):
            for document in torch.unique(documents[row]).tolist():
                where = torch.nonzero(documents[row] == document).flatten()
                first, end = int(where[0]), int(where[-1]) + 1
                alone_batch = (ids[row:row + 1, first:end], torch.zeros_like(ids[row:row + 1, first:end]),
                               torch.arange(end - first)[None])
                with torch.no_grad(), _recorded(moes) as alone:
                    model.module(**subject._inputs(alone_batch))
                found = _first_dropped(moes, packed, alone, row, first, end, ids.shape[1])
                if found is not None:
                    name, position, expert, groups, factor = found
                    scope = "each row" if groups == ids.shape[0] else "the whole batch"
                    return (f"{name}: its experts' capacity (factor {factor:g}, counted over {scope}) drops "
                            f"token {position} of document {document} of row {row} at expert {expert}, which that "
                            "document alone keeps: in a packed row documents compete for each expert's slots; "
                            "a capacity of null is dropless and keeps them apart")
        return None
    finally:
        model.form = "flex"  # as every other check finds it


def _first_dropped(moes, packed, alone, row: int, first: int, end: int, T: int):
    """(module name, position in the document, expert, groups, factor) of the first slot kept alone, dropped packed."""
    for name, module in moes:
        for (chosen, kept, groups), (_, kept_alone, _) in zip(packed[name], alone[name]):
            mine = kept.reshape(-1, T, kept.shape[-1])[row, first:end]  # (L, K) of this document's tokens
            lost = (mine == 0) & (kept_alone.reshape(end - first, -1) != 0)
            if bool(lost.any()):
                position, slot = (int(i) for i in torch.nonzero(lost)[0])
                expert = int(chosen.reshape(-1, T, chosen.shape[-1])[row, first + position, slot])
                return name, position, expert, groups, float(module.capacity_factor)
    return None
