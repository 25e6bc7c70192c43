"""TensorcadLightningCallback in a real `lightning` run: a plain module over a generated model whose attention
is FlexAttention with the document mask (on CPU its training runs the same mask_mod in the eager form).

Clean, the run passes; with the mask's document conjunct dropped (the same
design, causal only), it stops at the first step. Each expected verdict is the
test's own: each document run alone against the packed row.
"""

from __future__ import annotations

import pytest

lightning = pytest.importorskip("lightning")

import torch
import torch.nn.functional as F

import tensorcad
from tensorcad.testing.integrations import TensorcadLightningCallback
from tensorcad.guard import GuardError
from tensorcad.runtime.building import build, scale

# The generated model says it trains through its eager form on CPU (no flex backward there): expected here.
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention has no backward on CPU:UserWarning")

LENGTHS = (9, 30, 3, 21, 14, 19)


def _model(documents_kept: bool):
    raw = _nano_raw()
    if not documents_kept:
        raw["nodes"][1]["params"]["block"]["params"]["attention"].pop("mask")  # causal only
        del raw["nodes"][1]["in"]["doc"]
    return build(scale(tensorcad.load(raw), params=60_000), form="flex").train()


def _nano_raw():
    import json
    from pathlib import Path

    return json.loads((Path(tensorcad.__file__).parent / "presets" / "nano-sort.json").read_text())


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    documents = torch.cat([torch.full((n,), i) for i, n in enumerate(LENGTHS)])[None]
    ids = torch.randint(0, 16, documents.shape, generator=generator)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return {"input_ids": ids, "documents": documents, "labels": ids.masked_fill(starts, -100)}


class Packed(lightning.LightningModule):
    """A plain module: next-token cross-entropy over the generated model's logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, index):
        logits = self.model(batch["input_ids"], batch["documents"])
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


def _fit(model, callback, steps=4):
    loader = torch.utils.data.DataLoader([_batch(s) for s in range(steps)], batch_size=None)
    trainer = lightning.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
    trainer.fit(Packed(model), loader)
    return trainer


def _gap_alone(model) -> float:
    batch = _batch()
    model.form = "eager"  # the same mask_mod in plain matmuls: no FlexAttention compile for the reference
    with torch.no_grad():
        packed = model(batch["input_ids"], batch["documents"])[0]
        gaps, first = [], 0
        for n in LENGTHS:
            alone = model(batch["input_ids"][:, first:first + n], torch.zeros(1, n, dtype=torch.long))[0]
            gaps.append(float((packed[first:first + n] - alone).abs().max()))
            first += n
    return max(gaps)


def test_a_clean_run_passes(capsys):
    model = _model(documents_kept=True)
    callback = TensorcadLightningCallback(first=2)
    trainer = _fit(model, callback)
    assert trainer.global_step == 4 and [s for s, _ in callback.guard.reports] == [0, 1]
    assert all(r.passed for _, r in callback.guard.reports)
    assert "tensorcad guard: 2 batches checked, packing held on each" in capsys.readouterr().out
    assert _gap_alone(model) < 1e-4


def test_the_mask_without_its_document_conjunct_stops_the_run():
    model = _model(documents_kept=False)
    with pytest.raises(GuardError) as stopped:
        _fit(model, TensorcadLightningCallback())
    cause = stopped.value.report.cause
    assert cause.startswith("layer 0 (full) ran generated:flex with mask_mod: the mask_mod reaching it keeps keys of "
                            "other documents: its document conjunct (doc(b, q) == doc(b, kv)) is missing")
    assert _gap_alone(model) > 1e-3
