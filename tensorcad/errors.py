"""The one error type tensorcad raises for bad input.

Every bad file, expression or option becomes a ``TensorcadError`` that names
where the bad value sits (a JSON path such as ``nodes[1].params.heads``), so
the CLI can print it as one line and exit 2.

The line is one line whatever the input held: control characters (a newline
in a design's name, an escape sequence in a path) are shown escaped, never
echoed raw, and ``shown`` cuts a value to about 80 characters, so a
megabyte-long string cannot become a megabyte-long message.
"""

from __future__ import annotations

import difflib
import numbers
import re

SHOWN = 80  # characters of a bad value a message quotes
MAX_LINE = 2_000  # a message longer than this is cut: it lists, it does not dump

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators: each
# would break the line or rewrite the terminal if printed raw.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """The text with every control character escaped (``\\n``, ``\\x1b``), cut to MAX_LINE."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def as_text(text: str) -> str:
    """User text (a design's name, a file name) to print through rich: one line, its markup escaped.

    ``[link=…]`` or ``[bold]`` in a name would otherwise be read as rich markup,
    and an ESC would reach the terminal raw.
    """
    from rich.markup import escape

    return escape(one_line(text))


def shown(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for quoting a bad value in a message.

    Large containers are summarised by type and size before ``repr`` sees them,
    so quoting a hostile value never formats all of it.
    """
    if isinstance(value, (dict, list, tuple, set)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value):,} items>"
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]
        text = repr(value)
        return text[:limit] + "...'"
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TensorcadError(ValueError):
    """Bad input, with the path of the offending value."""

    def __init__(self, path: str, message: str):
        self.path = one_line(path)
        self.message = one_line(message)
        super().__init__(f"{self.path}: {self.message}" if self.path else self.message)

    def __reduce__(self):
        # Rebuilt from its two parts, so that it crosses a process (a worker, a cluster's task) as itself.
        return type(self), (self.path, self.message)


def join(path: str, key: str | int) -> str:
    """Extend a JSON path: ``join("nodes", 1)`` is ``nodes[1]``; a key that is not a plain name is quoted."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    key = str(key)
    if not key or len(key) > 200 or not key.isprintable() or any(c.isspace() or c in "'\"" for c in key):
        key = shown(key, 40)  # a key that is not a plain name is quoted, so the path still reads
    return f"{path}.{key}" if path else key


def check_integer(value: object, path: str, low: int, high: int) -> int:
    """An integer (numpy's too; bools refused) in low..high, or a TensorcadError naming the path."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise TensorcadError(path, f"expected an integer in {low:,}..{high:,}, got {shown(value)}")
    return int(value)


def did_you_mean(value: object, choices) -> str:
    """`` (did you mean 'llama-3-8b'?)`` for a near miss among ``choices``, else ``""``."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
