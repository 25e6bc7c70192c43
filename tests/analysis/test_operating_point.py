"""Bad operating points: a TensorcadError naming the value; on the CLI, one line and exit 2."""

import subprocess
import sys

import pytest

from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing

BAD = [
    (["--seq", "0"], "--seq"),
    (["--seq", "-8"], "--seq"),
    (["--seq", str(2**24 + 1)], "--seq"),
    (["--seq", "lots"], "--seq"),
    (["--mfu", "0"], "--mfu"),
    (["--mfu", "1.5"], "--mfu"),
    (["--mfu", "nan"], "--mfu"),
    (["--hardware", "TPUv5"], "--hardware"),
    (["--gpus", "0"], "--gpus"),
    (["--price", "-1"], "--price"),
    (["--tokens", "0"], "--tokens"),
    (["--tokens", "1e30"], "--tokens"),
    (["--train-dtype", "int3"], "--train-dtype"),
    (["--serve-dtype", "fp2"], "--serve-dtype"),
    (["--train-dtype", "fp4"], "--train-dtype"),
    (["--pack", "0"], "--pack"),
    (["--pack", "-5"], "--pack"),
    (["--pack", "1e30"], "--pack"),
    (["--pack", "nan"], "--pack"),
    (["--pack", "512", "--pack-spread", "-1"], "--pack-spread"),
    (["--pack", "512", "--pack-spread", "1000"], "--pack-spread"),
    (["--pack-spread", "0.5"], "--pack-spread"),
    # Hostile input (#12): work past the analysis budget is refused up front, naming the option typed.
    (["--seq", "16777216", "--pack", "1"], "--seq"),
    (["--seq", "65536", "--pack", "1"], "--pack"),
    (["--pack", "64", "--pack-spread", "1e-320"], "--pack-spread"),
    (["--seq", "\u0663"], "--seq"),  # an Arabic-Indic three: int() reads it as 3
    (["--gpus", "true"], "--gpus"),
]


def test_twenty_bad_operating_points_are_kept():
    assert len(BAD) >= 20


@pytest.mark.parametrize("argv,path", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_operating_point_is_one_line_exit_2(argv, path):
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "llama-3-8b", *argv],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert path in lines[0] and "Traceback" not in run.stderr


@pytest.mark.parametrize("kwargs,path", [
    ({"seq": 0}, "seq"), ({"seq": 2**24 + 1}, "seq"), ({"mfu": 0.0}, "mfu"), ({"mfu": 1.01}, "mfu"),
    ({"hardware": "V100"}, "hardware"), ({"train_dtype": "int4"}, "trainDtype"), ({"seq": True}, "seq"),
])
def test_api_refuses_bad_values(kwargs, path):
    with pytest.raises(TensorcadError) as info:
        OperatingPoint(**kwargs)
    assert info.value.path == path


def test_defaults_are_stated_in_help():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "analyze", "--help"], capture_output=True, text=True)
    assert run.returncode == 0
    for text in ("default H100", "default 1,024", "default 0.4", "default bf16", "Chinchilla", "default 1 with --pack"):
        assert text in " ".join(run.stdout.split()), text


def test_packing_spread_defaults_to_one():
    assert Packing(1024).spread == 1.0
