"""How the catalog describes a kind: its ports and its params.

A param spec validates one value of a design file and says, in one line of
prose, what it means; the same specs print `tensorcad catalog` and generate
`docs/catalog.md`, so the two cannot drift apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import TensorcadError, join, shown


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()

# Widths, vocabularies and repeats past these are typos, not models: refusing
# them early keeps an absurd design from allocating or counting for minutes.
MAX_WIDTH = 1 << 20
MAX_VOCAB = 1 << 24
MAX_REPEAT = 4096
# A name a design gives one of its parts (a stack's blocks): it reaches generated code as a string.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # int, float, bool, enum, expr, object, shape, ref, windows, names, ropes, floats
    doc: str
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe_type(self) -> str:
        t = " | ".join(repr(c) for c in self.choices) if self.type == "enum" else self.type
        return f"{t} or null" if self.nullable else t

    def describe_default(self) -> str:
        if self.required:
            return "required"
        if self.default is None:
            return "null"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)

    def check(self, value: Any, path: str) -> Any:
        """Return the value if it fits this spec, else raise naming the path."""
        if value is None:
            if self.nullable or self.default is None:
                return None
            raise TensorcadError(path, f"must not be null ({self.describe_type()})")
        kind = self.type
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
                    value = int(value)
                else:
                    raise TensorcadError(path, f"{shown(value)} is not an integer")
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TensorcadError(path, f"{shown(value)} is not a number")
            if not math.isfinite(value):
                raise TensorcadError(path, f"{shown(value)} is not a finite number")
            value = float(value)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise TensorcadError(path, f"{shown(value)} is not true or false")
        elif kind == "enum":
            if value not in self.choices:
                raise TensorcadError(
                    path, f"{shown(value)} is not one of {', '.join(map(repr, self.choices))}"
                )
        elif kind in ("expr", "ref"):
            if not isinstance(value, str):
                raise TensorcadError(path, f"{shown(value)} is not a string")
        elif kind == "object":
            if not isinstance(value, dict):
                raise TensorcadError(path, f"expected an object, got {type(value).__name__}")
        elif kind == "windows":
            if not isinstance(value, list) or not 1 <= len(value) <= 16:
                raise TensorcadError(path, "expected a list of 1 to 16 windows (positive integers or null)")
            for i, w in enumerate(value):
                if w is not None and (isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 24):
                    raise TensorcadError(join(path, i), f"{w!r} is not a window: a positive integer or null")
            value = tuple(value)
        elif kind == "names":
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_REPEAT:
                raise TensorcadError(path, f"expected a list of 1 to {MAX_REPEAT} names")
            for i, name in enumerate(value):
                if not isinstance(name, str) or not NAME.fullmatch(name):
                    raise TensorcadError(join(path, i), f"{shown(name)} is not a name (a letter or _, then "
                                                        "letters, digits and _, at most 64)")
            value = tuple(value)
        elif kind == "ropes":
            if not isinstance(value, list) or not 1 <= len(value) <= 16:
                raise TensorcadError(path, "expected a list of 1 to 16 ropes (objects, or null for none)")
            for i, r in enumerate(value):
                if r is not None and not isinstance(r, dict):
                    raise TensorcadError(join(path, i), f"{shown(r)} is not a rope: an object or null")
            value = tuple(value)
        elif kind == "floats":
            if not isinstance(value, list) or not 1 <= len(value) <= 4096:
                raise TensorcadError(path, "expected a list of 1 to 4096 numbers")
            for i, x in enumerate(value):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
                    raise TensorcadError(join(path, i), f"{shown(x)} is not a positive finite number")
            value = tuple(float(x) for x in value)
        elif kind == "shape":
            if not isinstance(value, list) or not value or len(value) > 4:
                raise TensorcadError(path, "expected a list of 1 to 4 positive integers")
            for i, n in enumerate(value):
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_WIDTH:
                    raise TensorcadError(join(path, i), f"{shown(n)} is not an integer in 1..{MAX_WIDTH}")
            value = tuple(value)
        if kind in ("int", "float"):
            if self.low is not None and value < self.low:
                raise TensorcadError(path, f"{value} is below the minimum {_num(self.low)}")
            if self.high is not None and value > self.high:
                raise TensorcadError(path, f"{value} is above the maximum {_num(self.high)}")
        return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Port:
    name: str
    doc: str
    required: bool = True
    role: str | None = None  # the input role a wire into this port must trace back to


@dataclass(frozen=True)
class Kind:
    name: str
    doc: str
    ports: tuple[Port, ...]
    params: tuple[Param, ...]
    # Composite kinds and attention kernels take further named ports: a
    # composite hands them down by name, a kernel's mask or score reads them.
    extra_ports: bool = False
    extra_doc: str = ""
    counts: str = ""  # prose: how it counts params and FLOPs
    aliases: tuple[str, ...] = field(default=())

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)


def check_params(kind: Kind, raw: Any, path: str) -> dict[str, Any]:
    """Validate a params object against a kind, filling defaults."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TensorcadError(path, f"expected an object, got {type(raw).__name__}")
    known = {p.name for p in kind.params}
    for key in raw:
        if key not in known:
            raise TensorcadError(
                join(path, str(key)),
                f"unknown param {shown(key)} for kind {shown(kind.name)} (params: {', '.join(sorted(known)) or 'none'})",
            )
    out: dict[str, Any] = {}
    for spec in kind.params:
        if spec.name in raw:
            out[spec.name] = spec.check(raw[spec.name], join(path, spec.name))
        elif spec.required:
            raise TensorcadError(join(path, spec.name), f"missing required param for kind {shown(kind.name)}")
        else:
            out[spec.name] = spec.default
    return out
