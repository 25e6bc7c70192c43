"""The guard under hostile input (issue 47): settings refused where they are given, the run's choice honoured.

Before this round (049439c, run here): ``Guard(certificates="step[loss]")`` and ``Guard(certify_on=5)`` were
accepted and refused only at the first audited step; ``Guard(certificates=None)`` raised TypeError; with
``on_failure="warn"`` or ``"stop"`` a malformed batch (float positions, every label -100) raised a
TensorcadError mid-run instead of warning or stopping.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from guard_setups import tiny_model
from hf_setups import collated

from tensorcad.errors import TensorcadError
from tensorcad.guard import Guard


@pytest.mark.parametrize("kwargs, path", [
    ({"certificates": "step[loss]"}, "certificates"), ({"certificates": None}, "certificates"),
    ({"certificates": ["step[nope]"]}, "certificates"), ({"certificates": [5]}, "certificates"),
    ({"certify_on": 5}, "certify_on"), ({"certify_on": "model"}, "certify_on"),
    ({"certificates": ["x" * 5000]}, "certificates"),
])
def test_bad_settings_are_refused_at_construction_in_one_line(kwargs, path):
    with pytest.raises(TensorcadError) as refused:
        Guard(**kwargs)
    assert refused.value.path == path
    assert "\n" not in str(refused.value) and len(str(refused.value)) <= 300


def _malformed():
    ids, _, positions, batch = collated()
    labels = torch.full_like(ids, -100)  # nothing trained: the step certificates cannot read it
    return dict(batch, labels=labels)


@pytest.mark.parametrize("on_failure", ["warn", "stop"])
def test_a_malformed_batch_warns_or_stops_as_the_run_asked(on_failure):
    model = tiny_model("llama", "sdpa")
    guard = Guard(on_failure=on_failure)
    batch = _malformed()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with guard.recording_step(model) as recorded:
            model(**batch)
        guard.check(model, 0, recorded.batch, recorded.calls)
    if on_failure == "warn":
        said = [str(w.message) for w in seen if "tensorcad guard" in str(w.message)]
        assert said and "batch.labels" in said[0] and "\n" not in said[0]
    else:
        assert guard.stop_requested
    with pytest.raises(TensorcadError):  # raise, the default, still raises
        strict = Guard()
        with strict.recording_step(model) as recorded:
            model(**batch)
        strict.check(model, 0, recorded.batch, recorded.calls)


@pytest.mark.parametrize("batch, message", [
    ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, "of shape (1, 0)"),  # was IndexError in the audit
    ({"input_ids": torch.zeros(0, 5, dtype=torch.long)}, "of shape (0, 5)"),  # was torch's reshape RuntimeError
    ({"input_ids": torch.zeros(2, 5)}, "torch.float32"),
    ({}, "expected a tensor, got NoneType"),  # was transformers' ValueError
])
def test_check_batch_on_an_empty_or_idless_batch_is_one_line(batch, message):
    from tensorcad.guard import check_batch

    with pytest.raises(TensorcadError) as refused:
        check_batch(tiny_model("llama", "sdpa"), batch)
    assert refused.value.path.startswith("batch") and message in str(refused.value)


def test_a_guard_error_is_one_line_of_at_most_300_characters_and_the_report_keeps_the_rest():
    """Before: a GuardError was 2 to 5 lines and 500 to 1,500 characters (every failing line joined), where
    docs/guard.md promises the cause in one line."""
    from tensorcad.guard import GuardError

    model = tiny_model("llama", "sdpa")
    ids, _, positions, batch = collated()
    # Three faults at once: the cache on, an all-ones 2-D mask, and labels that cross every boundary.
    bad = dict(batch, attention_mask=torch.ones_like(ids), labels=ids.clone(), use_cache=True)
    guard = Guard(certify_on="replica")
    with pytest.raises(GuardError) as stopped:
        with guard.recording_step(model) as recorded:
            model(**bad)
        guard.check(model, 0, recorded.batch, recorded.calls)
    text, failures = str(stopped.value), stopped.value.report.failures
    assert len(failures) >= 2 and len("\n".join(failures)) > 300
    assert "\n" not in text and len(text) <= 300
    assert text.startswith("tensorcad guard, step 0: ") and text.endswith(f"(and {len(failures) - 1} more in .report)")
