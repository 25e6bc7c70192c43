"""A worker's share of the cores under xdist, and nothing changed outside it."""

from __future__ import annotations

import os

import pytest

from worker_threads import share


def test_two_workers_on_two_cores_take_one_thread_each():
    assert share({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}, 2) == 1
    assert share({"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}, 16) == 8


def test_more_workers_than_cores_still_take_one():
    assert share({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}, 2) == 1


def test_one_process_and_a_threads_setting_of_ones_own_are_left_alone():
    assert share({}, 2) is None
    assert share({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "2"}, 2) is None


def test_this_worker_runs_torch_on_its_share():
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("one process: torch keeps its own pool (the README's command runs under xdist)")
    import torch

    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
