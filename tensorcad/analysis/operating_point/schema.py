"""The operating point's JSON Schema, generated from the engine's own types, and the parser of that JSON.

One schema, two directions of one shape: ``"input"`` (what a client sends:
every field optional, null for the default, ``packing.lengths`` a histogram
``{"length": count}``) and ``"report"`` (what ``OperatingPoint.to_json`` gives:
the fields it always writes required, ``packing.lengths`` the summary it
echoes). Both are strict: ``additionalProperties: false`` at every level.

The properties are the dataclass fields of ``OperatingPoint``, ``Packing`` and
``ContextParallel``, named as their ``to_json`` names them (camelCase), typed
from their annotations; the choices (hardware, dtypes, counts, strategies,
shardings) are the engine's own tuples. A field added to one of those types
appears here without an edit, and ``tests/analysis/test_operating_point_schema.py``
holds the schema to ``to_json`` itself. No torch, no MCP: the editor and the
MCP server both read it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from tensorcad.packing.corpus.histogram import QUANTILES, Lengths
from tensorcad.packing.corpus.lengths import MAX_LENGTH

from ...errors import TensorcadError, join
from ...json_schema import check
from ...packing import STRATEGIES, Packing, packing_of
from ..context_parallel.ranks import DEFAULT_SHARD, SHARDINGS, ContextParallel
from . import BYTES, COUNTS, DEFAULTS, HARDWARE, OperatingPoint, check_budget

DIRECTIONS = ("input", "report")
# Conditions a report holds fixed and does not echo: the sampler's seed and
# FlexAttention's block size (design.masks.BLOCK).
NOT_REPORTED = {OperatingPoint: ("seed", "block")}
# The engine's own choices, by JSON name.
CHOICES: dict[str, tuple] = {"hardware": tuple(HARDWARE), "trainDtype": tuple(BYTES), "serveDtype": tuple(BYTES),
                             "count": COUNTS, "strategy": STRATEGIES, "shard": SHARDINGS}
# What to_json writes only when it differs from the default (so a report need not hold it).
OPTIONAL_IN_REPORT = {"count", "cp", "buffer", "lengths"}
HISTOGRAM_KEY = r"[1-9][0-9]*"  # a whole length >= 1, as `tensorcad lengths` writes its histogram


def json_name(field: str) -> str:
    """``price_per_gpu_hour`` -> ``pricePerGpuHour``, the report's names."""
    head, *rest = field.split("_")
    return head + "".join(word.title() for word in rest)


def histogram_schema() -> dict:
    """A histogram of document lengths as `tensorcad lengths` writes it: ``{"length": documents}``."""
    return {"type": "object", "description": "a histogram of document lengths: length -> documents",
            "patternProperties": {f"^{HISTOGRAM_KEY}$": {"type": "integer", "minimum": 0}},
            "additionalProperties": False}


def _lengths_schema(direction: str) -> dict:
    if direction == "input":
        return histogram_schema()
    summary = ["documents", "mean", "spread", *(name for name, _ in QUANTILES), "max"]
    kinds = {"mean": "number", "spread": "number"}
    return {"type": "object", "properties": {k: {"type": kinds.get(k, "integer")} for k in summary},
            "required": summary, "additionalProperties": False}


def _type_schema(hint: Any, name: str, direction: str) -> dict:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        [arm] = arms
        return {"anyOf": [_type_schema(arm, name, direction), {"type": "null"}]}
    if hint is Lengths:
        return _lengths_schema(direction)
    if dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint, direction)
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}[hint]
    out: dict = {"type": kind}
    if name in CHOICES:
        out["enum"] = list(CHOICES[name])
    return out


def _nullable(schema: dict) -> dict:
    arms = schema.get("anyOf", [schema])
    return schema if any(a.get("type") == "null" for a in arms) else {"anyOf": [schema, {"type": "null"}]}


def _reported_value(schema: dict, name: str) -> dict:
    """In a report a packing's mean and spread are always numbers (lengths fill them in)."""
    if name in ("mean", "spread"):
        return {"type": "number"}
    return schema


