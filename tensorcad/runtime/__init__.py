"""The runtime: scale a design down, build its generated model, run it.

Imports torch (through its submodules, on first use); the engine never does.
Names load lazily, so `import tensorcad.runtime` stays cheap and other modules
(verify, isolation, smoke_train, trace) join by adding a line to `_LAZY`.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "scale": ("tensorcad.runtime.scale", "scale"),
    "build": ("tensorcad.runtime.build", "build"),
    "load_module": ("tensorcad.runtime.build", "load_module"),
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorcad.runtime' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
