"""rl[aggregation] on verl's and OpenRLHF's own functions, as their loops call them, over 2 ranks x 2 micro-batches.

The functions run in a child process (framework_losses.py): verl's ``core_algos.agg_loss`` under each of its
five ``loss_agg_mode``s with the global batch info its engine passes, OpenRLHF's ``aggregate_loss`` and
``PolicyLoss`` under ``token_level_loss`` on and off. Each passes under the mode docs/rl.md maps its setting to
(``setting``), and the frameworks' own functions reproduce three public bugs, each named: Dr. GRPO's constant
taken from the padded width (verl #5625, ``loss_scale_factor`` unset), a token mean taken in each micro-batch
alone (the loops before the global batch info), and pack rows taken as sequences (tunix #1662).

Where they come from: requirements/rl-frameworks.txt (not an extra: their pins exclude this project's
transformers), installed with ``--target`` into the folder ``TENSORCAD_RL_FRAMEWORKS`` names, or into the
environment. .ci/run installs them and sets ``TENSORCAD_REQUIRE_RL_FRAMEWORKS``: there a missing one fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tensorcad.runtime.certification.rl.modes import setting  # noqa: E402

HERE = Path(__file__).parent
ROOT = HERE.parents[3]
FOLDER = os.environ.get("TENSORCAD_RL_FRAMEWORKS", "")
TOP = {"verl": "verl", "openrlhf": "openrlhf"}


def _path() -> str:
    return os.pathsep.join(p for p in (FOLDER, str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


@cache
def verdicts(framework: str) -> dict[str, dict]:
    """Each case's verdict, by its name, from one child process a framework (verl's import takes seconds)."""
    found = subprocess.run([sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({framework!r}) "
                            "is not None)"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": _path()})
    if found.stdout.strip() != "True":
        reason = (f"{framework} is not installed: pip install --no-deps --no-build-isolation --target "
                  ".rl-frameworks -r requirements/rl-frameworks.txt, then TENSORCAD_RL_FRAMEWORKS=.rl-frameworks")
        if os.environ.get("TENSORCAD_REQUIRE_RL_FRAMEWORKS"):
            pytest.fail(reason)
        pytest.skip(reason)
    run = subprocess.run([sys.executable, str(HERE / "framework_losses.py"), framework], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": _path(), "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    # deepspeed logs its accelerator on stdout: the verdicts are the lines the script prints as JSON
    lines = [line for line in run.stdout.splitlines() if line.startswith('{"case"')]
    return {d["case"]: d for d in map(json.loads, lines)}


VERL_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@pytest.mark.parametrize("mode", VERL_MODES)
def test_verl_agg_loss_with_its_global_batch_info_is_its_mode_over_ranks_and_micro_batches(mode):
    result = verdicts("verl")[f"verl {mode}, global batch info"]
    assert result["passed"], result["message"]
    assert result["mode"] == setting("verl", mode).mode and (result["ranks"], result["micro_batches"]) == (2, 2)
    assert result["largest_weight_gap"] < 1e-7  # its 1e-8 guard in the sequence means, and no more


def test_verl_without_loss_scale_factor_takes_each_micro_batch_s_padded_width_as_dr_grpo_s_constant():
    result = verdicts("verl")["verl seq-mean-token-sum-norm, no loss_scale_factor"]
    assert not result["passed"]
    # the micro-batches of LENGTHS [5, 17 | 3, 9 | 11, 2 | 20, 8], each padded to its own longest
    assert "C = 17 in micro-batch 0 of rank 0, 9 in micro-batch 1 of rank 0, 11 in micro-batch 0 of rank 1, 20 in " \
           "micro-batch 1 of rank 1, not the constant 20" in result["message"]
    assert "verl #5625" in result["message"]


@pytest.mark.parametrize("case", ["verl token-mean, each micro-batch alone",
                                  "openrlhf PolicyLoss token_level_loss=True, each micro-batch alone"])
def test_a_token_mean_of_each_micro_batch_alone_is_named(case):
    result = verdicts(case.split()[0])[case]
    assert not result["passed"]
    assert result["matched"].startswith("`token-mean` taken in each micro-batch alone, then averaged over the 4 parts")
    # sequence 0 (5 tokens) is in micro-batch 0 of rank 0 with sequence 1 (17): 1/(4 x 22) there, 1/75 globally
    assert "weighs 1/88 where `token-mean` weighs it 1/75" in result["message"]


def test_verl_sequence_means_of_equal_micro_batches_stay_the_global_batch_s():
    # 2 sequences in every micro-batch: seq-mean-token-mean is micro-batch-invariant (docs/rl.md)
    assert verdicts("verl")["verl seq-mean-token-mean, each micro-batch alone"]["passed"]


@pytest.mark.parametrize("case", ["verl agg_loss seq-mean-token-mean, on pack rows",
                                  "openrlhf aggregate_loss token_level_loss=False, on pack rows"])
def test_pack_rows_handed_to_the_framework_as_sequences_are_named(case):
    result = verdicts(case.split()[0])[case]
    assert not result["passed"]
    assert result["matched"].startswith("`seq-mean-token-mean` with each pack row taken as one sequence (4 rows, "
                                        "not 10 sequences")


@pytest.mark.parametrize("case,mode", [("aggregate_loss token_level_loss=True", "True"),
                                       ("aggregate_loss token_level_loss=False", "False"),
                                       ("PolicyLoss token_level_loss=True", "True"),
                                       ("PolicyLoss token_level_loss=False", "False")])
def test_openrlhf_with_its_global_batch_info_is_its_mode(case, mode):
    result = verdicts("openrlhf")[f"openrlhf {case}"]
    assert result["passed"], result["message"]
    assert result["mode"] == setting("openrlhf", mode).mode
    assert result["largest_weight_gap"] < 1e-7
