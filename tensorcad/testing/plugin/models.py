"""A user's own models, collected: ``tensorcad_models = ["pkg.module:factory"]`` becomes test items.

Each factory returns a model (a Hugging Face model is recognised and adapted by
``tensorcad.testing.adapters``) or a ``model_fn(ids, documents, positions)``, and becomes
the items of the registry's `MODEL_CHECKS`: ``isolation``,
``isolation[boundaries]``, ``faithful`` and ``isolation[gradients]``, marked
``tensorcad`` and ``isolation`` (or ``faithful``), with ids such as
``pytest.ini::pkg.module:factory::isolation``. They hang under the ini file that
names them, which is collected whenever pytest runs without paths (or is named).

The batch is the ``tensorcad_batch`` fixture: by default drawn by
`tensorcad.packing` at the ``--tensorcad-*`` settings (or packed by the
``tensorcad_collator`` named), or a project's own fixture of that name. By
default (``--tensorcad-subprocess``) a model's checks run in a child process
(`tensorcad.testing.plugin.contained`) that makes the model again from the factory's name, so a
crash fails the item that was running and the session goes on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tensorcad.errors import TensorcadError

from . import options
from ..certificates import model_subject


_MARKED: dict[str, Any] = {}


def marker_subject(config: pytest.Config, settings: Any) -> Any:
    """The subject of a test marked ``tensorcad(model=...)``: made once a session for each settings."""
    import json

    settings = item_settings(config, settings, settings.model)  # the ini's collator unless the marker names one
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


class ModelRun:
    """One model's certificates at one batch and settings: run in a child (or here), each result kept.

    A child runs the check asked for and every later one still wanted, so the four
    items of a model cost one child; a crash is kept for the check it ended, and the
    checks after it get a fresh child when their turn comes.
    """

    def __init__(self, factory: str, settings: Any, batch: Any, contained: bool):
        self.factory, self.settings, self.batch, self.contained = factory, settings, batch, contained
        self.results: dict[str, dict] = {}
        self.crashes: dict[str, Any] = {}
        self.subject = None

    def check(self, name: str, wanted: list[str]) -> tuple[str, str, str | None]:
        """(status, message, the call certified) of check ``name``; ``wanted``: the checks a child may run
        with it, in order. The call is None when no model was made to call."""
        if not self.contained:
            from tensorcad.runtime.certification import run_check

            if self.subject is None:
                self.subject = model_subject(self.factory, self.settings, self.batch)
            check = run_check(self.subject, name)
            return check.status, check.message, self.subject.call_line
        if name not in self.results and name not in self.crashes:
            self._run_child([n for n in wanted[wanted.index(name):] if n not in self.results]
                            if name in wanted else [name])
        if name in self.crashes:
            return "failed", self.crashes[name].message(), None
        result = self.results[name]
        return result["status"], result["message"], result.get("call")

    def _run_child(self, wanted: list[str]) -> None:
        from .contained import Crash, run_contained

        results, crash = run_contained(self.factory, wanted, self.settings.to_json(), self.batch)
        self.results.update(results)
        if crash is None:
            return
        if crash.check is None:
            # No check began (the factory failed, or the child died making the model): so would every retry.
            # The first item says why; the others point to it rather than repeat it.
            first, *rest = [name for name in wanted if name not in results]
            self.crashes[first] = crash
            self.crashes.update({name: Crash(None, f"could not make the model (why: its {first} item)")
                                 for name in rest})
        else:
            self.crashes[crash.check] = crash


def conclude(item: pytest.Item, status: str, message: str, call: str | None = None) -> None:
    """A certificate's (status, message) as the item's outcome: a skip with its reason, a failure with its message.

    ``call``, the call of the model certified (``tensorcad.hf.calls``), is the item's ``tensorcad_call``
    property (JUnit XML carries it) and ends a failure's or a skip's message, as the CLI's table names it."""
    __tracebackhide__ = True  # a failure shows the user's line and the message, not this frame
    if call is not None:
        item.user_properties.append(("tensorcad_call", call))
        message = f"{message}\ncall: {call}"
    item.outcome_message = message
    if status == "skipped":
        raise pytest.skip.Exception(message, _use_item_location=True)
    if status != "passed":
        raise AssertionError(message)


