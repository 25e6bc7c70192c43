"""Torch's threads under pytest-xdist: each worker a share of the cores, not a pool the size of the machine.

Each xdist worker is a process, and torch gives every process a pool of intra-op
threads, one a core. Two workers on two cores then run four busy threads, and the
OpenMP threads that wait spin. Measured on the project's 2-core machine, `tests/cli`
took 56 s under `-n 2` against 30 s in one process (test_smoke_train_json: 2 s
alone, 33 s beside the other worker), and 20 s with one thread a worker.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping


def share(environ: Mapping[str, str], cores: int | None) -> int | None:
    """Threads a worker takes: the cores over the workers, at least one; None outside xdist or if set already."""
    if "PYTEST_XDIST_WORKER" not in environ or "OMP_NUM_THREADS" in environ:
        return None
    workers = max(1, int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    return max(1, (cores or 1) // workers)


def limit(environ=os.environ) -> int | None:
    """Set this worker's threads (before torch loads, and to torch if it has): what share says."""
    threads = share(environ, os.cpu_count())
    if threads is not None:
        environ["OMP_NUM_THREADS"] = str(threads)  # read as torch loads, and by the processes a test starts
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
    return threads
