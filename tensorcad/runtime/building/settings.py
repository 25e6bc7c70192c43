"""The settings a design is certified at, and their one set of defaults.

`tensorcad verify`, `tensorcad certify`, the pytest plugin's options, markers
and collected items all start from `DEFAULTS` and make a `Settings`, so equal
inputs give equal figures everywhere. No torch here: the plugin reads these
defaults when pytest registers its options.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from tensorcad.errors import TensorcadError

DEFAULTS: dict[str, Any] = {
    "seq": 512,  # tokens a row, unless the scaled design's context is shorter
    "pack": 96.0,  # mean document length, tokens
    "spread": 1.0,  # coefficient of variation of document length (0: fixed)
    "params": 1_000_000,  # a design is scaled to about this many parameters before it is built
    "seed": 0,  # of weights, ids, packings and perturbations
    "forms": ("eager", "flex"),  # the forms a pytest model fixture is parametrized over
    "rows": 2,  # rows of the batch the model runs (isolation perturbs them)
    "block_rows": 256,  # engine rows whose masks block-counts and kept-scores rebuild and count
    "sample": 24,  # documents of the batch perturbed at most; more are sampled, seeded
}

FORM_NAMES = ("eager", "flex")
# How the certificates ask their questions (`certification.methods`): a few passes for all the documents
# (group testing, padded batches, weighted backward passes), or one pass a document, as before issue 29.
METHODS = ("grouped", "each")

# The settings a `tensorcad` pytest marker may set.
MARKER_KEYS = ("design", "seq", "pack", "spread", "params", "seed", "forms", "rows", "sample", "model", "collator",
               "call")
DEFAULT_CALL = "trainer"  # tensorcad.hf.calls.DEFAULT_CALL, spelled here so the plugin's import stays light


@dataclass(frozen=True)
class Settings:
    """One certification's operating point and model."""

    design: str | None = None  # the pytest marker's design (a preset name or a path)
    seq: int | None = None  # None: 512, or the scaled design's context when that is shorter
    pack: float | None = DEFAULTS["pack"]  # None: packing off, one document a row
    spread: float = DEFAULTS["spread"]
    params: int = DEFAULTS["params"]
    seed: int = DEFAULTS["seed"]
    forms: tuple[str, ...] = DEFAULTS["forms"]
    rows: int = DEFAULTS["rows"]
    block_rows: int = DEFAULTS["block_rows"]
    sample: int | None = DEFAULTS["sample"]
    model: str | None = None  # a user's model factory, "pkg.module:factory" (the marker's or tensorcad_models')
    collator: str | None = None  # a collator factory, "pkg.module:factory": the batch it packs is the one checked
    method: str = METHODS[0]  # how the certificates run: METHODS
    call: str = DEFAULT_CALL  # how the user's loop calls a Hugging Face model (tensorcad.hf.calls: trainer, plain)

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
        if not self.seed < 2**63:  # torch.manual_seed's range
            raise TensorcadError("tensorcad.seed", f"expected an integer in 0..2**63 - 1, got {self.seed!r}")
        if not self.rows <= 64:
            raise TensorcadError("tensorcad.rows", f"expected an integer in 1..64, got {self.rows!r}")
        from tensorcad.packing import check_mean, check_spread

        if self.pack is not None:
            object.__setattr__(self, "pack", check_mean(self.pack, "tensorcad.pack"))
        object.__setattr__(self, "spread", check_spread(self.spread, "tensorcad.spread"))
        forms = (self.forms,) if isinstance(self.forms, str) else tuple(self.forms)
        for form in forms:
            if form not in FORM_NAMES:
                raise TensorcadError("tensorcad.forms", f"unknown form {form!r} ({', '.join(FORM_NAMES)})")
        if not forms:
            raise TensorcadError("tensorcad.forms", "at least one form")
        object.__setattr__(self, "forms", forms)
        for name in ("model", "collator"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or value.count(":") != 1):
                raise TensorcadError(f"tensorcad.{name}", f"expected 'pkg.module:factory', got {value!r}")
        from tensorcad.hf.calls import check_call

        check_call(self.call, "tensorcad.call")
        if self.method not in METHODS:
            raise TensorcadError("tensorcad.method", f"unknown method {self.method!r} ({', '.join(METHODS)})")

    def with_marker(self, kwargs: Mapping[str, Any]) -> Settings:
        unknown = sorted(set(kwargs) - set(MARKER_KEYS))
        if unknown:
            raise TensorcadError(
                "tensorcad", f"unknown marker keyword {unknown[0]!r} (keywords: {', '.join(MARKER_KEYS)})"
            )
        return replace(self, **kwargs)

    def for_design(self, design: Any) -> Settings:
        """These settings with the sequence length fixed for ``design``.

        Unless one is given, rows are 512 tokens, or the scaled design's context when
        that is shorter: a generated model holds no more positions than its context.
        """
        if self.seq is not None:
            return self
        if design is None:
            return replace(self, seq=DEFAULTS["seq"])
        # Scaling caps a context at 1,024 tokens, above the default: the design's own decides.
        return replace(self, seq=min(DEFAULTS["seq"], design.context))

    @property
    def packing(self) -> Any:
        """The Packing drawn from (None when packing is off)."""
        from tensorcad.packing import Packing

        return None if self.pack is None else Packing(self.pack, self.spread)

    def operating_point(self, design: Any = None) -> Any:
        """OperatingPoint(seq, packing, seed) for ``design``: what the engine's checks count at."""
        from tensorcad.analysis.operating_point import OperatingPoint

        settings = self.for_design(design)
        return OperatingPoint(seq=settings.seq, packing=settings.packing, seed=settings.seed)

    def to_json(self) -> dict:
        # A user's model and collator only when named, the method and the call only when not the default: a
        # design's settings read as they always did.
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.name in ("model", "collator") and getattr(self, f.name) is None)
                and not (f.name == "method" and self.method == METHODS[0])
                and not (f.name == "call" and self.call == DEFAULT_CALL)}
