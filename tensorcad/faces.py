"""How a package shows its public names: loaded on first use, and still found where they were before they moved.

A package's face (its ``__init__``) names what callers may use and the module
holding each; ``lazy`` gives it the module-level ``__getattr__`` and
``__dir__`` that import a name's module only when the name is first read, so
that ``import tensorcad``, ``import tensorcad.runtime`` and the pytest plugin
(which pytest loads in every project that installs tensorcad) stay quick and
never import torch before a name that needs it is used.

``MOVED`` lists the modules that moved when the house was laid out in packages
(0.13: packing, the command line, the runtime's three rooms), old path to new.
``keep_moved_paths`` lets ``import tensorcad.runtime.isolation`` and its
like still work, giving the very module object of the new path, so code and
documentation written against 0.12 keep running; nothing in this repository
imports an old path (``tests/test_public_api.py`` holds both).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the face of ``package``.

    ``names`` maps each public name to ``"module:attribute"``, or to
    ``"module"`` for a module itself; a module may be relative to ``package``
    (``".generated:build"``). A name is imported once, then kept on the package.
    """

    def __getattr__(name: str) -> Any:
        try:
            target = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module, _, attribute = target.partition(":")
        value = importlib.import_module(module, package)
        if attribute:
            value = getattr(value, attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__


_RUNTIME_MOVES = {
    "building": ("scaling", "subject", "settings", "export", "blockmask", "profile"),
    "certification": ("outcome", "isolation", "boundaries", "faithful", "gradients", "certificates", "mask_checks",
                      "closed_form_check", "goldens", "verify_checks", "verification", "model_subject",
                      "positions_probe"),
}

MOVED: dict[str, str] = {
    "tensorcad.packers": "tensorcad.packing.strategies",
    "tensorcad.packing_forms": "tensorcad.packing.forms",
    "tensorcad.closed_form": "tensorcad.packing.closed_form",
    "tensorcad.corpus": "tensorcad.packing.corpus",
    "tensorcad.corpus.histogram": "tensorcad.packing.corpus.histogram",
    "tensorcad.corpus.reading": "tensorcad.packing.corpus.reading",
    "tensorcad.cli_views": "tensorcad.cli.views",
    "tensorcad.cli_options": "tensorcad.cli.options",
    "tensorcad.cli_operating_point": "tensorcad.cli.operating_point",
    "tensorcad.runtime_cli": "tensorcad.cli.torch_commands",
    "tensorcad.answers": "tensorcad.views.answers",
    "tensorcad.mask_image": "tensorcad.views.mask_image",
    "tensorcad.editor.preview": "tensorcad.views.preview",
    "tensorcad.editor.walkthrough": "tensorcad.views.walkthrough",
    "tensorcad.runtime.corpus_training": "tensorcad.runtime.training.corpus",
    "tensorcad.runtime.tracing": "tensorcad.runtime.training.tracing",
    # tensorcad.runtime.building, .certification and .training are the rooms' faces now, exporting
    # what those modules held.
    **{f"tensorcad.runtime.{module}": f"tensorcad.runtime.{room}.{module}"
       for room, modules in _RUNTIME_MOVES.items() for module in modules},
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of ``MOVED`` and answers it with the module at its new path."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "tensorcad.corpus")

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system stamps the old path's spec on the module it was handed: it keeps its own.
        module.__spec__ = self._specs.pop(module.__spec__.name)


def keep_moved_paths() -> None:
    """Let every old path of ``MOVED`` import (once a process; called by ``tensorcad``'s face)."""
    # First, before the path finder: under the old package path ``tensorcad.corpus`` it would find
    # histogram.py again and load a second copy of the module (two ``Lengths`` classes).
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Moved())
