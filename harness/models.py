"""A user's own models, collected: ``tensorcad_models = ["pkg.module:factory"]`` becomes test items.

Each factory returns a model (a Hugging Face model is recognised and adapted by
``harness.adapters``) or a ``model_fn(ids, documents, positions)``, and becomes
the items of the registry's `MODEL_CHECKS`: ``isolation``,
``isolation[boundaries]``, ``faithful`` and ``isolation[gradients]``, marked
``tensorcad`` and ``isolation`` (or ``faithful``), with ids such as
``pytest.ini::pkg.module:factory::isolation``. They hang under the ini file that
names them, which is collected whenever pytest runs without paths (or is named).

The batch is the ``tensorcad_batch`` fixture: by default drawn by
`tensorcad.packing` at the ``--tensorcad-*`` settings (or packed by the
``tensorcad_collator`` named), or a project's own fixture of that name. By
default (``--tensorcad-subprocess``) a model's checks run in a child process
(`harness.contained`) that makes the model again from the factory's name, so a
crash fails the item that was running and the session goes on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tensorcad.errors import TensorcadError

from . import options


def model_subject(factory: str, settings: Any, batch: Any = None) -> Any:
    """The `ModelSubject` of the model ``factory`` makes, at ``settings`` (its collator, if one is named)."""
    from tensorcad.runtime.model_subject import ModelSubject, import_factory

    from .certificates import alone_function, model_function

    made = import_factory(factory, "tensorcad_models")()
    model_fn = model_function(made)
    collator = import_factory(settings.collator, "tensorcad_collator")() if settings.collator else None
    return ModelSubject(model_fn, settings, given_batch=batch, collator=collator,
                        alone=alone_function(made, model_fn), name=factory)


_MARKED: dict[str, Any] = {}


def marker_subject(settings: Any) -> Any:
    """The subject of a test marked ``tensorcad(model=...)``: made once a session for each settings."""
    import json

    key = json.dumps(settings.to_json(), sort_keys=True, default=str)
    if key not in _MARKED:
        try:
            _MARKED[key] = model_subject(settings.model, settings)
        except TensorcadError as error:
            raise pytest.UsageError(str(error)) from None
    return _MARKED[key]


def factories(config: pytest.Config) -> list[str]:
    return [line.strip() for line in config.getini(options.INI_MODELS) if line.strip()]


def add_model_args(config: pytest.Config) -> None:
    """Collect the ini file naming the factories when pytest runs on its default paths."""
    if not factories(config) or config.inipath is None:
        return
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return  # paths were named: only those (name the ini file to collect the models too)
    config.args.append(str(config.inipath))


def collect_file(file_path, parent: pytest.Collector):
    config = parent.config
    if config.inipath is None or file_path != config.inipath or not factories(config):
        return None
    return ModelsFile.from_parent(parent, path=file_path)


class ModelsFile(pytest.File):
    """The ini file: one collector a factory it names."""

    def collect(self):
        for name in factories(self.config):
            if name.count(":") != 1:
                raise self.CollectError(f"{options.INI_MODELS}: expected 'pkg.module:factory', got {name!r}")
            yield ModelFactory.from_parent(self, name=name)


class ModelFactory(pytest.Collector):
    """One factory's items; the results of its child process, kept for the items that follow."""

    def collect(self):
        from tensorcad.runtime.certification import MODEL_CHECKS, REGISTRY

        self.results: dict[str, dict] = {}
        self.crashes: dict[str, Any] = {}
        self.subject = None
        for name in MODEL_CHECKS:
            item = ModelCheck.from_parent(self, name=name, callobj=_check_function)
            category = REGISTRY[name].category or ("faithful" if name == "faithful" else None)
            if category:
                item.add_marker(category)
            item.add_marker("tensorcad")
            yield item


def _check_function(request, tensorcad_settings, tensorcad_batch):
    run_item(request.node, tensorcad_settings, tensorcad_batch)


def item_settings(item: pytest.Item, settings: Any) -> Any:
    collator = item.config.getini(options.INI_COLLATOR) or None
    try:
        return replace(settings, model=item.parent.name, collator=settings.collator or collator)
    except TensorcadError as error:
        raise pytest.UsageError(str(error)) from None


def run_item(item: ModelCheck, settings: Any, batch: Any) -> None:
    """This item's certificate: from the factory's child process (run now if it has not yet), or here."""
    factory: ModelFactory = item.parent
    settings = item_settings(item, settings)
    if item.config.getoption(options.SUBPROCESS_DEST):
        if item.name not in factory.results and item.name not in factory.crashes:
            _run_child(item, settings, batch)
        if item.name in factory.crashes:
            raise AssertionError(factory.crashes[item.name].message())
        check = factory.results[item.name]
        status, message = check["status"], check["message"]
    else:
        from tensorcad.runtime.certification import run_check

        if factory.subject is None:
            factory.subject = model_subject(factory.name, settings, batch)
        check = run_check(factory.subject, item.name)
        status, message = check.status, check.message
    item.outcome_message = message
    if status == "skipped":
        raise pytest.skip.Exception(message, _use_item_location=True)
    if status != "passed":
        raise AssertionError(message)


def _run_child(item: ModelCheck, settings: Any, batch: Any) -> None:
    """One child for this item and every later selected item of the same factory not yet run."""
    from .contained import run_contained

    factory: ModelFactory = item.parent
    selected = [i.name for i in item.session.items if isinstance(i, ModelCheck) and i.parent is factory]
    wanted = [n for n in selected[selected.index(item.name):] if n not in factory.results]
    results, crash = run_contained(factory.name, wanted, settings.to_json(), batch)
    factory.results.update(results)
    if crash is None:
        return
    if crash.check is None:
        # No check began (the factory failed, or the child died making the model): so would every retry.
        factory.crashes.update({name: crash for name in wanted if name not in results})
    else:
        # The check it died in carries the crash; the ones after it get a fresh child when they run.
        factory.crashes[crash.check] = crash


class ModelCheck(pytest.Function):
    """One certificate of a user's model; a failure prints the certificate's message, not a traceback."""

    outcome_message = ""

    def reportinfo(self):
        return self.path, 0, f"{self.parent.name}::{self.name}"

    def repr_failure(self, excinfo):
        if excinfo.errisinstance((AssertionError, TensorcadError)):
            return f"{self.parent.name}::{self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)
