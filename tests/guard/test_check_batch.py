"""`check_batch` in a plain loop: the use_cache fault of a custom loop, and a clean batch, on real models.

The loop calls ``model(**batch)`` as people write it; with ``config.use_cache``
on, transformers builds a cache and stops reading packing from position_ids.
The expected verdicts come from each document run alone, in the test.
"""

from __future__ import annotations

import pytest
import torch
from guard_setups import gaps_alone, tiny_model
from hf_setups import collated

from tensorcad.guard import Guard, GuardError, check_batch, replica


def _loop_batches():
    ids, _, positions, batch = collated()
    labels = batch["labels"] if "labels" in batch else ids.clone()
    return [dict(batch, labels=labels)]


def test_use_cache_in_a_custom_loop_is_found_at_the_first_batch():
    model = tiny_model("llama", "sdpa").train()
    model.config.use_cache = True
    guard = Guard(certify_on=None)
    with pytest.raises(GuardError) as stopped:
        for step, batch in enumerate(_loop_batches()):
            with guard.recording_step(model) as recorded:
                loss = model(**batch).loss
                loss.backward()
            guard.check(model, step, recorded.batch, recorded.calls)
    cause = stopped.value.report.cause
    assert cause.startswith("layer 0 (full) ran sdpa with is_causal: packing is off because use_cache is on")
    assert max(gaps_alone(model, _loop_batches()[0])) > 1e-3  # the loop's own call leaks
    model.config.use_cache = False
    assert max(gaps_alone(model, _loop_batches()[0])) < 1e-4  # and without the cache it does not


def test_a_clean_batch_passes_with_the_certificates_on_a_replica():
    model = tiny_model("mistral", "sdpa")
    [batch] = _loop_batches()
    batch["use_cache"] = False
    report = check_batch(model, batch, certify_on=replica(model))
    assert report.passed, report.message()
    assert set(report.certificates) == {"step[labels]", "step[loss]"}
    assert report.message().startswith("packing holds: layers 0, 1 (sliding) ran sdpa with 4D tensor")
    assert max(gaps_alone(model, batch)) < 1e-4


def test_a_guard_refuses_bad_settings_by_name():
    from tensorcad.errors import TensorcadError

    for kwargs, path in (({"first": -1}, "first"), ({"every": 0}, "every"), ({"on_failure": "ignore"}, "on_failure")):
        with pytest.raises(TensorcadError) as refused:
            Guard(**kwargs)
        assert refused.value.path == path
    assert torch.get_num_threads() == 1  # the suite's one-thread fixture is in force here
