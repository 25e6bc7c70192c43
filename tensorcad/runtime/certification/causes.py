"""The one cause of a failed certificate, named with its hint and no other.

A certificate says what moved; this says why, when it can tell. A Hugging Face
model behind ``model_fn`` is asked first (`tensorcad.hf.diagnose_failure`:
the cache at its default, an all-ones 2D mask, position ids that never
restart, an encoder, a dynamic rope scaling): a setting it finds is the
cause, and the only hint given. Otherwise a document whose outputs move when
the one before it grows or shrinks by a token, while changing any document's
tokens moves nothing outside it, depends on where it starts in its row:
positions counted through the row. A leak of tokens has no hint beyond what
moved (a mask forgotten or changed), and neither has a gradient leak that no
setting explains. Runs the model again only when a certificate has failed.
"""

from __future__ import annotations

from typing import Any, Callable

POSITIONS = ("a document's outputs depend on where it starts in its row, as when positions are counted through "
             "the row: pass each token's position within its document (tensorcad.packing.positions_of(documents), "
             "the collator's position_ids)")


def failure_hints(model_fn: Callable[..., Any], ids: Any, documents: Any, positions: Any, certificate: str, *,
                  vocab: int, sample: int | None = None, seed: int = 0, tokens_leak: bool | None = None,
                  boundaries_moved: bool | None = None) -> list[str]:
    """The hint lines for ``certificate`` (isolation, boundaries, faithful, gradients) that failed on this batch.

    ``tokens_leak`` and ``boundaries_moved`` are what the caller already knows (None: run
    the check to know it, which happens only for the positions hint).
    """
    from tensorcad.hf import diagnose_failure

    found = diagnose_failure(model_fn, ids, documents, positions)
    if found or certificate in ("isolation", "gradients"):
        return found
    if tokens_leak is None:
        from .forward.isolation import check_isolation

        tokens_leak = not check_isolation(model_fn, ids, documents, positions, vocab=vocab, sample=sample,
                                          seed=seed).passed
    if tokens_leak:
        return []  # the leak explains it, and says where
    if boundaries_moved is None:
        from .forward.boundaries import check_boundaries

        boundaries_moved = bool(check_boundaries(model_fn, ids, documents, positions, vocab=vocab, sample=sample,
                                                 seed=seed).moved)
    return [POSITIONS] if boundaries_moved else []
