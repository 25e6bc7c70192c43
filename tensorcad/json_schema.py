"""A strict check of JSON against the small JSON Schema subset tensorcad publishes.

The MCP tools' input schemas and the operating-point schema use only
``type``, ``properties``, ``required``, ``additionalProperties: false``,
``patternProperties``, ``enum``, ``anyOf``, ``items``, ``minimum``/``maximum``
and ``maxLength``. This checks a value against them and raises one
``TensorcadError`` naming the path of the first bad value (``op.packing.mean``),
where a general validator would print many lines. Types are JSON's own with no
coercion: ``true`` is not 1, ``"256"`` is not 256; an integer is a number.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import TensorcadError, join, shown


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _arms(schema: dict) -> list[dict]:
    return schema.get("anyOf", [schema])


def describe(schema: dict) -> str:
    """The types a schema accepts, as a reader says them: ``integer or null``."""
    return " or ".join(str(arm.get("type")) for arm in _arms(schema))


def _type_fits(kind: str, wanted: Any) -> bool:
    # JSON's number includes its integers; nothing else converts.
    return wanted is None or kind == wanted or (kind == "integer" and wanted == "number")


def check(value: Any, schema: dict, path: str) -> None:
    """Raise a TensorcadError at the first place ``value`` breaks ``schema``."""
    kind = json_type(value)
    arms = [arm for arm in _arms(schema) if _type_fits(kind, arm.get("type"))]
    if not arms:
        raise TensorcadError(path, f"expected {describe(schema)}, got {kind} {shown(value)}")
    arm = arms[0]
    if "enum" in arm and value not in arm["enum"]:
        raise TensorcadError(path, f"{shown(value)} is not one of {', '.join(map(str, arm['enum']))}")
    if kind in ("integer", "number"):
        if "minimum" in arm and value < arm["minimum"]:
            raise TensorcadError(path, f"{value} is below {arm['minimum']:,}")
        if "maximum" in arm and value > arm["maximum"]:
            raise TensorcadError(path, f"{value} is above {arm['maximum']:,}")
    if kind == "string" and "maxLength" in arm and len(value) > arm["maxLength"]:
        raise TensorcadError(path, f"{len(value):,} characters; at most {arm['maxLength']:,}")
    if kind == "object" and arm.get("type") == "object":
        _check_object(value, arm, path)
    if kind == "array" and "items" in arm:
        for i, item in enumerate(value):
            check(item, arm["items"], f"{path}[{i}]")


def _check_object(value: dict, schema: dict, path: str) -> None:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for key in value:
        if key in properties or any(re.fullmatch(p, key) for p in patterns):
            continue
        if schema.get("additionalProperties", True) is False:
            listed = ", ".join(properties) or "keys matching " + " or ".join(patterns)
            raise TensorcadError(join(path, key), f"unknown field (fields: {listed})")
    for key in schema.get("required", []):
        if key not in value:
            raise TensorcadError(join(path, key), "missing")
    for key, item in value.items():
        if key in properties:
            check(item, properties[key], join(path, key))
        else:
            for pattern, sub in patterns.items():
                if re.fullmatch(pattern, key):
                    check(item, sub, join(path, key))
