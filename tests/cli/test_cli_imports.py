"""`tensorcad --help` and `tensorcad presets` start without scipy or torch.

Each runs in a fresh interpreter (a module this test process imported would hide
the answer), and the modules it loaded are read from `sys.modules` after the
command has run.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "torch")
PROBE = """
import contextlib, io, json, sys
from tensorcad.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main({argv!r})
    except SystemExit:
        pass
print(json.dumps(sorted({{name.split('.')[0] for name in sys.modules}})))
"""


@pytest.mark.parametrize("argv", [["--help"], ["presets"], ["analyze", "--help"]], ids=" ".join)
def test_command_imports_neither_scipy_nor_torch(argv):
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True,
                         text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "tensorcad" in loaded  # the probe really ran the command
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_probe_sees_an_import():
    # The same probe on a command that must load scipy (a gamma packing) says so.
    argv = ["analyze", "nano-sort", "--pack", "64", "--json"]
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True,
                         text=True, check=True)
    assert "scipy" in json.loads(out.stdout.strip().splitlines()[-1])
