"""tensorcad's test harness: plain assertions, and the pytest plugin built on them.

```python
from tensorcad.testing import assert_isolated, assert_faithful, assert_gradients_isolated
from tensorcad.testing import assert_closed_form, assert_block_counts_agree, hf_causal_lm
assert_isolated(model_fn, ids, documents, positions=None)   # tokens and boundaries moved: nothing else moves
assert_faithful(model_fn, ids, documents, positions)        # each document as if run alone
assert_gradients_isolated(model_fn, ids, documents, positions)  # no gradient crosses documents
assert_step_faithful(model, batch, reduction="token", accumulation="num_items_in_batch")  # the training step
assert_closed_form(design, op, rel=0.02)
assert_block_counts_agree(design, op, rows=64)
assert_isolated(hf_causal_lm(model), ids, documents)      # a Hugging Face model, packed position_ids
assert_cp_plan(plan, batch, world_size)                     # a context-parallel split loses and leaks nothing
assert_data_coverage(corpus, make_loader, resume_at=37)     # every example of an epoch once, across a resume
assert_data_boundaries(batch, lengths, eos_id=eos)          # the boundaries the model gets are the packer's
assert_rl_aggregation(loss_fn, batch, "dr_grpo", framework="trl", constant=256, micro_batches=2)  # RL (tensorcad.testing.rl)
assert_vision_packed(model, rows.inputs, rows.documents)    # samples with images packed: each as if alone
```

None of these needs pytest. Names load on first use, so the plugin (which
pytest loads in every project that installs tensorcad) costs nothing until a
test asks for it.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "assert_isolated": "tensorcad.testing.assertions",
    "assert_faithful": "tensorcad.testing.assertions",
    "assert_gradients_isolated": "tensorcad.testing.assertions",
    "CertificateError": "tensorcad.testing.assertions",
    "assert_step_faithful": "tensorcad.testing.step",
    "assert_step_labels": "tensorcad.testing.step",
    "assert_step_loss": "tensorcad.testing.step",
    "assert_step_gradients": "tensorcad.testing.step",
    "assert_step_accumulation": "tensorcad.testing.step",
    "assert_eval_parity": "tensorcad.testing.step",
    "assert_closed_form": "tensorcad.testing.assertions",
    "assert_block_counts_agree": "tensorcad.testing.assertions",
    "NoClosedForm": "tensorcad.testing.assertions",
    "assert_cp_plan": "tensorcad.testing.context_parallel",
    "assert_data_coverage": "tensorcad.testing.data",
    "assert_data_boundaries": "tensorcad.testing.data",
    "assert_rl_aggregation": "tensorcad.testing.rl",
    "assert_rl_logprobs": "tensorcad.testing.rl",
    "assert_rl_alignment": "tensorcad.testing.rl",
    "assert_rl_metrics": "tensorcad.testing.rl",
    "assert_vision_packed": "tensorcad.testing.vision",
    "adapt": "tensorcad.hf",
    "call": "tensorcad.hf",
    "hf_causal_lm": "tensorcad.hf",
    "run_checks": "tensorcad.testing.checks",
    "CheckResult": "tensorcad.testing.checks",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorcad.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