class ModelFactory(pytest.Collector):
    """One factory's items, and the `ModelRun` they share."""

    def collect(self):
        from tensorcad.runtime.certification import MODEL_CHECKS

        self.run: ModelRun | None = None
        for name in MODEL_CHECKS:
            item = ModelCheck.from_parent(self, name=name, callobj=_check_function)
            for marker in certificate_markers(name):
                item.add_marker(marker)
            yield item


def certificate_markers(name: str) -> list[str]:
    """The markers a certificate's item carries: its category (``-m isolation``, ``-m faithful``), tensorcad."""
    from tensorcad.runtime.certification import REGISTRY

    category = REGISTRY[name].category or ("faithful" if name == "faithful" else None)
    return [m for m in (category, "tensorcad") if m]


def _check_function(request, tensorcad_settings, tensorcad_batch):
    run_item(request.node, tensorcad_settings, tensorcad_batch)


def item_settings(config: pytest.Config, settings: Any, factory: str) -> Any:
    collator = config.getini(options.INI_COLLATOR) or None
    try:
        return replace(settings, model=factory, collator=settings.collator or collator)
    except TensorcadError as error:
        raise pytest.UsageError(str(error)) from None


def run_item(item: ModelCheck, settings: Any, batch: Any) -> None:
    """This item's certificate: from the factory's child process (run now if it has not yet), or here."""
    factory: ModelFactory = item.parent
    if factory.run is None:
        factory.run = ModelRun(factory.name, item_settings(item.config, settings, factory.name), batch,
                               item.config.getoption(options.SUBPROCESS_DEST))
    wanted = [i.name for i in item.session.items if isinstance(i, ModelCheck) and i.parent is factory]
    conclude(item, *factory.run.check(item.name, wanted))


# --- the marker: @pytest.mark.tensorcad(model="pkg.module:factory") on a test taking tensorcad_certificate ---

_RUNS: dict[str, ModelRun] = {}


def parametrize_certificates(metafunc: pytest.Metafunc, settings: Any) -> None:
    """A test taking ``tensorcad_certificate`` runs once per certificate: ids and markers as collected items."""
    from tensorcad.runtime.certification import MODEL_CHECKS

    if settings.model is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: tensorcad_certificate needs "
                                "@pytest.mark.tensorcad(model='pkg.module:factory')")
    # The category only: a bare tensorcad mark here would hide the test's own tensorcad(model=...).
    params = [pytest.param(name, id=name, marks=[getattr(pytest.mark, m) for m in certificate_markers(name)
                                                 if m != "tensorcad"]) for name in MODEL_CHECKS]
    metafunc.parametrize("tensorcad_certificate_name", params)


def certificate(request: pytest.FixtureRequest, settings: Any, batch: Any, name: str) -> Any:
    """What ``tensorcad_certificate`` gives a test: a call that runs this certificate and asserts it."""
    import json

    from tensorcad.runtime.certification import MODEL_CHECKS

    settings = item_settings(request.config, settings, settings.model)
    contained = request.config.getoption(options.SUBPROCESS_DEST)
    key = json.dumps([settings.to_json(), request.node.nodeid.split("[")[0], contained], default=str)
    if key not in _RUNS:
        _RUNS[key] = ModelRun(settings.model, settings, batch, contained)
    run = _RUNS[key]

    def assert_certificate() -> None:
        __tracebackhide__ = True
        conclude(request.node, *run.check(name, list(MODEL_CHECKS)))

    return assert_certificate


class ModelCheck(pytest.Function):
    """One certificate of a user's model; a failure prints the certificate's message, not a traceback."""

    outcome_message = ""

    def reportinfo(self):
        return self.path, 0, f"{self.parent.name}::{self.name}"

    def repr_failure(self, excinfo):
        if excinfo.errisinstance((AssertionError, TensorcadError)):
            return f"{self.parent.name}::{self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)
