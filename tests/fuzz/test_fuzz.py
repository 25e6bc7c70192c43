"""Hostile input on every surface: a result, or exactly one line; bounded time and memory; nothing changed.

Each test draws seeded cases (the repo's hypothesis profile is derandomized)
and runs every one in the bounded worker (``worker.py``: an address-space
limit and an alarm per case). The default run tries the counts in DEFAULT;
``-m slow`` tries SLOW more of each, with other draws.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings

import hostile
import hostile_files
import hostile_four

# 2,020 cases in about 40 s on one core: the CLI's parser built once (worker.py) and one MCP session for the run
# made a CLI or file case about 15 ms instead of 35, so the cheap surfaces draw more for the same time.
DEFAULT = {"design": 350, "expression": 320, "cli": 700, "mcp": 160, "http": 250, "file": 240,
           # round four (#47): 2,100 cases of the surfaces added since, most of them cheap
           "scheduler": 600, "launcher": 500, "guard": 400, "hybrid": 250, "mixer": 150, "step": 200}
SLOW = {"design": 1100, "expression": 1600, "cli": 1300, "mcp": 800, "http": 1000, "file": 1000,
        "scheduler": 2000, "launcher": 1500, "guard": 1500, "hybrid": 1000, "mixer": 600, "step": 800}
SCALE = float(os.environ.get("TENSORCAD_FUZZ_SCALE", "1"))  # for a quick look while working; CI uses 1
SURFACES = {"design": hostile.design_files(), "expression": hostile.expressions, "cli": hostile.argvs(),
            "mcp": hostile.mcp_calls(), "http": hostile.http_requests(), "file": hostile_files.files,
            "scheduler": hostile_four.scheduler_addresses(), "launcher": hostile_four.launcher_argvs(),
            "guard": hostile_four.guard_settings(), "hybrid": hostile_four.hybrid_configs(),
            "mixer": hostile_four.mixer_designs(), "step": hostile_four.step_batches()}


def _case(surface: str, drawn) -> dict:
    if surface == "design":
        return {"surface": surface, "suffix": drawn[0], "text": drawn[1]}
    if surface == "expression":
        field = "score" if drawn.startswith("score") or "bias(" in drawn else "mask"
        return {"surface": surface, "field": field, "text": drawn}
    if surface == "cli":
        return {"surface": surface, "argv": drawn}
    if surface in ("mcp", "file", "scheduler", "launcher", "guard", "hybrid", "mixer", "step"):
        return {"surface": surface, **drawn}
    return {"surface": surface, "request": drawn}


def _fuzz(bounded, surface: str, examples: int, salt: int) -> None:
    failures: list[tuple[dict, dict]] = []
    tried = []

    @seed(salt)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=("generate",))
    @given(SURFACES[surface])
    def run(drawn):
        case = _case(surface, drawn)
        verdict = bounded.run(case)
        tried.append(verdict.get("outcome"))
        if not verdict["ok"]:
            failures.append((case, verdict))

    run()
    # Every drawn case was run; shrinking is off (phases) so a failure is reported as drawn, all of them at once.
    assert len(tried) >= examples * 0.95, f"only {len(tried)} of {examples} {surface} cases ran"
    shown = "\n".join(f"{v['why']}\n    case: {str(c)[:400]}" for c, v in failures[:10])
    assert not failures, f"{len(failures)} of {len(tried)} {surface} cases broke the promise:\n{shown}"
    # The suite is not all refusals: some cases of each surface succeed, so the success path is exercised too.
    assert "result" in tried, f"no {surface} case succeeded: the strategy is not reaching the engine"


@pytest.mark.parametrize("surface", sorted(DEFAULT))
def test_hostile_input(bounded, surface):
    _fuzz(bounded, surface, max(1, int(DEFAULT[surface] * SCALE)), salt=12)


@pytest.mark.slow
@pytest.mark.parametrize("surface", sorted(SLOW))
def test_hostile_input_at_length(bounded, surface):
    _fuzz(bounded, surface, max(1, int(SLOW[surface] * SCALE)), salt=1212)
