"""Suite-wide pytest setup: the hypothesis profile (tests/hypothesis_profiles.py says which and why), and
torch's threads a worker under xdist (tests/worker_threads.py)."""

import os

from hypothesis import settings

from hypothesis_profiles import choose  # tests/, on sys.path beside this conftest
from worker_threads import limit

limit()  # before any test module imports torch


def pytest_configure(config):
    # -m is known only here, after the command line is read and before any test module is imported.
    settings.load_profile(choose(os.environ, config.getoption("markexpr") or ""))


def pytest_report_header(config):
    return f"hypothesis profile: {settings._current_profile}"
