"""`pytest --tensorcad-guard`: a user's own Trainer test, guarded without a line changed (pytester, real Trainer).

The leaking test's batch (an all-ones attention_mask beside packed
position_ids) is shown leaking by the test itself: its documents run alone
differ from the packed row.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

USER_TEST = '''
import torch, transformers

def run(fault):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(2, 64, (int(n),), generator=g).tolist()} for n in (9, 30, 5, 22) * 2]
    flatten = transformers.DataCollatorWithFlattening()

    def collate(examples):
        batch = flatten(examples)
        if fault:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        collate.first = collate.first or batch
        return batch

    collate.first = None
    args = transformers.TrainingArguments(output_dir="out", max_steps=2, per_device_train_batch_size=4,
                                          report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate)
    try:
        trainer.train()
    finally:
        run.batch, run.model = collate.first, model

def test_clean():
    run(fault=False)

def test_leaking():
    run(fault=True)
'''


def test_the_guard_fails_only_the_leaking_training_test(pytester):
    pytester.makepyfile(test_user_training=USER_TEST)
    result = pytester.runpytest_inprocess("--tensorcad-guard", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*GuardError: tensorcad guard, step 0: layer 0 (full) ran sdpa with is_causal: "
                                 "packing is off because an all-ones attention_mask was passed beside position_ids*"])


def test_the_leaking_batch_does_leak():
    import sys
    import types

    import torch

    module = types.ModuleType("user_training")
    exec(compile(USER_TEST, "user_training", "exec"), module.__dict__)
    sys.modules.pop("user_training", None)
    module.run(fault=True)
    batch, model = module.run.batch, module.run.model
    starts = (batch["position_ids"][0] == 0).nonzero().flatten().tolist() + [batch["input_ids"].shape[1]]
    with torch.no_grad():
        packed = model(**batch).logits[0]
        gaps = [float((packed[a:b] - model(input_ids=batch["input_ids"][:, a:b]).logits[0]).abs().max())
                for a, b in zip(starts, starts[1:])]
    assert max(gaps) > 1e-3
