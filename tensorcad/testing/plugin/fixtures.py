"""What the tensorcad_* fixtures are made of: a few lines over `tensorcad.runtime`.

No pytest here: `tensorcad.testing.plugin` turns these into fixtures. The settings, the
batch, the model and the goldens' data are the runtime's own (`runtime.settings`,
`runtime.subject`, `runtime.goldens`), so a fixture, a collected item,
`tensorcad certify` and `tensorcad verify` see the same things.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorcad.runtime.building import (
    DesignModel,
    Settings,
    build_model,
    clear_models,
    draw_batch,
    scaled_design,
    vocab_of,
)

__all__ = ["DesignModel", "Goldens", "Settings", "build_model", "clear_models", "draw_batch",
           "operating_point", "resolve_design", "scaled_design", "vocab_of"]


def resolve_design(name: str | Path, *bases: Path) -> Any:
    """Load a design by preset name or path; a relative path is tried against each base in turn."""
    import tensorcad

    if not isinstance(name, (str, Path)):
        return tensorcad.load(name)  # a Design or a dict
    from tensorcad.errors import TensorcadError

    path = Path(name)
    if not path.is_absolute():
        for base in bases:
            if (base / path).is_file():
                return tensorcad.load(str(base / path))
    try:
        return tensorcad.load(str(name))
    except TensorcadError:
        if path.suffix not in (".json", ".yaml", ".yml") or path.exists():
            raise
        message = _not_found(path, bases)
    raise TensorcadError(str(name), message)  # outside the except: the loader's error is not shown beside it


def _not_found(path: Path, bases: tuple[Path, ...]) -> str:
    """A marker's design= typo: where it was looked for, and the nearest design file there."""
    import difflib
    import itertools

    places = list(dict.fromkeys(base / path for base in bases)) if bases and not path.is_absolute() else [path]
    roots = bases if bases and not path.is_absolute() else (path.parent,)
    near = {str(p.relative_to(root)): p for root in roots
            for p in itertools.islice(root.rglob(f"*{path.suffix}"), 2000)}
    guess = difflib.get_close_matches(str(path), list(near), n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    return f"no such design file (looked for {', '.join(str(p) for p in places)}){hint}"


def operating_point(settings: Settings, design: Any = None) -> Any:
    """OperatingPoint(seq, packing, seed) of these settings for ``design``."""
    return settings.operating_point(design)


class Goldens:
    """The `tensorcad_snapshot` fixture: syrupy with the tensorcad extension.

    ``goldens(kind, name, data)`` compares one golden under ``root/snapshots/<kind>/``;
    ``analysis``, ``rules`` and ``codegen`` compute what a design's golden holds
    (`runtime.goldens.golden_data`, what the collected `golden[...]` items keep)
    and compare it. `pytest --snapshot-update` rewrites them.
    """

    def __init__(self, snapshot: Any, root: Path):
        self.snapshot, self.root = snapshot, Path(root)

    def __call__(self, kind: str, name: str, data: Any) -> None:
        from .snapshot import assert_golden

        assert_golden(self.snapshot, self.root, kind, name, data)

    def _compare(self, kind: str, design: Any, op: Any) -> None:
        import tensorcad
        from tensorcad.runtime.certification import golden_data, golden_name

        design = tensorcad.load(design)
        self(kind, golden_name(design, op), golden_data(kind, design, op))

    def analysis(self, design: Any, op: Any = None) -> None:
        self._compare("analysis", design, op)

    def rules(self, design: Any, op: Any = None) -> None:
        self._compare("rules", design, op)

    def codegen(self, design: Any) -> None:
        self._compare("codegen", design, None)
