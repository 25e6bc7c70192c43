"""What the RL guard costs a real run: TRL's GRPOTrainer (tiny Llama, CPU, 4 completions a prompt), 100 steps,
with TensorcadRLCallback at its defaults (the first step audited: rl[logprobs] on the rows its loss scores) and
without, timed in the same test, three of each interleaved (the fastest kept). ``extra_info`` holds the callback's share of the guarded run, (guarded - plain)
/ guarded, and the guard's own clock over the guarded run's (issue 43 asks at most 5%). The guarded run must
pass.

    python -m pytest benchmarks/bench_rl_guard.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) each run is 2 steps: a test that the guarded run still runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "testing" / "integrations"))
import torch
from test_rl_callback import grpo

from tensorcad.testing.integrations import TensorcadRLCallback


def _run(tmp_path, steps: int, guarded: bool):
    trainer = grpo(tmp_path, steps=steps)
    callback = TensorcadRLCallback(trainer, verbose=False) if guarded else None
    if callback is not None:
        trainer.add_callback(callback)
    started = time.perf_counter()
    trainer.train()
    return time.perf_counter() - started, callback


def test_rl_guard_share_of_a_grpo_run(benchmark, tmp_path):
    steps = 2 if benchmark.disabled else 100
    rounds = 1 if benchmark.disabled else 3
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    plain, guarded = [], []
    try:
        for r in range(rounds):  # interleaved, the fastest of each kept: a tiny run's noise is the size of the guard
            plain.append(_run(tmp_path / f"plain{r}", steps, guarded=False)[0])
            if r < rounds - 1:
                guarded.append(_run(tmp_path / f"guarded{r}", steps, guarded=True))
        benchmark.pedantic(lambda: guarded.append(_run(tmp_path / "guarded", steps, guarded=True)), rounds=1,
                           iterations=1)
    finally:
        torch.set_num_threads(threads)
    seconds, callback = min(guarded, key=lambda run: run[0])
    assert all([report.passed for _, report in c.guard.reports] == [True] for _, c in guarded)
    benchmark.extra_info.update(steps=steps, batches_checked=len(callback.guard.reports),
                                plain_seconds=round(min(plain), 3), guarded_seconds=round(seconds, 3),
                                callback_share=round((seconds - min(plain)) / seconds, 4),
                                guard_clock_share=round(callback.guard.seconds / seconds, 4))
