"""How a package shows its public names: loaded on first use, and still found where they were before they moved.

A package's face (its ``__init__``) names what callers may use and the module
holding each; ``lazy`` gives it the module-level ``__getattr__`` and
``__dir__`` that import a name's module only when the name is first read, so
that ``import tensorcad``, ``import tensorcad.runtime`` and the pytest plugin
(which pytest loads in every project that installs tensorcad) stay quick and
never import torch before a name that needs it is used.

``MOVED`` lists the modules that moved, old path to new: when the house was
laid out in packages (packing, the command line, the runtime's three rooms),
and when certification, context parallelism and the hybrid families became
rooms of their own (``ROOMS``). ``keep_moved_paths`` lets
``import tensorcad.runtime.isolation`` and its like still work for one release,
giving the very module object of the new path with a ``DeprecationWarning``
naming that path, so code and documentation written against an older release
keep running; nothing in this repository imports an old path
(``tests/test_public_api.py`` holds both).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
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

_CERTIFICATION = "tensorcad.runtime.certification"

# The rooms of certification, context parallelism and the hybrid families (issue 41): a folder each,
# named for what it certifies or computes, the prefix its files shared dropped.
ROOMS: dict[str, str] = {
    **{f"{_CERTIFICATION}.{old}": f"{_CERTIFICATION}.forward.{new}" for old, new in (
        ("isolation", "isolation"), ("group_testing", "group_testing"), ("boundaries", "boundaries"),
        ("grouped_boundaries", "grouped_boundaries"), ("faithful", "faithful"),
        ("batched_faithful", "batched_faithful"), ("gradients", "gradients"),
        ("weighted_gradients", "weighted_gradients"), ("model_calls", "calls"))},
    **{f"{_CERTIFICATION}.{old}": f"{_CERTIFICATION}.step.{new}" for old, new in (
        ("step_batch", "batch"), ("step_labels", "labels"), ("step_loss", "loss"), ("loss_weights", "loss_weights"),
        ("step_gradients", "gradients"), ("accumulation", "accumulation"), ("eval_parity", "eval_parity"),
        ("training_step", "loop"), ("reductions", "reductions"), ("next_token", "next_token"),
        ("step_certificates", "certificates"))},
    **{f"{_CERTIFICATION}.{old}": f"{_CERTIFICATION}.{new}" for old, new in (
        ("model_subject", "subjects.model"), ("pretrained", "subjects.pretrained"),
        ("cp_plan", "parallel.plan"), ("cp_certificate", "parallel.certificate"), ("cp_faithful", "parallel.faithful"),
        ("closed_form_check", "design.closed_form"), ("mask_checks", "design.masks"), ("goldens", "design.goldens"),
        ("verify_checks", "design.checks"), ("positions_probe", "design.positions_probe"))},
    # tensorcad.analysis.context_parallel is the package's face now, exporting what the module held
    "tensorcad.analysis.context_parallel_documents": "tensorcad.analysis.context_parallel.documents",
    "tensorcad.analysis.context_parallel_pytorch": "tensorcad.analysis.context_parallel.pytorch",
    "tensorcad.analysis.context_parallel_report": "tensorcad.analysis.context_parallel.report",
    "tensorcad.hf.hybrid_families": "tensorcad.hf.hybrid.families",
    "tensorcad.hf.hybrid_packing": "tensorcad.hf.hybrid.packing",
    "tensorcad.hf.hybrid_weights": "tensorcad.hf.hybrid.weights",
    # folders back to 15 modules: the operating point's schema and codegen's pasted runtime in packages
    "tensorcad.analysis.operating_point_schema": "tensorcad.analysis.operating_point.schema",
    "tensorcad.codegen.prelude": "tensorcad.codegen.runtime.prelude",
    "tensorcad.codegen.block_ranges_runtime": "tensorcad.codegen.runtime.block_ranges",
    "tensorcad.codegen.cp_block_mask_runtime": "tensorcad.codegen.runtime.cp_block_mask",
    "tensorcad.codegen.mixer_runtime": "tensorcad.codegen.runtime.mixers",
}

_EARLIER: dict[str, str] = {
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

# Every old path, to where its module is now (an earlier move followed through the rooms').
MOVED: dict[str, str] = {**{old: ROOMS.get(new, new) for old, new in _EARLIER.items()}, **ROOMS}


def moved_message(old: str) -> str:
    """What importing an old path says: where the module is now."""
    return f"{old} has moved to {MOVED[old]}: import it from there (the old path is kept for one release)"


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of ``MOVED`` and answers it with the module at its new path."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "tensorcad.corpus")

    def create_module(self, spec):
        warnings.warn(moved_message(spec.name), DeprecationWarning, stacklevel=2)
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
