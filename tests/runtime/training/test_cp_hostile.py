"""The context-parallel launcher under hostile input (issue 47): loopback only, one line, refused before launch.

Before this round (measured on 049439c): rank 0 listened on every interface (``*:PORT``, torch's TCPStore of the
``tcp://127.0.0.1`` init method binds the wildcard address) during a run; ``--window 0`` / ``-5`` and 64 x 2**20
tokens failed with tracebacks after the ranks spawned; ``--pack 1e-300`` and ``--shard ''`` exited 0;
``--seq 1000`` was refused only after the ranks ran; argparse's errors printed two lines (usage, then the
error); a rank killed mid-run gave an 18-line traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tensorcad.runtime.training import RunSpec, run_context_parallel  # noqa: E402
from tensorcad.runtime.training.cp_run import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _address(hex_address: str) -> str:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return f"{'.'.join(str(b) for b in raw[::-1])}:{int(port, 16)}"
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # each 32-bit word in host (little-endian) order
    flat = b"".join(words)
    if flat[:12] == b"\0" * 10 + b"\xff\xff":
        return f"{'.'.join(str(b) for b in flat[12:])}:{int(port, 16)}"  # an IPv4-mapped address
    return f"[{flat.hex()}]:{int(port, 16)}"


def listening(pids: set[int]) -> set[str]:
    """The local addresses of every TCP socket in LISTEN (state 0A) that one of ``pids`` holds."""
    inodes = _socket_inodes(pids)
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.add(_address(fields[1]))
    return found


def test_a_cp_runs_listening_sockets_are_all_on_loopback():
    seen: set[str] = set()
    done = threading.Event()

    def watch():
        me = os.getpid()
        while not done.is_set():
            seen.update(listening(_descendants(me) | {me}))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run_context_parallel(RunSpec(world_size=2, shards=("contiguous",), seq=256, pack=100, heads=1,
                                              head_dim=8, kernel="blockwise", repeats=1))
    finally:
        done.set()
        watcher.join()
    assert result.shards[0].max_difference <= 1e-6
    assert seen, "no listening socket seen: the watcher did not see the run"  # gloo's pairs listen
    assert all(address.startswith("127.0.0.1:") for address in seen), seen


@pytest.mark.parametrize("argv, says", [
    (["--window", "0"], "--window"), (["--window", "-5"], "--window"),
    (["--rows", "64", "--seq", str(2**20)], "--seq"), (["--pack", "1e-300"], "--pack"), (["--pack", "nan"], "--pack"),
    (["--pack", "inf"], "--pack"), (["--pack", "-3"], "--pack"), (["--spread", "1e9"], "--spread"),
    (["--shard", ""], "--shard"), (["--shard", " , "], "--shard"), (["--seq", "1000"], "cp.size"),
    (["--heads", "64", "--head-dim", "256", "--seq", str(2**18)], "--seq"),
    (["--shard", "x" * 5000], "--shard"), (["--world-size", "70"], "--world-size"),
    (["--seq", "abc"], "--seq"), (["--kernel", "gpu"], "--kernel"), (["--bogus"], "--bogus"),
    (["--pack", "x" * 3000], "--pack"),
])
def test_bad_options_are_one_line_before_any_rank_spawns(argv, says, capsys):
    started = time.perf_counter()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("cp_run: ") and says in err, err
    assert len(err) <= 300, err
    assert time.perf_counter() - started < 5  # refused before launch: a spawn alone takes seconds


def test_a_rank_killed_mid_run_is_one_line():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "tensorcad.runtime.training.cp_run", "--world-size", "2",
                                "--seq", "4096", "--pack", "300", "--kernel", "blockwise", "--repeats", "100",
                                "--shard", "contiguous"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline and process.poll() is None:
        ranks = [p for p in _descendants(process.pid) if "spawn_main" in _cmdline(p)]
        if len(ranks) == 2 and listening(set(ranks)):  # both ranks are up and in the gloo group
            time.sleep(1.0)
            killed = max(ranks)
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    out, err = process.communicate(timeout=60)
    assert killed is not None, err[-600:]
    assert process.returncode == 2, err[-600:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cp_run: rank ") and "SIGKILL" in lines[0], err[-900:]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_crash_after_every_rank_finished_loses_nothing_but_one_before_is_a_failure(tmp_path):
    """CI's stop 52: rank 1 died by SIGABRT in gloo's teardown ("terminate called without an active exception")
    after rank 0 had written every sharding's results; the launcher now keeps those, and only those."""
    from tensorcad.runtime.training.cp_rank import finished_mark
    from tensorcad.runtime.training.cp_run import every_rank_finished

    out = str(tmp_path / "ranks.json")
    assert not every_rank_finished(out, 2)
    open(finished_mark(out, 0), "w").close()
    open(finished_mark(out, 1), "w").close()
    assert not every_rank_finished(out, 2)  # marks without results: rank 0 never wrote them
    Path(out).write_text("[]")
    assert every_rank_finished(out, 2)
    assert not every_rank_finished(out, 3)  # a third rank that never passed its last collective
    os.remove(finished_mark(out, 0))
    assert not every_rank_finished(out, 2)
