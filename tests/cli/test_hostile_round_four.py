"""Hostile input, round four (#47): the output paths, ``lengths --merge`` and the Dask engine's scheduler.

Each test runs the issue's reproducer through ``cli.main`` and holds the promise: exit 2, exactly one
``tensorcad: `` line, in bounded time, nothing written. The before-figures are in each docstring.
"""

import json
import os
import socket
import threading
import time

import pytest

from tensorcad import cli
from tensorcad.packing.corpus import scheduler

GPT2 = {"model_type": "gpt2", "vocab_size": 64, "n_positions": 64, "n_embd": 32, "n_layer": 1, "n_head": 2,
        "activation_function": "gelu"}


def refused(capsys, *argv) -> str:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("tensorcad: "), (code, err[-2000:])
    assert len(err) < 400, err
    return err


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "out.fifo"
    os.mkfifo(path)
    return path


def test_an_output_that_is_a_fifo_or_a_directory_is_refused_without_blocking(capsys, tmp_path, fifo):
    """Before: ``lengths --force -o FIFO``, ``codegen -o FIFO`` and ``import-hf -o FIFO`` blocked forever (opening
    a FIFO to write waits for a reader); a directory was refused only by the OS, late."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n\nc\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GPT2))
    started = time.monotonic()
    assert "is a FIFO, not a regular file" in refused(capsys, "lengths", corpus, "-o", fifo, "--force", "--no-plot")
    assert "--output: " in refused(capsys, "codegen", "nano-sort", "-o", fifo)
    assert "is a FIFO" in refused(capsys, "import-hf", config, "-o", fifo)
    assert "is a directory, not a regular file" in refused(capsys, "codegen", "nano-sort", "-o", tmp_path)
    assert time.monotonic() - started < 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "config.json", "out.fifo"]


def test_a_character_device_takes_the_output(capsys):
    assert cli.main(["codegen", "nano-sort", "-o", os.devnull]) == 0  # /dev/null never blocks
    capsys.readouterr()


@pytest.mark.parametrize("option", [["--field", "text"], ["--separator", "\\n"], ["--workers", "2"]])
def test_merge_refuses_the_options_of_counting(capsys, tmp_path, option):
    """Before: ``--merge`` with ``--field`` or ``--separator`` exited 0, the option silently ignored (even given as
    its default value: the options now default to None, so given is told from left alone)."""
    histogram = tmp_path / "h.json"
    histogram.write_text('{"5": 2}')
    err = refused(capsys, "lengths", histogram, "--merge", *option, "-o", "", "--no-plot")
    assert err.startswith(f"tensorcad: {option[0]}: --merge adds histograms up")


class Listener:
    """A port on 127.0.0.1 that accepts, then stays silent or answers junk: no Dask scheduler."""

    def __init__(self, answer: bytes | None):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.answer, self.held = answer, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)  # kept open: a silent scheduler never closes
            if self.answer is not None:
                conn.sendall(self.answer)

    def close(self):
        for conn in self.held:
            conn.close()
        self.server.close()


@pytest.mark.parametrize("answer, message", [
    (None, "accepted but said nothing in 1 s: no Dask scheduler"),
    (b"HTTP/1.1 200 OK\r\n\r\nhello", "answered what no Dask scheduler sends (a first frame of"),
])
def test_a_port_that_is_no_scheduler_is_one_line_in_bounded_time(capsys, tmp_path, monkeypatch, answer, message):
    """Before: a port that accepts and never speaks held ``--engine dask`` past 100 s; one that answers junk had its
    first eight bytes read as a frame length, 3 EiB allocated, then a ``MemoryError`` traceback."""
    monkeypatch.setattr(scheduler, "PROBE_SECONDS", 1.0)
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n\nc\n")
    listener = Listener(answer)
    try:
        started = time.monotonic()
        err = refused(capsys, "lengths", corpus, "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{listener.port}",
                      "-o", "", "--no-plot")
        assert message in err and time.monotonic() - started < 10
    finally:
        listener.close()


@pytest.mark.parametrize("address, message", [
    ("tls://127.0.0.1:8786", "only tcp:// schedulers are supported (got 'tls'://)"),
    ("ucx://127.0.0.1:8786", "only tcp:// schedulers are supported (got 'ucx'://)"),
    ("tcp://" + "a" * 5000 + ":1", "is no host name"),
    ("tcp://127.0.0.1:0", "a port in 1..65535"),
    ("tcp://127.0.0.1:http", "a port in 1..65535"),
    ("127.0.0.1", "expected tcp://HOST:PORT"),
])
def test_a_scheduler_address_is_parsed_before_any_connection(capsys, tmp_path, address, message):
    """Before: ``tls://`` and ``ucx://`` raised ``TypeError`` tracebacks; a 5,000-character address was echoed whole."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a\n")
    err = refused(capsys, "lengths", corpus, "--engine", "dask", "--scheduler", address, "-o", "", "--no-plot")
    assert message in err


def test_a_closed_port_is_one_line():
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(Exception) as caught:
        scheduler.probe(f"tcp://127.0.0.1:{port}", seconds=2)
    assert type(caught.value).__name__ == "TensorcadError" and "cannot reach" in str(caught.value)


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_a_local_cluster_of_no_workers_is_refused(capsys, tmp_path, workers):
    """Before: ``--engine dask --workers 0`` (or -1) started a cluster with no worker and waited for one forever."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a\n")
    err = refused(capsys, "lengths", corpus, "--engine", "dask", "--workers", workers, "-o", "", "--no-plot")
    assert f"--workers: must be a whole number in 1..256, got {workers}" in err


@pytest.mark.parametrize("argv", [
    ["analyze", "nano-sort", "--hardware"], ["analyze", "nano-sort", "--pack-strategy"], ["codegen", "nano-sort", "--form"],
    ["certify", "nano-sort", "--call"],
])
def test_a_2000_character_option_value_is_cut_in_argparse_s_line(capsys, argv):
    """Before: argparse's 'invalid choice' and 'unrecognized arguments' lines echoed a 2,000-character value whole
    (2,011 characters; issue 47, round three)."""
    err = refused(capsys, *argv, "z" * 2000)
    assert "z" * 80 + "..." in err and "z" * 81 not in err


@pytest.mark.parametrize("address", ["tcp://\xadK:1:30", "tcp://a:1:30", "tcp://h\u00f6st:8786", "tcp://[::1:8786",
                                     "tcp://[nothost]:8786"])
def test_a_host_that_is_no_host_name_is_refused_before_any_connection(address):
    # the slow fuzz drew 'tcp://\xadK:1:30' (host '\xadK', port '1:30'): it was read as host '\xadK:1', port 30
    from tensorcad.errors import TensorcadError
    from tensorcad.packing.corpus.scheduler import checked_address

    with pytest.raises(TensorcadError, match=r"is no host name|expected tcp://HOST:PORT"):
        checked_address(address)
    assert checked_address("tcp://[::1]:8786") == ("::1", 8786)
    assert checked_address("10.0.0.5:8786") == ("10.0.0.5", 8786)
    assert checked_address("tcp://sched-1.cluster.local:8786") == ("sched-1.cluster.local", 8786)


def test_a_guard_setting_of_2000_characters_is_cut_in_its_refusal():
    from tensorcad.errors import TensorcadError
    from tensorcad.guard import Guard

    for option in ("on_failure", "first", "every"):
        with pytest.raises(TensorcadError) as caught:
            Guard(**{option: "x" * 2000})
        assert len(str(caught.value)) <= 300, (option, len(str(caught.value)))
