"""The guard's test pieces: TRL SFTTrainer runs on tiny random models, the faults planted in them, and the
per-document reference every expected verdict is established from (each document run alone, in the test).

```python
from guard_setups import sft_trainer, gaps_alone   # tests/guard is on sys.path under pytest
```
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf"))
from hf_setups import VOCAB, block_diagonal, tiny_model

# Documents of 5 to 40 tokens: many longer than Mistral's window (16), many shorter.
DOCUMENTS = 48


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny models' matmuls are too small to split: one thread beats two on a shared 2-core machine (measured:
    a 20-step SFTTrainer run 8 s against 48 s under load). Autouse where a conftest imports it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def dataset(seed: int = 0):
    import datasets

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 41, size=DOCUMENTS)
    return datasets.Dataset.from_list([{"input_ids": rng.integers(2, VOCAB, size=int(n)).tolist()}
                                       for n in lengths])


def tokenizer():
    """A word-level tokenizer over the tiny vocabulary (SFTTrainer wants one; the data is already token ids)."""
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(VOCAB)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                unk_token="t0", pad_token="t0", eos_token="t1")


class Wrapped:
    """A collator wrapper planting a fault; keeps the first batch it made (the test's reference reads it: the
    loader may collate the next batch before a step ends)."""

    def __init__(self, collator, fault):
        self.collator, self.fault, self.first = collator, fault, None

    def __call__(self, examples):
        batch = self.fault(self.collator(examples))
        if self.first is None:
            self.first = batch
        return batch


def all_ones_mask(batch):
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return batch


def straight_positions(batch):
    batch["position_ids"] = torch.arange(batch["input_ids"].shape[1])[None].expand_as(batch["input_ids"]).clone()
    return batch


def block_diagonal_mask(batch):
    """The 4D wrapper that loses Mistral's window: same document and causal, no window."""
    from tensorcad.packing import documents_of_seq_idx

    batch["attention_mask"] = block_diagonal(documents_of_seq_idx(batch["seq_idx"]))
    return batch


def labels_across(batch):
    batch["labels"] = batch["input_ids"].clone()
    return batch


def sft_trainer(model, callbacks=(), fault=None, steps: int = 20, seed: int = 0):
    """TRL's SFTTrainer, packing=True and padding_free=True, on CPU; ``fault`` wraps its collator."""
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(Path("/tmp") / "tensorcad-guard-sft"), max_steps=steps,
                     per_device_train_batch_size=2, packing=True, padding_free=True, max_length=96, report_to=[],
                     logging_steps=1000, save_strategy="no", use_cpu=True, learning_rate=1e-3, seed=seed,
                     disable_tqdm=True, bf16=False)  # float32: the reference compares logits to 1e-4
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset(seed), processing_class=tokenizer(),
                         callbacks=list(callbacks))
    if fault is not None:
        trainer.data_collator = Wrapped(trainer.data_collator, fault)
    return trainer


def documents_of_batch(batch) -> torch.Tensor:
    from tensorcad.packing import documents_of_seq_idx

    return documents_of_seq_idx(batch["seq_idx"])


def gaps_alone(model, batch) -> list[float]:
    """Per document of row 0: the largest |model(**batch) logits - the document run alone|, in the test's own code."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    documents = documents_of_batch(batch)[0]
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = model(**inputs).logits[0]
            gaps = []
            for d in torch.unique(documents).tolist():
                where = torch.nonzero(documents == d).flatten()
                first, end = int(where[0]), int(where[-1]) + 1
                alone = model(input_ids=batch["input_ids"][:, first:end], use_cache=False).logits[0]
                gaps.append(float((packed[first:end] - alone).abs().max()))
    finally:
        model.train(was)
    return gaps


__all__ = [
    "Wrapped",
    "all_ones_mask",
    "block_diagonal_mask",
    "documents_of_batch",
    "gaps_alone",
    "labels_across",
    "sft_trainer",
    "straight_positions",
    "tiny_model",
]
