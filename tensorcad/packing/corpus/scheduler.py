"""A Dask scheduler's address, checked before ``distributed`` is given it.

``Client(address)`` trusts what it reaches: a port that accepts and never
speaks held ``tensorcad lengths --engine dask`` past 100 s, and one that
answered junk had its first eight bytes read as a frame's length (3 EiB
allocated, then a ``MemoryError`` traceback); ``tls://`` and ``ucx://`` raised
``TypeError``. So the address is parsed here (``tcp://HOST:PORT``, or
``HOST:PORT``), and one connection reads the scheduler's greeting, which a
Dask server writes first on every connection, within ``PROBE_SECONDS`` and
with a frame length a greeting can have, before the client connects.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct

from tensorcad.errors import TensorcadError, shown

PROBE_SECONDS = 10.0
MAX_GREETING = 1 << 20  # a scheduler's handshake is a few hundred bytes; 1 MiB is generous
OPTION = "--scheduler"


def checked_address(address: str, option: str = OPTION) -> tuple[str, int]:
    """``tcp://HOST:PORT`` or ``HOST:PORT`` as (host, port); anything else one line naming ``option``."""
    if not isinstance(address, str) or not address.strip():
        raise TensorcadError(option, "expected a scheduler address, tcp://HOST:PORT")
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme != "tcp":
        raise TensorcadError(option, f"{shown(address)}: only tcp:// schedulers are supported (got {shown(scheme)}://)")
    host, colon, port = rest.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise TensorcadError(option, f"{shown(address)}: expected tcp://HOST:PORT, a port in 1..65535")
    if not (_ipv6(host) if bracketed else _HOST.fullmatch(host)) or len(host) > 253:
        # a colon outside brackets ('tcp://a:1:30' is host 'a', port '1:30'), a space, a non-ASCII letter
        raise TensorcadError(option, f"{shown(address)}: {shown(host)} is no host name")
    return host, int(port)


_HOST = re.compile(r"[A-Za-z0-9_.-]+")  # a DNS name or an IPv4 address; an IPv6 one goes in brackets


def _ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def probe(address: str, option: str = OPTION, seconds: float | None = None) -> str:
    """The address as ``tcp://HOST:PORT`` once a Dask server there has greeted within ``seconds``."""
    seconds = PROBE_SECONDS if seconds is None else seconds
    host, port = checked_address(address, option)
    where = shown(address)
    try:
        with socket.create_connection((host, port), timeout=seconds) as conn:
            conn.settimeout(seconds)
            head = _read(conn, 8)
    except socket.timeout:
        raise TensorcadError(option, f"{where} accepted but said nothing in {seconds:g} s: no Dask scheduler") from None
    except OSError as e:
        raise TensorcadError(option, f"cannot reach {where}: {e.strerror or type(e).__name__}") from None
    if len(head) < 8:
        raise TensorcadError(option, f"{where} closed the connection before greeting: no Dask scheduler")
    (length,) = struct.unpack("Q", head)  # distributed's TCP frames: an 8-byte length, then the frames
    if not 0 < length <= MAX_GREETING:
        raise TensorcadError(option, f"{where} answered what no Dask scheduler sends (a first frame of "
                                     f"{length:,} bytes): no Dask scheduler")
    return f"tcp://{host}:{port}" if ":" not in host else f"tcp://[{host}]:{port}"


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data
