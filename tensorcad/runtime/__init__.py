"""The runtime: scale a design down, build its generated model, run it.

Imports torch (through its submodules, on first use); the engine never does.
Names load lazily, so `import tensorcad.runtime` stays cheap (and `scale` needs
no torch). Modules are named for what they hold (`scaling`, `building`,
`verification`, `tracing`, `training`; the check registry is `certification`, its
subject `subject`, its defaults `settings`), never after a function they export: an
imported submodule would otherwise shadow the function of the same name.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "scale": ("tensorcad.runtime.scaling", "scale"),
    "build": ("tensorcad.runtime.building", "build"),
    "load_module": ("tensorcad.runtime.building", "load_module"),
    "verify": ("tensorcad.runtime.verification", "verify"),
    "VerifyReport": ("tensorcad.runtime.verification", "VerifyReport"),
    "certify": ("tensorcad.runtime.certification", "certify"),
    "Check": ("tensorcad.runtime.certification", "Check"),
    "Subject": ("tensorcad.runtime.subject", "Subject"),
    "Settings": ("tensorcad.runtime.settings", "Settings"),
    "check_isolation": ("tensorcad.runtime.isolation", "check_isolation"),
    "IsolationResult": ("tensorcad.runtime.isolation", "IsolationResult"),
    "Leak": ("tensorcad.runtime.isolation", "Leak"),
    "check_boundaries": ("tensorcad.runtime.boundaries", "check_boundaries"),
    "check_faithful": ("tensorcad.runtime.faithful", "check_faithful"),
    "check_gradient_isolation": ("tensorcad.runtime.gradients", "check_gradient_isolation"),
    "ModelSubject": ("tensorcad.runtime.model_subject", "ModelSubject"),
    "smoke_train": ("tensorcad.runtime.training", "smoke_train"),
    "train_on_corpus": ("tensorcad.runtime.corpus_training", "train_on_corpus"),
    "trace": ("tensorcad.runtime.tracing", "trace"),
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorcad.runtime' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
