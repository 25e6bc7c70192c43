"""`tensorcad certify nano-sort` as it runs now (grouped certificates, export opt-in) against the path before
issue 29 (`--each-document --export`: one pass a document, export among the default checks), in the same
run, each in a fresh model cache.

``extra_info`` holds each check's seconds both ways, the ratio of the totals (the figure to read), and the ratio of
the checks both ways run (export left out). What a process pays once is paid by an untimed run first. Nothing is
asserted about time; every check must pass both ways, with the same outcomes.

    python -m pytest benchmarks/bench_certify_methods.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) only the eager isolation check runs, both ways.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

DESIGN = "nano-sort"


def _certify(method: str, only):
    import tensorcad
    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.building.subject import clear_models
    from tensorcad.runtime.certification import certify

    clear_models()
    start = time.perf_counter()
    checks = certify(tensorcad.load(DESIGN), Settings(method=method), only=only)
    return checks, time.perf_counter() - start


def test_certify_grouped_against_each_document(benchmark):
    from tensorcad.runtime.certification import CERTIFY, OPT_IN

    only = ("isolation[eager]",) if benchmark.disabled else CERTIFY
    # What a process pays once (FlexAttention's first compile, the rules' analysis) is paid here, untimed:
    # whichever way ran first would carry it. Imports are outside both (`tensorcad certify` pays ~2.3 s of them).
    _certify("grouped", only)
    each, each_s = _certify("each", only if benchmark.disabled else CERTIFY + OPT_IN)
    grouped, grouped_s = benchmark.pedantic(_certify, args=("grouped", only), rounds=1, iterations=1)
    now = {c.name: c.seconds for c in grouped}
    assert [c.outcome for c in grouped] == [c.outcome for c in each if c.name in now]
    assert all(c.outcome in ("passed", "skipped") for c in grouped), [(c.name, c.message) for c in grouped]
    each_shared_s = sum(c.seconds for c in each if c.name in now)
    benchmark.extra_info.update({
        "design": DESIGN, "each_s": round(each_s, 2), "grouped_s": round(grouped_s, 2),
        "ratio": round(each_s / grouped_s, 2),
        "ratio_without_export": round(each_shared_s / sum(now.values()), 2),
        "seconds": {e.name: {"each": round(e.seconds, 2),
                             "grouped": round(now[e.name], 2) if e.name in now else "not run (opt-in)"}
                    for e in each},
    })
