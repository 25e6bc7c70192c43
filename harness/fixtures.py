"""What the tensorcad_* fixtures and the collected checks are made of, as plain functions.

No pytest here: `harness.plugin` turns these into fixtures, `harness.checks`
into checks `tensorcad certify` runs without pytest. torch is imported only
by the functions that build a batch or a model.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from tensorcad.errors import TensorcadError

from .options import DEFAULTS, FORM_NAMES, MARKER_KEYS


@dataclass(frozen=True)
class Settings:
    """One test's operating point and model: options first, then its `tensorcad` marker."""

    design: str | None = None
    seq: int | None = None  # None: 512, or the design's context when that is shorter
    pack: float | None = DEFAULTS["pack"]
    spread: float = DEFAULTS["spread"]
    params: int = DEFAULTS["params"]
    seed: int = DEFAULTS["seed"]
    forms: tuple[str, ...] = DEFAULTS["forms"]
    rows: int = DEFAULTS["rows"]
    block_rows: int = DEFAULTS["block_rows"]
    sample: int | None = DEFAULTS["sample"]

    def __post_init__(self) -> None:
        def integer(name: str, low: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise TensorcadError(f"tensorcad.{name}", f"expected an integer >= {low}, got {value!r}")

        for name, low in (("params", 1), ("seed", 0), ("rows", 1), ("block_rows", 1)):
            integer(name, low)
        for name in ("seq", "sample"):
            if getattr(self, name) is not None:
                integer(name, 1)
        if self.pack is not None:
            from tensorcad.packing import check_mean

            object.__setattr__(self, "pack", check_mean(self.pack, "tensorcad.pack"))
        from tensorcad.packing import check_spread

        object.__setattr__(self, "spread", check_spread(self.spread, "tensorcad.spread"))
        forms = (self.forms,) if isinstance(self.forms, str) else tuple(self.forms)
        for form in forms:
            if form not in FORM_NAMES:
                raise TensorcadError("tensorcad.forms", f"unknown form {form!r} ({', '.join(FORM_NAMES)})")
        if not forms:
            raise TensorcadError("tensorcad.forms", "at least one form")
        object.__setattr__(self, "forms", forms)

    def with_marker(self, kwargs: Mapping[str, Any]) -> Settings:
        unknown = sorted(set(kwargs) - set(MARKER_KEYS))
        if unknown:
            raise TensorcadError(
                "tensorcad", f"unknown marker keyword {unknown[0]!r} (keywords: {', '.join(MARKER_KEYS)})"
            )
        return replace(self, **kwargs)

    def for_design(self, design: Any) -> Settings:
        """These settings with the sequence length fixed for ``design``.

        Unless one is given, rows are 512 tokens, or the design's context when
        that is shorter: a generated model holds no more positions than its context.
        """
        if self.seq is not None:
            return self
        return replace(self, seq=min(DEFAULTS["seq"], design.context) if design is not None else DEFAULTS["seq"])

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def resolve_design(name: str | Path, *bases: Path) -> Any:
    """Load a design by preset name or path; a relative path is tried against each base in turn."""
    import tensorcad

    if not isinstance(name, (str, Path)):
        return tensorcad.load(name)  # a Design or a dict
    path = Path(name)
    if not path.is_absolute():
        for base in bases:
            if (base / path).is_file():
                return tensorcad.load(str(base / path))
    return tensorcad.load(str(name))


def operating_point(settings: Settings, design: Any = None) -> Any:
    from tensorcad.analysis.operating_point import OperatingPoint
    from tensorcad.packing import Packing

    settings = settings.for_design(design)
    packing = None if settings.pack is None else Packing(settings.pack, settings.spread)
    return OperatingPoint(seq=settings.seq, packing=packing, seed=settings.seed)


def vocab_of(design: Any) -> int:
    """The vocabulary of the embedding that reads the design's token input."""
    tokens = design.input("tokens")
    for node in design.nodes:
        if node.kind == "embedding" and (tokens is None or tokens.name in node.sources.values()):
            return int(node.params["vocab"])
    raise TensorcadError("nodes", "the design has no embedding of its tokens to draw ids for")


def draw_batch(design: Any, settings: Settings) -> tuple[Any, Any, Any]:
    """(ids, documents, positions), int64 torch tensors (rows, seq).

    Documents and positions come from `tensorcad.packing.draw`, the function the
    engine counts with, so a row a test perturbs is a row the analysis measured.
    With packing off each row is one document. Ids are uniform over the vocabulary,
    from a generator seeded with the settings' seed.
    """
    import numpy as np
    import torch

    from tensorcad.packing import draw, positions_of

    settings = settings.for_design(design)
    if settings.pack is None:
        documents = np.zeros((settings.rows, settings.seq), dtype=np.int64)
        positions = positions_of(documents)
    else:
        documents, positions = draw(settings.rows, settings.seq, settings.pack, settings.spread, settings.seed)
    generator = torch.Generator().manual_seed(settings.seed)
    ids = torch.randint(0, vocab_of(design), (settings.rows, settings.seq), generator=generator)
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


class DesignModel:
    """A generated model called as ``model_fn(ids, documents, positions)``.

    Passes only the tensors the design has inputs for, and forwards ``form``
    and ``config`` so `assert_isolated(..., forms=...)` can switch forms.
    """

    def __init__(self, module: Any, design: Any):
        self.module = module
        self.design = design  # the scaled design the module was generated from
        self._documents = design.input("documents") is not None
        self._positions = design.input("positions") is not None

    @property
    def form(self) -> str:
        return self.module.form

    @form.setter
    def form(self, value: str) -> None:
        self.module.form = value

    @property
    def config(self) -> Any:
        return getattr(self.module, "config", None)

    def __call__(self, ids: Any, documents: Any = None, positions: Any = None) -> Any:
        kwargs = {}
        if self._documents:
            kwargs["documents"] = documents
        if self._positions:
            kwargs["positions"] = positions
        return self.module(ids, **kwargs)

    def __repr__(self) -> str:
        return f"DesignModel({type(self.module).__name__}, form={self.form!r})"


_MODELS: dict[tuple[str, int, int], Any] = {}


def _fingerprint(design: Any) -> str:
    return json.dumps(design.to_dict(), sort_keys=True, default=str)


def scaled_design(design: Any, params: int) -> Any:
    """The design scaled to about ``params`` parameters, keeping its structure (runtime.scale)."""
    from tensorcad.runtime.scaling import scale

    return scale(design, params=params)


def build_model(design: Any, settings: Settings, form: str = "flex") -> DesignModel:
    """The design scaled to ``settings.params``, generated, built, seeded, in eval mode, in ``form``.

    Built once per process for each (design, params, seed) and shared: building
    dominates a check's time, and the form is a switch on the same weights.
    """
    key = (_fingerprint(design), settings.params, settings.seed)
    model = _MODELS.get(key)
    if model is None:
        from tensorcad.runtime.building import build

        small = scaled_design(design, settings.params)
        module = build(small, form=form, seed=settings.seed)
        module.eval()
        model = _MODELS[key] = DesignModel(module, small)
    model.form = form
    return model


def clear_models() -> None:
    _MODELS.clear()


class Goldens:
    """The `tensorcad_snapshot` fixture: syrupy with the tensorcad extension.

    ``goldens(kind, name, data)`` compares one golden under ``root/snapshots/<kind>/``;
    ``analysis``, ``rules`` and ``codegen`` compute what a design's golden holds
    (the same data the collected `golden[...]` items keep) and compare it.
    `pytest --snapshot-update` rewrites them.
    """

    def __init__(self, snapshot: Any, root: Path):
        self.snapshot, self.root = snapshot, Path(root)

    def __call__(self, kind: str, name: str, data: Any) -> None:
        from .snapshot import assert_golden

        assert_golden(self.snapshot, self.root, kind, name, data)

    def _design(self, design: Any) -> Any:
        import tensorcad

        return tensorcad.load(design)

    def analysis(self, design: Any, op: Any = None) -> None:
        from .checks import golden_data

        design = self._design(design)
        self("analysis", design.name, golden_data("analysis", design, op))

    def rules(self, design: Any, op: Any = None) -> None:
        from .checks import golden_data

        design = self._design(design)
        self("rules", design.name, golden_data("rules", design, op))

    def codegen(self, design: Any) -> None:
        from .checks import golden_data

        design = self._design(design)
        self("codegen", design.name, golden_data("codegen", design, None))
