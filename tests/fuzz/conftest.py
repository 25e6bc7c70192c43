"""The fuzz suite's harness: one bounded worker process per test session, restarted when a case kills it.

``bounded.run(case)`` sends a case to ``worker.py`` and returns its verdict.
The worker caps its own memory and times each case; here a wall-clock limit
on top catches a worker that stops answering (killed by the memory limit,
a segfault, a hang the alarm could not break), which is that case's failure.
"""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("worker.py")
# The checkout whose tensorcad the worker imports: this one, unless TENSORCAD_FUZZ_TARGET names another
# (to count what the suite finds in an older version).
ROOT = Path(os.environ.get("TENSORCAD_FUZZ_TARGET") or Path(__file__).resolve().parents[2])
SECONDS = 60  # the worker's own alarm; the wall limit here allows for start-up on a loaded machine
COUNTS: collections.Counter = collections.Counter()  # cases run per surface, this session
OUTCOMES: collections.Counter = collections.Counter()  # (surface, outcome): result, refused, crash...


class Bounded:
    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def _start(self) -> None:
        env = {**os.environ, "TENSORCAD_FUZZ_SECONDS": str(SECONDS), "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                   [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.process = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        ready = self._read(120)
        if ready is None or "ready" not in ready:
            raise RuntimeError(f"the fuzz worker did not start: {ready!r}")

    def _read(self, seconds: float) -> dict | None:
        assert self.process is not None and self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], seconds)
        if not readable:
            return None
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def run(self, case: dict) -> dict:
        COUNTS[case["surface"]] += 1
        if self.process is None or self.process.poll() is not None:
            self._start()
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(case) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            self.stop()
            return {"ok": False, "why": "the worker was gone before the case", "outcome": "crash"}
        verdict = self._read(SECONDS + 30)
        if verdict is None:
            code = self.process.poll()
            self.stop()
            why = "no answer in time" if code is None else f"the worker died (exit {code}; memory limit or crash)"
            OUTCOMES[case["surface"], "broken"] += 1
            return {"ok": False, "why": why, "outcome": "crash"}
        OUTCOMES[case["surface"], verdict.get("outcome") if verdict.get("ok") else "broken"] += 1
        return verdict

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture(scope="session")
def bounded():
    worker = Bounded()
    yield worker
    worker.stop()


def pytest_terminal_summary(terminalreporter):
    if COUNTS:
        listed = ", ".join(f"{surface} {n:,}" for surface, n in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz cases run: {listed} ({sum(COUNTS.values()):,} in all, this process)")
        for surface in sorted(COUNTS):
            kinds = ", ".join(f"{o} {n:,}" for (s, o), n in sorted(OUTCOMES.items()) if s == surface)
            terminalreporter.write_line(f"  {surface}: {kinds}")
