"""assert_isolated on any callable: a hand-written module, a Hugging Face Llama, a generated model."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from tensorcad.testing import assert_isolated
from tensorcad.packing import draw

VOCAB = 32


class TinyAttention(nn.Module):
    """One causal attention layer written by hand; `use_documents` is the mask it may forget."""

    def __init__(self, use_documents: bool):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, VOCAB)
        self.use_documents = use_documents

    def forward(self, ids, documents, positions=None):
        x = self.embed(ids)
        q, k, v = self.qkv(x).split(16, dim=-1)
        T = ids.shape[1]
        keep = torch.ones(T, T, dtype=torch.bool).tril()[None]
        if self.use_documents:
            keep = keep & (documents[:, :, None] == documents[:, None, :])
        scores = (q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf"))
        return self.out(scores.softmax(-1) @ v)


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(2, 64, 12, 1.0, seed=0)
    ids = torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


def test_a_masked_module_passes(batch):
    (result,) = assert_isolated(TinyAttention(use_documents=True), *batch, vocab=VOCAB)
    assert result.passed and result.perturbed == result.documents > 4


def test_a_module_that_forgets_the_mask_is_caught(batch):
    with pytest.raises(AssertionError) as caught:
        assert_isolated(TinyAttention(use_documents=False), *batch, vocab=VOCAB)
    message = str(caught.value)
    found = re.search(r"changing document (\d+) of row (\d+) moved document (\d+) of (the same row|row \d+) "
                      r"by up to ([0-9.e+-]+), first at token (\d+) of the row", message)
    assert found, message
    changed, row, moved, largest, first = (int(found.group(1)), int(found.group(2)), int(found.group(3)),
                                           float(found.group(5)), int(found.group(6)))
    assert moved > changed and largest > 0
    documents = batch[1]
    assert int(documents[row, first]) == moved  # the position named lies in the document named


def test_the_batch_may_be_passed_whole(batch):
    assert_isolated(TinyAttention(use_documents=True), batch, vocab=VOCAB)


def test_a_seeded_sample_of_documents(batch):
    (result,) = assert_isolated(TinyAttention(use_documents=True), *batch, vocab=VOCAB, sample=3, seed=1)
    assert result.perturbed == 3 < result.documents


def test_forms_need_a_model_with_a_form(batch):
    with pytest.raises(TypeError, match="form"):
        assert_isolated(TinyAttention(use_documents=True), *batch, forms=("eager",))


def test_a_generated_model_in_each_form(design_texts):
    import json

    import tensorcad
    from tensorcad.testing.plugin.fixtures import Settings, build_model, draw_batch

    design = tensorcad.load(json.loads(design_texts["isolated"]))
    settings = Settings(seq=128, pack=24.0)
    model = build_model(design, settings, "eager")
    results = assert_isolated(model, draw_batch(model.design, settings), forms=("eager", "flex"))
    assert len(results) == 2 and all(r.passed for r in results)
    assert model.form == "eager"  # left as it was


def test_a_leaking_generated_model_names_the_form(design_texts):
    import json

    import tensorcad
    from tensorcad.testing.plugin.fixtures import Settings, build_model, draw_batch

    design = tensorcad.load(json.loads(design_texts["leaking"]))
    settings = Settings(seq=128, pack=24.0)
    model = build_model(design, settings, "flex")
    with pytest.raises(AssertionError, match=r"form 'eager': changing document \d+ of row \d+ moved"):
        assert_isolated(model, draw_batch(model.design, settings), forms=("eager",))
