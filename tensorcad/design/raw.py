"""Checks of a design's raw JSON values, before they are resolved: ids, objects, keys, kinds.

Each raises `TensorcadError` naming the path of the bad value.
"""

from __future__ import annotations

from typing import Any

from ..errors import TensorcadError, did_you_mean, join, shown
from .catalog import KINDS

MAX_ID = 64


def check_id(value: Any, path: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TensorcadError(path, f"{what} must be a non-empty string, got {shown(value)}")
    if len(value) > MAX_ID or not value.isprintable():
        raise TensorcadError(path, f"{what} {shown(value, MAX_ID)} must be at most {MAX_ID} printable characters")
    return value


def as_object(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise TensorcadError(path, f"expected an object, got {type(value).__name__}")
    return value


def no_unknown(obj: dict, allowed: tuple[str, ...], path: str, what: str) -> None:
    for key in obj:
        if key not in allowed:
            raise TensorcadError(join(path, str(key)), f"unknown key {shown(key)} in {what} (keys: {', '.join(allowed)})")


def check_kind(value: Any, path: str) -> None:
    """A kind is a string the catalog lists (a list or an object is refused before any lookup can fail)."""
    if not isinstance(value, str) or value not in KINDS:
        near = did_you_mean(value, KINDS) if isinstance(value, str) else ""
        raise TensorcadError(path, f"unknown kind {shown(value)}{near} (kinds: {', '.join(KINDS)})")
