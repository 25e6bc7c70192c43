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


MAX_NAME = 200  # characters of a design's name


def check_name(value: Any, path: str) -> str:
    """A name a user gives a design (in the file, ``new NAME``, ``import-hf --name``): one printable line.

    1 to 200 characters, no control characters (an ESC or CR would rewrite the
    terminal when a title prints it) and not only spaces. The one rule every
    design name passes, wherever it came from; rich markup in it is printed as
    text (each title escapes it).
    """
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME:
        raise TensorcadError(path, f"must be a string of 1 to {MAX_NAME} characters, got {shown(value)}")
    if not value.isprintable():
        raise TensorcadError(path, f"{shown(value)} holds a control character; a name is one printable line")
    if not value.strip():
        raise TensorcadError(path, f"{shown(value)} is blank; a name says which design it is")
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
