"""tensorcad: read a transformer design, cost it, lint it, generate its PyTorch code, prove it.

Importing tensorcad never imports torch; `tensorcad.runtime` and
`tensorcad.generate`'s output do, when used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .design import Design, load, preset_names
from .errors import TensorcadError

__version__ = "0.12.0"

# Heavier pieces load on first use, so `import tensorcad` stays quick and torch-free.
_LAZY = {
    "analyze": ("tensorcad.analysis.report", "analyze"),
    "Report": ("tensorcad.analysis.report", "Report"),
    "OperatingPoint": ("tensorcad.analysis.operating_point", "OperatingPoint"),
    "Packing": ("tensorcad.packing", "Packing"),
    "ContextParallel": ("tensorcad.analysis.context_parallel", "ContextParallel"),
    "Lengths": ("tensorcad.corpus.histogram", "Lengths"),
    "load_lengths": ("tensorcad.corpus.histogram", "load_lengths"),
    "check": ("tensorcad.rules", "check"),
    "Diagnostic": ("tensorcad.rules", "Diagnostic"),
    "generate": ("tensorcad.codegen", "generate"),
    "runtime": ("tensorcad.runtime", None),
    "packing": ("tensorcad.packing", None),
    "closed_form": ("tensorcad.closed_form", None),
}

__all__ = ["Design", "TensorcadError", "load", "preset_names", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorcad' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value
