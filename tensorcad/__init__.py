"""tensorcad: read a transformer design, cost it, lint it, generate its PyTorch code, prove it.

Importing tensorcad never imports torch; `tensorcad.runtime` and
`tensorcad.generate`'s output do, when used. docs/architecture.md draws the
packages and what each owns.
"""

from __future__ import annotations

from .errors import TensorcadError
from .faces import keep_moved_paths, lazy

__version__ = "0.13.0"  # the same as pyproject.toml's (tests/test_public_api.py holds both)

# Everything but the error type loads on first use, so `import tensorcad` stays quick and torch-free, and
# the pytest plugin (tensorcad.testing.plugin, loaded in every session of an environment that installs
# tensorcad) imports nothing beyond the standard library at start-up (issue 49).
_LAZY = {
    "Design": "tensorcad.design:Design",
    "load": "tensorcad.design:load",
    "preset_names": "tensorcad.design:preset_names",
    "analyze": "tensorcad.analysis.report:analyze",
    "Report": "tensorcad.analysis.report:Report",
    "OperatingPoint": "tensorcad.analysis.operating_point:OperatingPoint",
    "Packing": "tensorcad.packing:Packing",
    "ContextParallel": "tensorcad.analysis.context_parallel.ranks:ContextParallel",
    "Lengths": "tensorcad.packing:Lengths",
    "load_lengths": "tensorcad.packing:load_lengths",
    "check": "tensorcad.rules:check",
    "Diagnostic": "tensorcad.rules:Diagnostic",
    "generate": "tensorcad.codegen:generate",
    "runtime": "tensorcad.runtime",
    "packing": "tensorcad.packing",
    "closed_form": "tensorcad.packing.closed_form",
}

__all__ = ["TensorcadError", *_LAZY]
__getattr__, __dir__ = lazy(__name__, _LAZY)
keep_moved_paths()
