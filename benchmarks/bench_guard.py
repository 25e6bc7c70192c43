"""What the guard costs a real run: TRL's SFTTrainer (tiny Llama, packing=True, padding_free=True, CPU), 20 steps,
with TensorcadCallback (first=1, every=5: 4 batches checked, step[labels] and step[loss] on the replica) and
without, timed in the same test. ``extra_info`` holds the callback's share of the guarded run, (guarded - plain)
/ guarded, and the guard's own clock (``guard.seconds``) over the guarded run's: ratios travel between machines,
absolute times do not. Nothing is asserted about time; the guarded run must pass.

    python -m pytest benchmarks/bench_guard.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) each run is 2 steps: a test that the guarded run still runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "guard"))
import torch
from guard_setups import sft_trainer, tiny_model

from tensorcad.testing.integrations import TensorcadCallback


def _run(steps: int, guarded: bool):
    callback = TensorcadCallback(first=1, every=5, verbose=False) if guarded else None
    trainer = sft_trainer(tiny_model("llama", "sdpa").train(), [callback] if callback else [], steps=steps)
    started = time.perf_counter()
    trainer.train()
    return time.perf_counter() - started, callback


def test_guard_share_of_an_sft_run(benchmark):
    steps = 2 if benchmark.disabled else 20
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests run it: the tiny model's matmuls gain nothing from a second thread
    try:
        plain, _ = _run(steps, guarded=False)
        guarded_times, callbacks = [], []

        def guarded():
            seconds, callback = _run(steps, guarded=True)
            guarded_times.append(seconds)
            callbacks.append(callback)

        benchmark.pedantic(guarded, rounds=1, iterations=1)
    finally:
        torch.set_num_threads(threads)
    callback, seconds = callbacks[-1], guarded_times[-1]
    assert all(report.passed for _, report in callback.guard.reports)
    benchmark.extra_info.update(steps=steps, batches_checked=len(callback.guard.reports),
                                callback_share=round((seconds - plain) / seconds, 3),
                                guard_clock_share=round(callback.guard.seconds / seconds, 3))
