"""tensorcad's pytest plugin (entry point `pytest11`): options, markers, hooks and fixtures.

Thin on purpose: every hook and fixture is one call into a plain module
(`options`, `collect`, `fixtures`, `snapshot`). Loading it imports pytest, the
standard library and tensorcad's lazy faces only (neither torch, nor syrupy,
nor the engine), so a project that never uses it pays nothing, and one without
the plugin's extras still runs; a feature used without what it needs fails in
one line naming the extra (`extras`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import options

# Goldens compare with a bare `assert`; rewritten, a failure shows syrupy's diff.
pytest.register_assert_rewrite("tensorcad.testing.plugin.snapshot")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in options.MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}" if name != "tensorcad" else doc)
    if (options.settings_from_options(config.getoption) != options.default_settings()
            or config.getini(options.INI_CALL).strip()):
        from .collect import base_settings

        base_settings(config)  # a bad --tensorcad-* (or tensorcad_call) value is a usage error now, not at each test
    if config.getini(options.INI_DESIGNS) or config.getoption(options.COLLECT_DEST):
        from .collect import add_design_args

        add_design_args(config)
    from .models import add_model_args

    add_model_args(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    # Said once at the top where a session collects designs or models and lacks what they need; each item
    # then fails with the same line. A session that never uses the plugin hears nothing.
    from .extras import missing_for

    used = bool(config.getini(options.INI_DESIGNS) or config.getoption(options.COLLECT_DEST)
                or config.getini(options.INI_MODELS))
    return missing_for(used)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if not item.config.getoption(options.GUARD_DEST):
        return (yield)
    from ..integrations.guarding import guarding

    with guarding():
        return (yield)


def pytest_sessionstart(session: pytest.Session) -> None:
    from .snapshot import forget_goldens_seen

    forget_goldens_seen()  # "two goldens for one name" is a question of one run


def pytest_sessionfinish(session: pytest.Session) -> None:
    from .worker_exit import finish_quietly

    finish_quietly(session.config)  # xdist sends the worker's results after this hook


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path == parent.config.inipath:
        from .models import collect_file as collect_models

        return collect_models(file_path, parent)
    if file_path.suffix not in options.DESIGN_SUFFIXES:
        return None
    from .collect import collect_file

    return collect_file(file_path, parent)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.option.markexpr and any(i.get_closest_marker("export") for i in items):
        from .collect import deselect_opt_in

        deselect_opt_in(config, items)  # a design's `export` item runs under -m export


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # tensorcad_certificate runs once per certificate of the marker's model.
    if "tensorcad_certificate_name" in metafunc.fixturenames:
        from .models import parametrize_certificates

        parametrize_certificates(metafunc, _settings(metafunc.config, metafunc.definition))
    # tensorcad_model runs once per form: the marker's forms, else --tensorcad-forms.
    if "tensorcad_form" in metafunc.fixturenames:
        settings = _settings(metafunc.config, metafunc.definition)
        if settings.model is not None:
            return  # a user's model has no forms to switch
        forms = settings.forms
        metafunc.parametrize("tensorcad_form", forms, ids=list(forms))


def _settings(config: pytest.Config, node: pytest.Item):
    from tensorcad.errors import TensorcadError

    from .collect import base_settings

    marker = node.get_closest_marker("tensorcad")
    if marker is not None and marker.args:
        raise pytest.UsageError(f"{node.nodeid}: the tensorcad marker takes keywords only")
    try:
        return base_settings(config).with_marker(marker.kwargs if marker else {})
    except TensorcadError as error:
        raise pytest.UsageError(f"{node.nodeid}: {error}") from None


@pytest.fixture
def tensorcad_settings(request: pytest.FixtureRequest):
    """The operating point and scale of this test: --tensorcad-* options, then its marker."""
    return _settings(request.config, request.node)


@pytest.fixture
def tensorcad_design(request: pytest.FixtureRequest, tensorcad_settings):
    """The marker's design, loaded (a preset name, or a path beside the test file or under rootdir)."""
    from .fixtures import resolve_design

    if tensorcad_settings.design is None:
        raise pytest.UsageError(f"{request.node.nodeid}: mark it @pytest.mark.tensorcad(design=...)")
    from tensorcad.errors import TensorcadError

    try:
        return resolve_design(tensorcad_settings.design, request.path.parent, request.config.rootpath)
    except TensorcadError as error:  # a typo in the marker's design=: one line, not the loader's traceback
        message = f"tensorcad(design=...): {error}"
    pytest.fail(message, pytrace=False)


