"""Which attention of a design keeps a key of another document: a design's leak, its cause and its fix.

A user's model is a black box, so a leak there is named by what moved. A
design's masks are expressions, so when its documents are not isolated the
cause can be read off them: each attention's kept set is evaluated at every
(query, key) of the batch's own rows (the numpy interpreter, no model, no
engine), and the first kept pair whose documents differ names the attention,
its mask as written, the pair and the conjunct that keeps each document apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorcad.design.masks import facts

# Rows longer than this are read through their first CROSSING_SEQ tokens (a T x T grid a row).
CROSSING_SEQ = 4096


def crossing_pair(attention: Any, documents: np.ndarray, positions: np.ndarray) -> tuple[int, int, int] | None:
    """(row, query, key) of the first score ``attention`` keeps across two documents, or None.

    None too when its mask reads a tensor other than documents and positions (token ids:
    nothing here can stand in for them)."""
    from tensorcad.design.expr import Const, Env, evaluate

    reads = facts(attention).reads
    if any(role not in ("documents", "positions") for role in reads.values()):
        return None
    keep = attention.keep if attention.keep is not None else Const(True)
    seq = min(documents.shape[1], CROSSING_SEQ)
    q, kv = np.arange(seq)[:, None], np.arange(seq)[None, :]
    for row in range(documents.shape[0]):
        doc = documents[row:row + 1, :seq]
        if doc.min() == doc.max():
            continue  # one document: nothing to cross
        by_role = {"documents": doc, "positions": positions[row:row + 1, :seq]}
        tensors = {port: by_role[role] for port, role in reads.items()}
        kept = np.broadcast_to(evaluate(keep, Env(b=0, h=0, q=q, kv=kv, tensors=tensors)), (seq, seq))
        across = kept & (doc[0][:, None] != doc[0][None, :])
        if across.any():
            query, key = np.argwhere(across)[0]
            return row, int(query), int(key)
    return None


def mask_cause(design: Any, documents: Any, positions: Any) -> str | None:
    """The hint line naming the first attention of ``design`` that keeps a key of another document."""
    from tensorcad.design.expr.printer import to_text

    documents = np.asarray(documents.cpu() if hasattr(documents, "cpu") else documents)
    positions = np.asarray(positions.cpu() if hasattr(positions, "cpu") else positions)
    for attention, _ in design.attentions():
        pair = crossing_pair(attention, documents, positions)
        if pair is None:
            continue
        row, query, key = pair
        written = f"its mask `{to_text(attention.mask)}`" if attention.mask is not None else "it has no mask and"
        port = next((p for p, role in facts(attention).reads.items() if role == "documents"), None)
        same = (f"`{port}(b, q) == {port}(b, kv)`" if port is not None else
                "a port wired from the documents input, read as `doc(b, q) == doc(b, kv)`,")
        return (f"{attention.path}: {written} keeps key {key} (document {int(documents[row, key])}) for query "
                f"{query} (document {int(documents[row, query])}) of row {row}: AND {same} into the mask to keep "
                "each document to itself")
    return None


def cause_lines(subject: Any) -> list[str]:
    """A design's leak, its one cause as a hint line: an attention keeping another document's key
    (``mask_cause``), else an expert's capacity shared across documents (`capacity`); none for a user's model."""
    if getattr(subject, "design", None) is None:
        return []
    cause = mask_cause(subject.small, *subject.batch[1:])
    if cause is None:
        from .capacity import capacity_cause

        cause = capacity_cause(subject)
    return [cause] if cause else []
