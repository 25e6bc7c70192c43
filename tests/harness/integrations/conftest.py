"""The callbacks' tests share tests/guard's setups (the SFTTrainer runs, the planted faults, the per-document
reference)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "guard"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny models' matmuls are too small to split: one thread beats two on a shared 2-core machine (measured:
    a 20-step SFTTrainer run 8 s against 48 s under load)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
