"""The data path's certificates as plain assertions: ``assert_data_coverage`` and ``assert_data_boundaries``.

The work is the runtime's (``tensorcad.runtime.certification``'s
``check_coverage`` and ``check_data_boundaries``); this module words the failure.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from .certificates import CertificateError


def assert_data_coverage(documents: Iterable[Any], loader: Any, *, pieces: Any = "examples", policy: str = "whole",
                         max_length: int | None = None, resume_at: int | None = None, id_key: str = "id",
                         length_of: Callable[[Any], int] | str | None = None) -> Any:
    """One epoch of ``loader`` gives every (document, token span) of ``documents`` once, or as ``policy`` says.

    ``loader``: an iterable of batches, or a function making one; with
    ``resume_at`` the loader's ``state_dict()`` is saved after that many
    batches and restored into a fresh one, and both parts together must be the
    epoch. ``pieces``: ``"examples"`` (each example an ``id``), ``"tokens"`` (each
    token's document and offset, the columns ``provenance`` adds before the
    packer) or a reader. Returns a ``CoverageResult``; raises ``CertificateError``
    counting what was lost and duplicated and naming the first of each.
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_coverage

    result = check_coverage(documents, loader, pieces=pieces, policy=policy, max_length=max_length,
                            resume_at=resume_at, id_key=id_key, length_of=length_of)
    if not result.passed:
        raise CertificateError("the loader does not give the epoch\n" + result.message, result)
    return result


def assert_data_boundaries(batch: Mapping, lengths: Any, *, eos_id: int | None = None, forms: Any = None,
                           ids_key: str = "input_ids") -> Any:
    """Every form of boundaries in ``batch`` (position_ids, cu_seq_lens_q, seq_idx, documents, EOS) equals ``lengths``.

    ``lengths``: the packer's document lengths, a list per row (TRL's
    ``seq_lengths``, or ``provenance_lengths`` of the document column); tokens
    past a row's sum are padding. Returns a ``DataBoundariesResult``; raises
    ``CertificateError`` naming each merged or split document and padding read
    as documents.
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_data_boundaries

    result = check_data_boundaries(batch, lengths, eos_id=eos_id, forms=forms, ids_key=ids_key)
    if not result.passed:
        raise CertificateError("the batch's boundaries are not the packer's\n" + result.message, result)
    return result


__all__ = ["assert_data_boundaries", "assert_data_coverage"]
