"""The callbacks' tests share tests/guard's setups (the SFTTrainer runs, the planted faults, the per-document
reference)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "guard"))


from guard_setups import one_thread  # noqa: F401 - the fixture, used by every test here
