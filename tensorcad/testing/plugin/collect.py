"""Design files as pytest items: `pytest --tensorcad designs/` certifies every design under it.

Each design file becomes the items of the runtime's registry
(`tensorcad.runtime.certification.CERTIFY`: `rules`, `isolation[eager]`, ...,
then the opt-in `export`), ids like `designs/my-model.json::isolation[flex]`,
each carrying its category marker so `-m isolation` selects what gates CI.
The `export` items are deselected unless a `-m` expression is given (`-m export`
runs them alone, `-m tensorcad` with everything else): `deselect_opt_in`.
Items are `pytest.Function`s whose function is the check, so they get
fixtures like any test: the golden items compare through syrupy's `snapshot`
and `--snapshot-update` rewrites them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building import Settings

from .options import COLLECT_DEST, DESIGN_SUFFIXES, INI_CALL, INI_DESIGNS, settings_from_options


def design_roots(config: pytest.Config) -> list[Path]:
    """The directories (or files) whose design files are collected: the option, then the ini key."""
    given = [Path(p) for p in config.getoption(COLLECT_DEST) or []]
    roots = [p if p.is_absolute() else Path(config.invocation_params.dir) / p for p in given]
    roots += [Path(p) for p in config.getini(INI_DESIGNS)]
    return [p.resolve() for p in roots]


def add_design_args(config: pytest.Config) -> None:
    """Make pytest walk the design roots too, unless a path it already walks holds them.

    Roots are the option's first (``design_roots``), so a missing one is named by where it came from."""
    roots = design_roots(config)
    if not roots:
        return
    base = Path(config.invocation_params.dir)
    walked = [(base / a.split("::")[0]).resolve() for a in config.args]
    given = len(config.getoption(COLLECT_DEST) or [])
    for index, root in enumerate(roots):
        if not root.exists():
            raise pytest.UsageError(f"{_source(index < given)}: no such file or directory: {root}")
        # The ini's designs join only a run on the default paths, as tensorcad_models' do:
        # a test named on the command line runs alone.
        named = config.args_source == pytest.Config.ArgsSource.ARGS
        if (index < given or not named) and not any(root == w or w in root.parents for w in walked):
            config.args.append(str(root))


def _source(option: bool) -> str:
    return "--tensorcad" if option else INI_DESIGNS


def is_design_file(file_path: Path, config: pytest.Config) -> bool:
    if file_path.suffix not in DESIGN_SUFFIXES:
        return False
    resolved = file_path.resolve()
    return any(resolved == r or r in resolved.parents for r in design_roots(config))


def collect_file(file_path: Path, parent: pytest.Collector) -> DesignFile | None:
    if not is_design_file(file_path, parent.config):
        return None
    return DesignFile.from_parent(parent, path=file_path)


def base_settings(config: pytest.Config) -> Settings:
    """The settings the command line and the ini give (the defaults unless a --tensorcad-* option is set)."""
    call = {"call": config.getini(INI_CALL).strip()} if config.getini(INI_CALL).strip() else {}
    try:
        return Settings(**settings_from_options(config.getoption), **call)
    except TensorcadError as error:
        raise pytest.UsageError(str(error)) from None


class DesignFile(pytest.File):
    """One design file: its checks, in order."""

    def collect(self):
        from .fixtures import resolve_design

        try:
            design = resolve_design(str(self.path))
        except TensorcadError as error:
            raise self.CollectError(f"{self.path.name}: {error}") from None
        self.design = design
        from tensorcad.runtime.certification import CERTIFY, OPT_IN, REGISTRY

        for name in CERTIFY + OPT_IN:
            item = DesignCheck.from_parent(self, name=name, callobj=_function(name))
            if REGISTRY[name].category is not None:
                item.add_marker(REGISTRY[name].category)
            item.add_marker("tensorcad")
            yield item


def _function(name: str):
    # The function a check item runs: its signature asks for the fixtures it needs.
    if name.startswith("golden"):
        def tensorcad_golden_check(request):
            # syrupy's `snapshot` fixture asked for here, not in the signature: without syrupy a golden item
            # fails with the one line naming the extra, not pytest's "fixture 'snapshot' not found" listing.
            from .extras import require

            require("syrupy")
            run_item(request.node, request.getfixturevalue("snapshot"))

        return tensorcad_golden_check

    def tensorcad_check(request):
        run_item(request.node, None)

    return tensorcad_check


def run_item(item: DesignCheck, snapshot: Any) -> None:
    """The registry's check of this item's name, on the design at the command line's settings.

    A failed check fails the item with its message; a skip skips it with the reason; a
    golden's difference is syrupy's own assertion (its diff, and --snapshot-update); a
    crash is an error with its traceback.
    """
    from tensorcad.runtime.building import Subject
    from tensorcad.runtime.certification import REGISTRY, NotApplicable, Skipped

    from .snapshot import assert_golden

    root = item.config.rootpath

    def golden(kind: str, name: str, data: Any) -> None:
        assert_golden(snapshot, root, kind, name, data)

    subject = Subject(item.parent.design, base_settings(item.config), golden=golden)
    try:
        with warnings.catch_warnings():
            # torch's advice to compile the uncompiled flex reference, and its jit deprecation from inside
            # its own compile path: noise in a downstream run, which filters only its own warnings.
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            warnings.filterwarnings("ignore", message="`torch.jit.script_method` is deprecated")
            result = REGISTRY[item.name].run(subject)
    except (Skipped, NotApplicable) as skip:
        result = None
        reason = str(skip)
    if result is None or result.skipped:
        # Reported at the design's item, not at this line (as a skip marker would be).
        raise pytest.skip.Exception(reason if result is None else result.message, _use_item_location=True)
    item.outcome_message = result.message
    if not result.passed:
        raise AssertionError(result.message)


class DesignCheck(pytest.Function):
    """A check of one design; a failure prints the check's own message, not a traceback."""

    outcome_message = ""

    def reportinfo(self):
        return self.path, 0, f"{self.path.name}::{self.name}"

    def repr_failure(self, excinfo):
        if self.name.startswith("golden") and excinfo.errisinstance(AssertionError):
            return self._repr_failure_py(excinfo, style="short")  # syrupy's diff of the golden
        if excinfo.errisinstance((AssertionError, TensorcadError)):
            return f"{self.parent.name}::{self.name}: {excinfo.value}"
        from .extras import missing_extra

        missing = missing_extra(excinfo.value)
        if missing is not None:
            return f"{self.parent.name}::{self.name}: {missing}"
        return super().repr_failure(excinfo)


def deselect_opt_in(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``-m``, the design items of the opt-in checks (``export``) are deselected, and counted so."""
    if config.option.markexpr:
        return  # pytest's own -m decides: `-m export` keeps them, `-m isolation` drops them
    dropped = [i for i in items if isinstance(i, DesignCheck) and i.get_closest_marker("export") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]
