"""Repo-level pytest setup for tensorcad's own suite (pytester is enabled in pyproject)."""

import os

# Hypothesis runs the same examples on every machine: a failure in CI reproduces here.
from hypothesis import settings

settings.register_profile("tensorcad", derandomize=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tensorcad"))
