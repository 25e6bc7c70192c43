"""A user's model checked in a child process, so that a crash fails its item instead of the session.

Compiled FlexAttention with some masks, a C extension, a custom kernel: a
segfault in a model's forward would end the whole pytest session with no
verdict. So each model's checks run in a fresh interpreter (spawned, never
forked: torch is already loaded here, and forking it is unsafe), which imports
the factory by its name and reports each check as JSON lines on its stdout:
``running`` before a check, ``check`` after it. A child that dies leaves the
check it was running named, with the signal that killed it.

``python -m tensorcad.testing.plugin.contained SPEC.json`` is the child; `run_contained` the parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAG = "@@tensorcad "  # the child's report lines, told apart from whatever the model prints


@dataclass(frozen=True)
class Crash:
    """The child died (or failed to start its checks): why, and the check it was running."""

    check: str | None
    reason: str

    def message(self) -> str:
        during = f" while running {self.check!r}" if self.check else " before its first check"
        return f"the child process checking the model {self.reason}{during}"


def _died_of(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"died of {name} (signal {-returncode})"
    return f"exited with status {returncode}"


def run_contained(factory: str, checks: list[str], settings: dict, batch: Any = None,
                  timeout: float | None = None) -> tuple[dict[str, dict], Crash | None]:
    """Run ``checks`` of the model ``factory`` makes in a child; each finished check's JSON, and a crash."""
    with tempfile.TemporaryDirectory(prefix="tensorcad-") as tmp:
        spec = {"factory": factory, "checks": checks, "settings": settings, "batch": None}
        if batch is not None:
            import torch

            spec["batch"] = str(Path(tmp) / "batch.pt")
            torch.save(tuple(batch), spec["batch"])
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        # The child imports the factory as this process would: the same sys.path (rootdir, conftest dirs).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
        try:
            done = subprocess.run([sys.executable, "-m", "tensorcad.testing.plugin.contained", str(spec_path)], env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {}, Crash(None, f"ran past {timeout:g} s and was stopped")
    results: dict[str, dict] = {}
    running = None
    error = None
    for line in done.stdout.splitlines():
        if not line.startswith(TAG):
            continue
        event = json.loads(line[len(TAG):])
        if "running" in event:
            running = event["running"]
        elif "check" in event:
            results[event["check"]["name"]] = event["check"]
            running = None
        elif "error" in event:
            error = event["error"]
    if error is not None:
        return results, Crash(running, f"could not make the model: {error}")
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return results, Crash(running, _died_of(done.returncode) + (f" (stderr: {tail})" if tail else ""))
    return results, None


def _report(event: dict) -> None:
    sys.stdout.write(TAG + json.dumps(event) + "\n")
    sys.stdout.flush()  # the parent must see "running" before a crash can take the buffer with it


def child(spec_path: str) -> int:
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.building import Settings
    from tensorcad.runtime.certification import run_check

    from ..certificates import model_subject

    spec = json.loads(Path(spec_path).read_text())
    settings = Settings(**spec["settings"])
    batch = None
    if spec["batch"] is not None:
        import torch

        batch = torch.load(spec["batch"])
    try:
        subject = model_subject(spec["factory"], settings, batch)
    except TensorcadError as error:
        _report({"error": str(error)})
        return 0
    except Exception as error:  # noqa: BLE001 - the factory's own failure: one line, where it raised
        import traceback

        where = traceback.extract_tb(error.__traceback__)[-1]
        _report({"error": f"{spec['factory']} raised {type(error).__name__}: {error} "
                          f"({Path(where.filename).name}:{where.lineno})"})
        return 0
    for name in spec["checks"]:
        _report({"running": name})
        try:
            check = run_check(subject, name)
        except TensorcadError as error:
            from tensorcad.runtime.certification import failed

            check = failed(name, str(error))
        _report({"check": {**check.to_json(), "call": subject.call_line}})  # which call ran, as reports say
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1]))
