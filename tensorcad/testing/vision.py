"""Vision-language rows certified as a plain assertion: ``assert_vision_packed``.

The work is the runtime's (``tensorcad.runtime.certification``'s ``check_vision_faithful``
and ``check_vision_isolation``: each sample of a packed row, its text and its images,
against itself run alone, and changed without moving another); this module words the failure.
"""

from __future__ import annotations

from typing import Any

from .certificates import CertificateError


def assert_vision_packed(model: Any, inputs: Any, documents: Any, *, atol: float | None = None, seed: int = 0,
                         **call: Any) -> Any:
    """Each sample packed in ``model(**inputs, **call)`` computes as if it ran alone, and moves no other sample.

    ``inputs`` is the packed row's keyword arguments (``input_ids`` (1, T), ``position_ids``,
    ``pixel_values``, ``image_grid_thw``, ...; ``tensorcad.hf.vision_rows`` makes them the
    way transformers reads a packed row), ``documents`` (1, T) each token's sample, ``call``
    any keywords the user's call adds (``use_cache``). Returns the faithful result; raises
    ``CertificateError`` naming the sample and the cause (the positions' rows, positions over
    the whole row, a cache, an axis of the positions).
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_vision_faithful, check_vision_isolation

    faithful = check_vision_faithful(model, inputs, documents, atol=atol, **call)
    if not faithful.passed:
        raise CertificateError("a packed sample differs from itself alone\n" + faithful.message(), faithful)
    isolated = check_vision_isolation(model, inputs, documents, seed=seed, **call)
    if not isolated.passed:
        raise CertificateError("a packed sample moves another\n" + isolated.message(), isolated)
    return faithful


__all__ = ["assert_vision_packed"]
