"""tests/guard: the tiny Hugging Face setups of tests/hf on sys.path (guard_setups puts them there), one thread."""

from guard_setups import one_thread  # noqa: F401 - the autouse fixture
