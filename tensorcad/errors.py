"""The one error type tensorcad raises for bad input.

Every bad file, expression or option becomes a ``TensorcadError`` that names
where the bad value sits (a JSON path such as ``nodes[1].params.heads``), so
the CLI can print it as one line and exit 2.
"""

from __future__ import annotations

import difflib
import numbers


class TensorcadError(ValueError):
    """Bad input, with the path of the offending value."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def join(path: str, key: str | int) -> str:
    """Extend a JSON path: ``join("nodes", 1)`` is ``nodes[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_integer(value: object, path: str, low: int, high: int) -> int:
    """An integer (numpy's too; bools refused) in low..high, or a TensorcadError naming the path."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise TensorcadError(path, f"expected an integer in {low:,}..{high:,}, got {value!r}")
    return int(value)


def did_you_mean(value: object, choices) -> str:
    """`` (did you mean 'llama-3-8b'?)`` for a near miss among ``choices``, else ``""``."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
