"""TensorcadCallback in a real TRL SFTTrainer run (tiny random models, packing=True, padding_free=True, CPU).

Each expected verdict is established by the test's own per-document reference
(`gaps_alone`: the batch the collator made, run packed and each document alone)
or by counting in the test, never by the guard: a clean run passes 20 steps,
and each planted fault stops the run at the first audited step naming its cause.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch
from guard_setups import (
    all_ones_mask,
    block_diagonal_mask,
    documents_of_batch,
    gaps_alone,
    labels_across,
    sft_trainer,
    straight_positions,
    tiny_model,
)
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from tensorcad.testing.integrations import TensorcadCallback
from tensorcad.guard import GuardError

LEAK = 1e-3  # the faults move a document's logits by 1e-2 and more; a clean batch by under 1e-5
CLEAN = 1e-4


class KeepBatch:
    """A forward pre-hook keeping the first batch the model received (the reference for a clean run)."""

    def __init__(self, model):
        self.batch = None
        self.handle = model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        if self.batch is None:
            self.batch = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}


def test_a_clean_run_passes_its_20_steps_and_says_so(capsys):
    model = tiny_model("llama", "sdpa").train()
    kept = KeepBatch(model)
    callback = TensorcadCallback(first=1, every=5)
    trainer = sft_trainer(model, [callback])
    trainer.train()
    kept.handle.remove()
    assert trainer.state.global_step == 20
    assert [step for step, _ in callback.guard.reports] == [0, 5, 10, 15]
    assert all(report.passed for _, report in callback.guard.reports)
    assert "tensorcad guard: 4 batches checked, packing held on each" in capsys.readouterr().out
    # The reference: the first batch, packed, is each document alone (the trained model, the batch as received).
    assert max(gaps_alone(model, kept.batch)) < CLEAN


FAULTS = {
    "all-ones attention_mask": ("llama", all_ones_mask,
                                "ran sdpa with is_causal: packing is off because an all-ones attention_mask was "
                                "passed beside position_ids; drop it"),
    "positions that do not restart": ("llama", straight_positions,
                                      "packing is off because position_ids do not restart where seq_idx says a "
                                      "document begins"),
    "a 4D mask that loses Mistral's window": ("mistral", block_diagonal_mask,
                                              "(sliding) ran sdpa with 4D tensor: its window of 16 is lost"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_planted_leak_stops_the_run_at_the_first_audited_step(fault):
    family, plant, cause = FAULTS[fault]
    model = tiny_model(family, "sdpa").train()
    trainer = sft_trainer(model, [TensorcadCallback()], plant)
    with pytest.raises(GuardError) as stopped:
        trainer.train()
    assert trainer.state.global_step == 1  # the first step ran, and the run stopped after it
    assert str(stopped.value).startswith("tensorcad guard, step 0: layer 0 ")
    assert cause in stopped.value.report.cause
    # The reference: the batch the wrapper made, run packed, differs from its documents run alone.
    assert max(gaps_alone(model, trainer.data_collator.first)) > LEAK


def test_labels_crossing_boundaries_stop_the_run():
    model = tiny_model("llama", "sdpa").train()
    trainer = sft_trainer(model, [TensorcadCallback()], labels_across)
    with pytest.raises(GuardError) as stopped:
        trainer.train()
    batch = trainer.data_collator.first
    documents = documents_of_batch(batch)
    starts = torch.nonzero(documents[0, 1:] != documents[0, :-1]).flatten() + 1
    supervised = int((batch["labels"][0, starts] != -100).sum())  # counted here, not by the guard
    assert supervised == len(starts) > 0
    assert stopped.value.report.cause.startswith(f"labels: labels are not -100 at {supervised} documents' first")
    assert trainer.state.global_step == 1


def _causal_only(module, query, key, value, attention_mask, **kwargs):
    """An attention implementation that reads neither position_ids nor the mask: one causal run over the row."""
    kwargs.pop("is_causal", None)
    return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)


def test_an_attention_implementation_that_ignores_position_ids_stops_the_run():
    AttentionInterface.register("tensorcad_test_causal_only", _causal_only)
    model = tiny_model("llama", "tensorcad_test_causal_only").train()
    trainer = sft_trainer(model, [TensorcadCallback()], fault=lambda batch: batch)  # the collator as it is
    with pytest.raises(GuardError) as stopped:
        trainer.train()
    assert trainer.state.global_step == 1
    cause = stopped.value.report.cause
    assert cause.startswith("step[loss] failed on the replica")
    assert "the attention implementation itself ignores them (position_ids and mask)" in cause
    assert max(gaps_alone(model, trainer.data_collator.first)) > LEAK


def test_warn_and_stop_let_the_run_decide():
    model = tiny_model("llama", "sdpa").train()
    callback = TensorcadCallback(on_failure="stop", verbose=False)
    trainer = sft_trainer(model, [callback], all_ones_mask)
    trainer.train()
    assert trainer.state.global_step == 1 and callback.guard.stop_requested
    assert callback.guard.summary().startswith("tensorcad guard: 1 batch checked, 1 failed (first at step 0: layer 0")
