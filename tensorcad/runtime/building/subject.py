"""The subject of every check: a design scaled, built, seeded, with its batch and operating point.

`tensorcad verify`, `tensorcad certify`, the pytest plugin's fixtures and its
collected items make one `Subject` per design and settings and hand it to the
checks of `runtime.certification`. Its pieces are built on first use, so a check
that needs no model (rules, closed forms, goldens) builds none.

The model is read only through the contract the generated module states
(`Model.masks`, `Model.recording_attend`, `Model.compile_pieces`,
`Model.runtime_paths`), never through its module's globals.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError

from .settings import Settings

# A golden comparer: (kind, name, data) -> None, raising AssertionError on a difference.
Golden = Callable[[str, str, Any], None]


def vocab_of(design: Design) -> int:
    """The vocabulary of the embedding that reads the design's token input."""
    tokens = design.input("tokens")
    for node in design.nodes:
        if node.kind == "embedding" and (tokens is None or tokens.name in node.sources.values()):
            return int(node.params["vocab"])
    raise TensorcadError("nodes", "the design has no embedding of its tokens to draw ids for")


def draw_batch(design: Design, settings: Settings) -> tuple[Any, Any, Any]:
    """(ids, documents, positions), int64 torch tensors (rows, seq), for ``design``.

    Documents and positions come from `tensorcad.packing.draw`, the function the
    engine counts with, so a row a check perturbs is a row the analysis measured.
    """
    return drawn_batch(settings.for_design(design), vocab_of(design))


def drawn_batch(settings: Settings, vocab: int) -> tuple[Any, Any, Any]:
    """(ids, documents, positions), int64 (rows, seq): the engine's packing, ids uniform over ``vocab``.

    With packing off each row is one document. Ids come from a generator seeded
    with the settings' seed. A user's model (``model_subject``) draws here too.
    """
    import numpy as np
    import torch

    from tensorcad.packing import draw, positions_of

    settings = settings.for_design(None)  # a no-op once the seq is fixed
    if settings.pack is None:
        documents = np.zeros((settings.rows, settings.seq), dtype=np.int64)
        positions = positions_of(documents)
    else:
        documents, positions = draw(settings.rows, settings.seq, settings.pack, settings.spread, settings.seed)
    generator = torch.Generator().manual_seed(settings.seed)
    ids = torch.randint(0, vocab, (settings.rows, settings.seq), generator=generator)
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


class DesignModel:
    """A generated model called as ``model_fn(ids, documents, positions)``.

    Passes only the tensors the design has inputs for, and forwards ``form``
    and ``config`` so `assert_isolated(..., forms=...)` can switch forms.
    """

    def __init__(self, module: Any, design: Design):
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


_MODELS: dict[tuple[str, int, int], DesignModel] = {}


def _fingerprint(design: Design) -> str:
    return json.dumps(design.to_dict(), sort_keys=True, default=str)


def scaled_design(design: Design, params: int) -> Design:
    """The design scaled to about ``params`` parameters, keeping its structure (runtime.scale)."""
    from .scaling import scale

    return scale(design, params=params)


def build_model(design: Design, settings: Settings, form: str = "flex") -> DesignModel:
    """The design scaled to ``settings.params``, generated, built, seeded, in eval mode, in ``form``.

    Built once per process for each (design, params, seed) and shared: building
    dominates a check's time, and the form is a switch on the same weights.
    """
    key = (_fingerprint(design), settings.params, settings.seed)
    model = _MODELS.get(key)
    if model is None:
        from .generated import build

        small = scaled_design(design, settings.params)
        module = build(small, form=form, seed=settings.seed)
        module.eval()
        model = _MODELS[key] = DesignModel(module, small)
    model.form = form
    return model


def clear_models() -> None:
    _MODELS.clear()


def set_compile(module: Any, compile: bool) -> None:
    """Whether the model's FlexAttention pieces go through torch.compile (its `compile_pieces`).

    Uncompiled by default in the checks: on CPU compiling takes longer than every
    check together, and computes the same thing.
    """
    pieces = getattr(type(module), "compile_pieces", None)
    if pieces is not None:
        pieces.update(flex_attention=compile, create_block_mask=compile)


@dataclass
class Subject:
    """One design under check, at one set of settings: what every check reads."""

    design: Design  # as given: rules, closed forms and goldens read it
    settings: Settings = field(default_factory=Settings)
    golden: Golden | None = None  # compares a golden; None: the golden checks skip
    compile: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.design, Design):
            self.design = load(self.design)
        self.settings = self.settings.for_design(self.design)

    @property
    def op(self) -> Any:
        """The operating point the engine's figures are counted at."""
        return self.settings.operating_point(self.design)

    @property
    def packing(self) -> Any:
        return self.settings.packing

    @functools.cached_property
    def small(self) -> Design:
        """The design scaled to about ``settings.params`` parameters (what the model is built from)."""
        return scaled_design(self.design, self.settings.params)

    def check_seq(self) -> None:
        """Refuse, as bad input, rows longer than the scaled model holds positions for."""
        context = self.small.context
        if not 1 <= self.settings.seq <= context:
            raise TensorcadError("seq", f"expected tokens a row in 1..{context:,} (the scaled "
                                        f"design's context), got {self.settings.seq!r}")

    def model(self, form: str = "flex") -> DesignModel:
        """The built model in ``form`` (one set of weights for both forms)."""
        model = build_model(self.design, self.settings, form)
        set_compile(model.module, self.compile)
        return model

    @functools.cached_property
    def batch(self) -> tuple[Any, Any, Any]:
        """(ids, documents, positions) the model runs on: the engine's packing."""
        self.check_seq()
        return draw_batch(self.small, self.settings)

    @property
    def inputs(self) -> dict[str, Any]:
        """The forward's keyword arguments: ids, and documents and positions where the design takes them."""
        return self._inputs(self.batch)

    @functools.cached_property
    def mask_inputs(self) -> dict[str, Any]:
        """A one-row batch the model shows its masks on: a mask is then made anew over any rows,
        so it may be compared at a length longer than the scaled model holds."""
        from dataclasses import replace

        seq = min(self.settings.seq, self.small.context)
        return self._inputs(draw_batch(self.small, replace(self.settings, seq=seq, rows=1)))

    def _inputs(self, batch: tuple[Any, Any, Any]) -> dict[str, Any]:
        ids, documents, positions = batch
        inputs = {"ids": ids}
        if self.small.input("documents") is not None:
            inputs["documents"] = documents
        if self.small.input("positions") is not None:
            inputs["positions"] = positions
        return inputs

    @property
    def vocab(self) -> int:
        return vocab_of(self.small)