@pytest.fixture
def tensorcad_operating_point(request: pytest.FixtureRequest, tensorcad_settings):
    """OperatingPoint(seq, packing=Packing(pack, spread)) of this test (packing off when pack=None)."""
    from .fixtures import operating_point

    design = request.getfixturevalue("tensorcad_design") if tensorcad_settings.design else None
    return operating_point(tensorcad_settings, design)


@pytest.fixture
def tensorcad_batch(request: pytest.FixtureRequest, tensorcad_settings):
    """(ids, documents, positions), torch int64 (rows, seq), drawn by `tensorcad.packing.draw`.

    For the marker's design, or its ``model=`` (then ids over the model's vocabulary, or
    packed by its ``collator=``). A project may define its own ``tensorcad_batch``: the
    collected model items check that batch. For a collected model item it is None (drawn
    where the model runs, in its child process).
    """
    from .fixtures import draw_batch, scaled_design
    from .models import ModelCheck, marker_subject

    if isinstance(request.node, ModelCheck) or "tensorcad_certificate_name" in request.fixturenames:
        return None
    if tensorcad_settings.model is not None:
        return marker_subject(request.config, tensorcad_settings).batch
    design = request.getfixturevalue("tensorcad_design")
    return draw_batch(scaled_design(design, tensorcad_settings.params), tensorcad_settings)


@pytest.fixture
def tensorcad_form(tensorcad_settings) -> str:
    """The form tensorcad_model is built in; parametrized over the marker's forms."""
    return tensorcad_settings.forms[0]


@pytest.fixture
def tensorcad_model(request: pytest.FixtureRequest, tensorcad_settings, tensorcad_form):
    """The generated model, scaled, built, seeded, in eval mode and in this test's form.

    Called as ``model(ids, documents, positions)``; built once a session for each
    design, scale and seed, and shared (the form is a switch on the same weights).
    With the marker's ``model="pkg.module:factory"``: what that factory makes, adapted.
    """
    from .fixtures import build_model
    from .models import marker_subject

    if tensorcad_settings.model is not None:
        return marker_subject(request.config, tensorcad_settings).model_fn
    design = request.getfixturevalue("tensorcad_design")
    return build_model(design, tensorcad_settings, tensorcad_form)


@pytest.fixture
def tensorcad_certificate(request: pytest.FixtureRequest, tensorcad_settings, tensorcad_batch,
                          tensorcad_certificate_name):
    """Call it to run one certificate of the marker's ``model=``; the test runs once per certificate.

    ``@pytest.mark.tensorcad(model="pkg.module:factory")`` on ``def test_x(tensorcad_certificate):
    tensorcad_certificate()`` gives ``test_x[isolation]``, ``test_x[isolation[boundaries]]``,
    ``test_x[faithful]`` and ``test_x[isolation[gradients]]``, marked as the collected items are,
    run in a child process unless ``--no-tensorcad-subprocess``.
    """
    from .models import certificate

    return certificate(request, tensorcad_settings, tensorcad_batch, tensorcad_certificate_name)


@pytest.fixture
def tensorcad_snapshot(request: pytest.FixtureRequest):
    """Goldens under the project's snapshots/: ``tensorcad_snapshot.analysis(design, op)`` etc."""
    from .extras import MissingExtra, require
    from .fixtures import Goldens

    try:
        require("syrupy")
    except MissingExtra as missing:
        pytest.fail(str(missing), pytrace=False)
    return Goldens(request.getfixturevalue("snapshot"), request.config.rootpath)
