"""Reading a design: a preset by name, a .json or .yaml file, or an in-memory dict."""

from __future__ import annotations

import os
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import TensorcadError, did_you_mean, one_line, shown
from .formats import parse_json, parse_yaml
from .model import Design
from .resolve import resolve

PRESETS = Path(__file__).resolve().parent.parent / "presets"
MAX_BYTES = 4 * 1024 * 1024  # a design is a few KB; megabytes mean a wrong file


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.json"))


MAX_SOURCE = 4096  # characters of a preset name or path; past this it is not one


def read(source: str | Path) -> dict[str, Any]:
    """The raw content of a preset or design file, refusing what is not a design."""
    text_source = str(source)
    if len(text_source) > MAX_SOURCE or "\0" in text_source:
        raise TensorcadError("", f"{shown(text_source)} is not a preset or a design file's path "
                                 f"(at most {MAX_SOURCE:,} characters, no NUL)")
    path = Path(text_source)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        if text_source in preset_names():
            path = PRESETS / f"{text_source}.json"
        elif not _exists(path):
            raise TensorcadError(
                "", f"{shown(text_source)} is neither a preset nor a .json/.yaml file"
                f"{did_you_mean(text_source, preset_names())} (presets: {', '.join(preset_names())})"
            )
    where = one_line(str(path))
    data = read_bounded(path, where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TensorcadError(where, "is not UTF-8 text") from None
    return parse_text(text, where, yaml=path.suffix.lower() in (".yaml", ".yml"))


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, say
        return False


def read_bounded(path: Path, where: str, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit`` of them.

    Opened without blocking and checked on the open descriptor, so a FIFO
    cannot hang the read and ``/dev/zero`` (or a link to it), which reports
    size 0, is refused instead of read forever; the cap is enforced while
    reading, not trusted from ``stat``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise TensorcadError(where, "no such file") from None
    except IsADirectoryError:
        raise TensorcadError(where, "is a directory, not a design file") from None
    except OSError as e:
        raise TensorcadError(where, f"cannot be read ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise TensorcadError(where, "is a directory, not a design file")
        if not stat.S_ISREG(info.st_mode):
            raise TensorcadError(where, "is not a regular file (a device, FIFO or socket); a design is a file")
        if info.st_size > limit:
            raise TensorcadError(where, f"{info.st_size:,} bytes; a design file is at most {limit:,}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TensorcadError(where, f"more than {limit:,} bytes; a design file is at most {limit:,}")
        return b"".join(chunks)
    except OSError as e:
        raise TensorcadError(where, f"cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def parse_text(text: str, where: str = "", yaml: bool = False) -> dict[str, Any]:
    if len(text) > MAX_BYTES:
        raise TensorcadError(where, f"{len(text):,} characters; a design is at most {MAX_BYTES:,}")
    # NaN and Infinity parse, and validation refuses them where they sit, naming the path.
    content = parse_yaml(text, where) if yaml else parse_json(text, where)
    if not isinstance(content, dict):
        raise TensorcadError(where, f"a design is an object, not {type(content).__name__}")
    return content


def load(source: str | Path | dict | Design) -> Design:
    """A resolved design from a preset name, a file path or a dict."""
    if isinstance(source, Design):
        return source
    if isinstance(source, dict):
        return resolve(source)
    return _load_file(str(source))


@lru_cache(maxsize=64)
def _load_preset(name: str) -> Design:
    return resolve(read(name))


def _load_file(source: str) -> Design:
    if source in preset_names() and not Path(source).exists():
        return _load_preset(source)
    design = resolve(read(source))
    return design
