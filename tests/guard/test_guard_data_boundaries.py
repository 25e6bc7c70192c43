"""The guard runs data[boundaries] on the batches it audits: the packer's lengths against what the model received.

A real tiny transformers model in a plain loop, batches from
DataCollatorWithFlattening; the packer's lengths are the ones the test gave
the collator. The planted fault is LlamaFactory #10452 / VeOmni #746's: the
packer padded the row's tail, and the padding's position_ids are zeros.
"""

from __future__ import annotations

import pytest
import torch
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


def _kernel_lines(report) -> list[str]:
    return [f.line for f in report.findings if f.setting == "data[boundaries] kernel"]


def test_at_the_kernel_the_clean_run_keeps_the_packers_documents():
    model = tiny_model("llama", "sdpa")
    _, _, _, batch = collated()
    guard = Guard(certify_on=None, lengths=lambda received: [list(LENGTHS)])
    _step(guard, model, dict(batch, use_cache=False))
    [(_, report)] = guard.reports
    assert report.passed and _kernel_lines(report) == []
    assert all(p.mask == "4D tensor" for p in report.paths)  # transformers built the block-diagonal mask


@pytest.mark.parametrize("fault", ["all-ones mask", "cache on"])
def test_at_the_kernel_is_causal_merges_the_packers_documents(fault):
    """The batch carries the packer's boundaries (position_ids restart at each document), but an all-ones 2D mask
    or the cache sends SDPA down is_causal: the kernel sees one document a row. Held to the packer's lengths."""
    model = tiny_model("llama", "sdpa")
    ids, _, _, batch = collated()
    bad = dict(batch, attention_mask=ids.new_ones(ids.shape), use_cache=False) if fault == "all-ones mask" else \
        dict(batch, use_cache=True)
    guard = Guard(certify_on=None, lengths=lambda received: [list(LENGTHS)], on_failure="warn")
    with pytest.warns(UserWarning):
        _step(guard, model, bad)
    [(_, report)] = guard.reports
    lines = _kernel_lines(report)
    first = LENGTHS[0]
    assert lines and lines[0] == (f"layer 0 (sdpa with is_causal): row 0's token {first} (document 1) sees token 0 "
                                  "(document 0): the kernel merges documents the packer kept apart")


def test_at_the_kernel_positions_restarting_late_split_and_merge_the_packers_documents():
    """A collator whose position_ids restart two tokens late: transformers' mask follows the positions, so the
    kernel lets the first two tokens of document 1 see document 0 — held to the packer's lengths, it merges."""
    model = tiny_model("llama", "sdpa")
    _, _, _, batch = collated()
    positions = batch["position_ids"].clone()
    first = LENGTHS[0]
    positions[0, first:first + 2] = positions[0, first - 1] + torch.arange(1, 3)  # document 0 runs on 2 tokens
    positions[0, first + 2:first + LENGTHS[1]] -= 2
    guard = Guard(certify_on=None, lengths=lambda received: [list(LENGTHS)], on_failure="warn")
    with pytest.warns(UserWarning):
        _step(guard, model, dict(batch, position_ids=positions, use_cache=False))
    [(_, report)] = guard.reports
    lines = _kernel_lines(report)
    assert lines and lines[0].startswith(f"layer 0 (sdpa with 4D tensor): row 0's token {first} (document 1) sees "
                                         "token 0 (document 0)")


def test_at_the_kernel_a_document_the_packer_made_whole_but_the_batch_restarts_is_split():
    """The packer made documents 0 and 1 one document (a chat of two turns); the collator restarted positions
    between them (torchtitan #3130's EOS id inside a chat): the kernel keeps them apart, so it splits the packer's."""
    model = tiny_model("llama", "sdpa")
    _, _, _, batch = collated()
    packer = [[LENGTHS[0] + LENGTHS[1], *LENGTHS[2:]]]
    guard = Guard(certify_on=None, lengths=lambda received: packer, on_failure="warn")
    with pytest.warns(UserWarning):
        _step(guard, model, dict(batch, use_cache=False))
    [(_, report)] = guard.reports
    lines = _kernel_lines(report)
    assert lines and lines[0] == (f"layer 0 (sdpa with 4D tensor): row 0's token {LENGTHS[0]} cannot see token 0 of "
                                  "its own document 0: the kernel splits a document the packer made whole")


def test_packer_documents_leave_padding_out():
    from tensorcad.guard.kernel import packer_documents

    assert packer_documents([[2, 3], [4]], 6).tolist() == [[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, -1, -1]]
