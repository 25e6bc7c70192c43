"""The batch audit on DataCollatorWithFlattening's own batches, with one setting changed at a time.

Each expected finding is the test's own count (documents from the collator's
seq_idx, labels read in the test); a clean collator batch has none.
"""

from __future__ import annotations

import torch
from guard_setups import tiny_model
from hf_setups import LENGTHS, collated, features
from transformers import DataCollatorWithFlattening

from tensorcad.guard import audit_batch


def _batch():
    collator = DataCollatorWithFlattening(return_seq_idx=True, return_flash_attn_kwargs=True)
    feats = [dict(f, labels=list(f["input_ids"])) for f in features()]
    return dict(collator(feats), use_cache=False)


def _starts():
    return torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()[:-1]])


def test_a_collator_batch_has_no_finding():
    assert audit_batch(tiny_model("llama"), _batch()) == []


def test_positions_that_do_not_restart_are_found_against_seq_idx_and_cu_seq_lens():
    batch = _batch()
    batch["position_ids"] = torch.arange(batch["input_ids"].shape[1])[None]
    [finding] = audit_batch(tiny_model("llama"), batch)
    assert finding.setting == "position_ids" and finding.switches_packing_off
    assert f"({len(LENGTHS) - 1} documents, first at row 0, token {LENGTHS[0]})" in finding.line
    del batch["seq_idx"]
    [finding] = audit_batch(tiny_model("llama"), batch)
    assert "where cu_seq_lens_q says a document begins" in finding.line


def test_labels_at_a_documents_first_token_are_found_and_counted():
    batch = _batch()
    starts = _starts()
    batch["labels"][0, starts[1:3]] = 5  # two documents' first tokens supervised
    [finding] = audit_batch(tiny_model("llama"), batch)
    assert finding.setting == "labels"
    assert finding.line.startswith(f"labels are not -100 at 2 documents' first tokens (first at row 0, token "
                                   f"{int(starts[1])})")


def test_shift_labels_are_read_at_each_documents_last_token():
    batch = _batch()
    del batch["labels"]
    ids = batch["input_ids"]
    shifted = torch.full_like(ids, -100)
    shifted[:, :-1] = ids[:, 1:]  # the next token at every position: across each boundary too
    batch["shift_labels"] = shifted
    [finding] = audit_batch(tiny_model("llama"), batch)
    assert finding.setting == "shift_labels" and f"at {len(LENGTHS) - 1} documents' last tokens" in finding.line


def test_padding_supervised_is_found():
    ids = torch.tensor([[3, 4, 5, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1, 0, 0]]), "labels": ids.clone()}
    [finding] = audit_batch(tiny_model("llama"), batch)
    assert finding.line.startswith("2 padding tokens (attention_mask 0) are supervised (first at row 0, token 3)")


def test_the_settings_that_switch_packing_off_are_each_named():
    model = tiny_model("llama")
    ones = dict(_batch(), attention_mask=torch.ones_like(_batch()["input_ids"]))
    assert [f.line.split(";")[0] for f in audit_batch(model, ones)] == [
        "an all-ones attention_mask was passed beside position_ids"]
    cached = {k: v for k, v in _batch().items() if k != "use_cache"}
    model.config.use_cache = True
    [finding] = audit_batch(model, cached)
    assert finding.setting == "use_cache" and finding.switches_packing_off
    model.config.use_cache = False
    assert audit_batch(model, cached) == []
    flash = tiny_model("llama")
    flash.config._attn_implementation = "flash_attention_2"  # read, never run: CPU has no flash kernel
    [_, finding] = audit_batch(flash, ones)
    assert finding.setting == "attn_implementation" and "ignores position_ids" in finding.line


def test_documents_are_read_from_every_representation():
    from tensorcad.guard.audit import representations  # the module's helper: a test of it

    ids, documents, positions, batch = collated()
    found = representations(batch)
    assert set(found) == {"seq_idx", "cu_seq_lens_q", "cu_seq_lens_k", "position_ids"}
    for key, value in found.items():
        assert torch.equal(value, documents), key
