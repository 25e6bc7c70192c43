"""`tensorcad editor`: a local web editor over the same engine.

``serve`` runs it until interrupted; ``make_server`` returns one to drive from
a test. Both bind 127.0.0.1 only. See ``docs/editor.md``.
"""

from __future__ import annotations

import sys
import threading
import webbrowser
from typing import Any

from tensorcad.errors import TensorcadError

from .server import HOST, make_server
from .warm import warm_in_background

__all__ = ["make_server", "serve"]


def serve(design: Any = None, host: str = HOST, port: int = 0, open_browser: bool = False) -> None:
    """Serve the editor on ``host:port`` (127.0.0.1 only) until Ctrl-C; opens ``design`` if given."""
    if host != HOST:
        raise TensorcadError("host", f"the editor listens on {HOST} only, not {host!r}")
    server, url = make_server(design, port)
    warm_in_background(server.initial)  # the first look's one-time costs, paid while the browser opens
    print(f"tensorcad editor at {url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    if open_browser:
        threading.Timer(0.2, webbrowser.open, args=(url,)).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
