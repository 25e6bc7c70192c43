"""Which function runs each certificate: the grouped one (a few passes for every document) or one pass a document.

``Settings.method`` (``tensorcad certify --each-document``, the assertion functions' ``method=``) picks:
``grouped`` (the default: `group_testing`, `grouped_boundaries`, `batched_faithful`,
`weighted_gradients`) or ``each`` (`isolation`, `boundaries`, `faithful`, `gradients`: one
perturbation, move, lone run or backward a document, as before issue 29, kept to compare with).
Both take the same arguments and return the same result types, which say how they ran
(``method``) and what it cost (``forwards``, ``calls``, ``backwards``).
"""

from __future__ import annotations

from typing import Any, Callable

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building.settings import METHODS

CERTIFICATES = ("isolation", "boundaries", "faithful", "gradients")


def certificate(name: str, method: str = METHODS[0]) -> Callable[..., Any]:
    """The function that runs certificate ``name`` (CERTIFICATES) by ``method`` (METHODS)."""
    if method not in METHODS:
        raise TensorcadError("method", f"unknown method {method!r} ({', '.join(METHODS)})")
    if name not in CERTIFICATES:
        raise TensorcadError("certificate", f"unknown certificate {name!r} ({', '.join(CERTIFICATES)})")
    grouped = method == "grouped"
    if name == "isolation":
        if grouped:
            from .forward.group_testing import check_isolation_grouped as run
        else:
            from .forward.isolation import check_isolation as run
    elif name == "boundaries":
        if grouped:
            from .forward.grouped_boundaries import check_boundaries_grouped as run
        else:
            from .forward.boundaries import check_boundaries as run
    elif name == "faithful":
        if grouped:
            from .forward.batched_faithful import check_faithful_batched as run
        else:
            from .forward.faithful import check_faithful as run
    elif grouped:
        from .forward.weighted_gradients import check_gradients_weighted as run
    else:
        from .forward.gradients import check_gradient_isolation as run
    return run