def _dataclass_schema(cls: type, direction: str) -> dict:
    hints = typing.get_type_hints(cls)
    skipped = set(NOT_REPORTED.get(cls, ()))
    properties, required = {}, []
    for field in dataclasses.fields(cls):
        if field.name in skipped:
            continue
        name = json_name(field.name)
        schema = _type_schema(hints[field.name], name, direction)
        if direction == "input":
            schema = _nullable(schema)  # absent or null: the default
        else:
            schema = _reported_value(schema, name) if cls is Packing else schema
            if name not in OPTIONAL_IN_REPORT:
                required.append(name)
        properties[name] = schema
    out = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def operating_point_schema(direction: str = "input") -> dict:
    """The operating point's JSON Schema: what a client sends (``input``) or what a report holds (``report``)."""
    if direction not in DIRECTIONS:
        raise TensorcadError("direction", f"unknown direction {direction!r} ({', '.join(DIRECTIONS)})")
    schema = _dataclass_schema(OperatingPoint, direction)
    schema["title"] = "operating point" + (" (as reported)" if direction == "report" else "")
    return schema


@functools.lru_cache(maxsize=1)
def _input_schema() -> dict:
    """The input schema built once: typing.get_type_hints took ~30 ms of every editor request."""
    return operating_point_schema("input")


def histogram_lengths(table: dict, path: str) -> Lengths:
    """The Lengths of a histogram object of the input schema (keys already checked as whole lengths)."""
    longest = len(str(MAX_LENGTH))
    for key in table:  # a length past the limit is refused by its digits, before int() meets 5,000 of them
        if len(key) > longest:
            raise TensorcadError(f"{path}.{key[:20]}...", f"a length of {len(key):,} digits; lengths are at most "
                                                          f"{MAX_LENGTH:,}")
    ordered = sorted((int(k), v) for k, v in table.items())
    return Lengths(tuple(k for k, _ in ordered), tuple(v for _, v in ordered), path)


def operating_point_of(raw: Any, design=None, path: str = "op") -> OperatingPoint:
    """The OperatingPoint that JSON of ``operating_point_schema("input")`` says; errors name ``path.field``.

    Absent or null fields take the engine's defaults (seq: the design's context);
    a packing mean without a spread gets spread 1, as ``--pack`` alone does.
    """
    raw = {} if raw is None else raw
    check(raw, _input_schema(), path)
    given = {k: v for k, v in raw.items() if v is not None}
    packing_raw = {k: v for k, v in (given.get("packing") or {}).items() if v is not None}
    cp_raw = {k: v for k, v in (given.get("cp") or {}).items() if v is not None}
    at = lambda name: join(path, name)  # noqa: E731 - a path under this operating point
    try:
        packing = None
        if "packing" in given:
            lengths = packing_raw.get("lengths")
            packing = packing_of(packing_raw.get("mean"), packing_raw.get("spread"),
                                 mean_path=at("packing.mean"), spread_path=at("packing.spread"),
                                 lengths=None if lengths is None else histogram_lengths(lengths, at("packing.lengths")),
                                 strategy=packing_raw.get("strategy"), lengths_path=at("packing.lengths"),
                                 strategy_path=at("packing.strategy"))
            if packing is None:
                raise TensorcadError(at("packing"), "a packing needs a mean document length or lengths")
            if "buffer" in packing_raw:
                packing = dataclasses.replace(packing, buffer=packing_raw["buffer"])
        cp = None
        if "cp" in given:
            if "size" not in cp_raw:
                raise TensorcadError(at("cp.size"), "context parallelism needs the number of ranks")
            cp = ContextParallel(cp_raw["size"], cp_raw.get("shard", DEFAULT_SHARD))
        op = OperatingPoint(
            seq=given.get("seq", design.context if design is not None else OperatingPoint.seq),
            packing=packing, cp=cp, count=given.get("count", "kept"),
            hardware=given.get("hardware", DEFAULTS["hardware"]), gpus=given.get("gpus", DEFAULTS["gpus"]),
            mfu=given.get("mfu", DEFAULTS["mfu"]), price_per_gpu_hour=given.get("pricePerGpuHour", DEFAULTS["price"]),
            tokens=given.get("tokens"), train_dtype=given.get("trainDtype", DEFAULTS["train_dtype"]),
            serve_dtype=given.get("serveDtype", DEFAULTS["serve_dtype"]),
        )
        if design is not None:
            check_budget(design, op)
        return op
    except TensorcadError as e:
        if e.path.startswith(path + ".") or e.path == path:
            raise
        raise TensorcadError(at(e.path), e.message) from None
