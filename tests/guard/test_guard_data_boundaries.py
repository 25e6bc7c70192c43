"""The guard runs data[boundaries] on the batches it audits: the packer's lengths against what the model received.

A real tiny transformers model in a plain loop, batches from
DataCollatorWithFlattening; the packer's lengths are the ones the test gave
the collator. The planted fault is LlamaFactory #10452 / VeOmni #746's: the
packer padded the row's tail, and the padding's position_ids are zeros.
"""

from __future__ import annotations

import pytest
from guard_setups import tiny_model
from hf_setups import LENGTHS, collated

from tensorcad.guard import Guard, GuardError


def _step(guard: Guard, model, batch) -> None:
    with guard.recording_step(model) as recorded:
        model(**batch)
    guard.check(model, 0, recorded.batch, recorded.calls)


def test_the_collators_batch_holds_the_packers_lengths():
    model = tiny_model("llama", "sdpa")
    _, _, _, batch = collated()
    guard = Guard(certify_on=None, lengths=lambda received: [list(LENGTHS)])
    _step(guard, model, dict(batch, use_cache=False))
    [(_, report)] = guard.reports
    assert report.passed, report.message()


def test_padding_zeros_in_position_ids_fail_the_first_batch_naming_them():
    model = tiny_model("llama", "sdpa")
    _, _, _, batch = collated()
    positions = batch["position_ids"].clone()
    positions[0, -4:] = 0  # the packer's last 4 tokens are padding, their positions zeros
    packer = [[*LENGTHS[:-1], LENGTHS[-1] - 4]]
    guard = Guard(certify_on=None, lengths=lambda received: packer)
    with pytest.raises(GuardError) as stopped:
        _step(guard, model, dict(batch, position_ids=positions, use_cache=False))
    filled = sum(LENGTHS) - 4
    assert (f"data[boundaries] position_ids: row 0's 4 tokens of padding (from position {filled}) are read as "
            "4 documents") in stopped.value.report.failures
    assert len(str(stopped.value).splitlines()) == 1 and str(stopped.value).endswith("(and 1 more in .report)")
