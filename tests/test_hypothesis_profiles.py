"""The hypothesis profile a run gets, and the example counts it scales (tests/hypothesis_profiles.py)."""

from hypothesis import settings

from hypothesis_profiles import BASE, SLOW_FACTOR, choose, scaled


def test_the_profile_follows_the_environment_then_the_marker():
    assert choose({}, "not slow") == "default"
    assert choose({}, "") == "default"
    assert choose({}, "slow") == "slow"
    assert choose({}, "slow and not browser") == "slow"
    assert choose({"HYPOTHESIS_PROFILE": "ci"}, "slow") == "ci"


def test_ci_is_derandomized_and_the_others_explore():
    assert settings.get_profile("ci").derandomize and settings.get_profile("ci").database is None
    assert not settings.get_profile("default").derandomize
    assert settings.get_profile("slow").max_examples == BASE * SLOW_FACTOR


def test_stated_counts_scale_with_the_loaded_profile():
    loaded = settings._current_profile
    try:
        for name, want in (("ci", 600), ("default", 600), ("slow", 3000)):
            settings.load_profile(name)
            assert scaled(600) == want and scaled(1) == (5 if name == "slow" else 1)
    finally:
        settings.load_profile(loaded)
