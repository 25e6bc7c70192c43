"""Numbers as people read them: one set of units for the CLI (the editor's app.js mirrors it).

A figure is scaled to the unit that keeps it readable (seconds to days, bytes to
GiB), so a small design never reads ``0.00 days`` or ``$0``.
"""

from __future__ import annotations

_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
# Binary prefixes for memory: a KV cache is allocated in powers of two.
_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def si(x: float, unit: str = "") -> str:
    """``409.856 kFLOP``: three decimals under the largest SI prefix that fits."""
    for prefix, scale in _SI:
        if abs(x) >= scale:
            return f"{x / scale:,.3f} {prefix}{unit}"
    return f"{x:,.3f} {unit}"


def binary_bytes(n: float) -> str:
    """``2.00 MiB``, ``1.00 GiB``: two decimals under the largest binary prefix that fits."""
    for unit, scale in _BINARY:
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def duration(seconds: float) -> str:
    """Days past two days, then hours, minutes, seconds (the editor's ``duration``)."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} hours"
    if seconds >= 60:
        return f"{seconds / 60:,.1f} minutes"
    if seconds >= 1:
        return f"{seconds:,.1f} s"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def money(usd: float) -> str:
    """Whole dollars once there are ten, cents below, and no false zero under a cent."""
    if abs(usd) >= 10:
        return f"${usd:,.0f}"
    return f"${usd:,.2f}" if usd == 0 or abs(usd) >= 0.005 else "under $0.01"


def quantity(x: float) -> str:
    """Whole with separators from ten up, three significant digits below (never a false 0)."""
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.3g}"
