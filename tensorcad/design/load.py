"""Reading a design: a preset by name, a .json or .yaml file, or an in-memory dict."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import TensorcadError, did_you_mean
from .model import Design
from .resolve import resolve

PRESETS = Path(__file__).resolve().parent.parent / "presets"
MAX_BYTES = 4 * 1024 * 1024  # a design is a few KB; megabytes mean a wrong file


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.json"))


def read(source: str | Path) -> dict[str, Any]:
    """The raw content of a preset or design file, refusing what is not a design."""
    text_source = str(source)
    path = Path(text_source)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        if text_source in preset_names():
            path = PRESETS / f"{text_source}.json"
        elif not path.exists():
            raise TensorcadError(
                "", f"{text_source!r} is neither a preset nor a .json/.yaml file"
                f"{did_you_mean(text_source, preset_names())} (presets: {', '.join(preset_names())})"
            )
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise TensorcadError(str(path), f"{size:,} bytes; a design file is at most {MAX_BYTES:,}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise TensorcadError(str(path), "no such file") from None
    except IsADirectoryError:
        raise TensorcadError(str(path), "is a directory, not a design file") from None
    except OSError as e:
        raise TensorcadError(str(path), f"cannot be read ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TensorcadError(str(path), "is not UTF-8 text") from None
    return parse_text(text, str(path), yaml=path.suffix.lower() in (".yaml", ".yml"))


def parse_text(text: str, where: str = "", yaml: bool = False) -> dict[str, Any]:
    if len(text) > MAX_BYTES:
        raise TensorcadError(where, f"{len(text):,} characters; a design is at most {MAX_BYTES:,}")
    try:
        if yaml:
            import yaml as pyyaml

            content = pyyaml.safe_load(text)
        else:
            # NaN and Infinity parse, and validation refuses them where they sit, naming the path.
            content = json.loads(text)
    except TensorcadError:
        raise
    except RecursionError:
        raise TensorcadError(where, "nests too deeply to be a design") from None
    except Exception as e:  # the parsers' own errors say where, in one line
        kind = "YAML" if yaml else "JSON"
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not yaml and hasattr(e, "lineno"):
            detail = f"{e.msg} at line {e.lineno}, column {e.colno}"
        raise TensorcadError(where, f"is not valid {kind}: {detail}") from None
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
