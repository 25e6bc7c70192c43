"""An xdist worker that has sent its results is not interrupted on its way out.

When the controller closes a worker, execnet waits 5 s for it to finish and
then sends it SIGINT (``gateway_base._terminate_execution``). A worker whose
cleanup is slow (a loaded machine, many temporary files) takes the interrupt
wherever it is, often inside hypothesis's gc hook, and a green run ends with a
stray ``KeyboardInterrupt`` traceback on stderr. Once the session is finishing
no test is left to stop, so the worker lets its cleanup run out (execnet still
ends it 10 s later if it hangs).
"""

from __future__ import annotations

import signal
import threading
from typing import Any


def finish_quietly(config: Any) -> None:
    """On an xdist worker, ignore SIGINT from here on; elsewhere do nothing."""
    if hasattr(config, "workerinput") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
