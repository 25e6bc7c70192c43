"""The suite's hypothesis profiles, and the example counts property tests state.

- ``ci``: derandomized (every run draws the same examples, so a CI failure reproduces
  anywhere), no example database, the counts each test states. `.ci/run` uses it.
- ``default``: the counts each test states, examples drawn afresh each run (and failures
  kept in .hypothesis/ and replayed first), so runs on a developer's machine explore.
- ``slow``: five times each stated count, drawn afresh; chosen by ``-m slow``.

HYPOTHESIS_PROFILE names one outright. Tests state their counts as ``scaled(n)``: n under
ci and default, 5n under slow. tests/README.md lists the counts.
"""

from __future__ import annotations

from hypothesis import settings

BASE = 100  # max_examples of ci and default, for a test that states no count of its own
SLOW_FACTOR = 5

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          max_examples=BASE, print_blob=True)
# derandomize=False said outright: with CI set in the environment hypothesis's own
# defaults derandomize, and a registered profile inherits them.
settings.register_profile("default", deadline=None, max_examples=BASE, derandomize=False)
settings.register_profile("slow", deadline=None, max_examples=BASE * SLOW_FACTOR, derandomize=False)


def choose(environ: dict, markexpr: str) -> str:
    """The profile a run uses: HYPOTHESIS_PROFILE, else ``slow`` under ``-m slow``, else default."""
    if environ.get("HYPOTHESIS_PROFILE"):
        return environ["HYPOTHESIS_PROFILE"]
    selects_slow = "slow" in markexpr and "not slow" not in markexpr
    return "slow" if selects_slow else "default"


def scaled(count: int) -> int:
    """A test's stated example count under the loaded profile."""
    return max(1, count * settings().max_examples // BASE)
