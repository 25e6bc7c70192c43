"""Bugs planted on purpose, each of which the default suite must catch.

Each case copies the package into a scratch directory, changes one line of one module
there (the planted bug), and runs the default-suite test that must catch it against
that copy in a fresh interpreter: the run must fail, in that test. If a refactor moves
the line, the plant no longer applies and this test says so, rather than passing.

The bugs are the ones issue #20 found let through: an isolation check tolerating
differences up to 1e-3, a generated mask without its causal conjunct, an off-by-one in
a closed form (0.09% at T = 8,192, L = 1,024), and a flipped interval comparison.
docs/testing.md lists each with the tests that catch it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# name -> (module, the line as it is, the line planted, the test that must fail)
PLANTS = {
    "isolation tolerates 1e-3": (
        "tensorcad/runtime/certification/forward/isolation.py",
        "moved = (out != base_flat).any(dim=-1).cpu()",
        "moved = ((out - base_flat).abs() > 1e-3).any(dim=-1).cpu()",
        "tests/runtime/certification/forward/test_isolation.py::test_a_leak_of_1e_7_is_caught_bitwise",
    ),
    "generated mask drops q >= kv": (
        "tensorcad/codegen/masks.py",
        "body = E.to_torch(keep, {**INDEX, **{p: ports(p) for p in read_ports}})",
        "body = E.to_torch(keep, {**INDEX, **{p: ports(p) for p in read_ports}})"
        '.replace("(q_idx >= kv_idx) & ", "")',
        "tests/codegen/test_mask_content.py::"
        "test_generated_masks_equal_the_numpy_interpreter_at_every_point[document-causal]",
    ),
    "closed form off by one": (
        "tensorcad/packing/closed_form.py",
        "flat_sum = Fraction((seq - ramp) * (length - 1), 2)",
        "flat_sum = Fraction((seq - ramp) * length, 2)",
        "tests/packing/test_closed_form.py::test_phase_average_at_8k_is_491_1667_exactly",
    ),
    "interval comparison flipped": (
        "tensorcad/design/expr/intervals.py",
        "return Verdict(a_lo < b_hi, a_hi >= b_lo)",
        "return Verdict(a_lo <= b_hi, a_hi >= b_lo)",
        "tests/design/test_intervals.py::test_verdicts_are_exact_on_every_box[q < kv]",
    ),
}


def planted_copy(tmp: Path, module: str, line: str, planted: str) -> Path:
    shutil.copytree(ROOT / "tensorcad", tmp / "tensorcad", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if line:
        target = tmp / module
        source = target.read_text()
        assert source.count(line) == 1, f"{module} no longer holds the line to plant: update PLANTS"
        target.write_text(source.replace(line, planted))
    return tmp


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_the_default_suite_catches_the_planted_bug(name, tmp_path):
    module, line, planted, catcher = PLANTS[name]
    copy = planted_copy(tmp_path, module, line, planted)
    env = {**os.environ, "PYTHONPATH": str(copy), "HYPOTHESIS_PROFILE": "ci"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:xdist", "-p", "no:cacheprovider",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), str(ROOT / catcher)],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, f"planted bug {name!r} was not caught (exit {run.returncode}):\n{out[-2000:]}"
    assert "1 failed" in out and catcher.split("::")[1].split("[")[0] in out, out[-2000:]


def test_the_catchers_pass_on_an_unplanted_copy(tmp_path):
    # the control: the same copy and the same command, nothing planted, every catcher passes
    copy = planted_copy(tmp_path, "tensorcad/packing/closed_form.py", "", "")
    env = {**os.environ, "PYTHONPATH": str(copy), "HYPOTHESIS_PROFILE": "ci"}
    catchers = [str(ROOT / catcher) for *_, catcher in PLANTS.values()]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), *catchers],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0 and f"{len(PLANTS)} passed" in run.stdout, run.stdout[-2000:]
