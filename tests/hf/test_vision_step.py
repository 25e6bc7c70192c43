"""The training step's certificates on vision-language rows (issue 46): Qwen2-VL and Qwen2.5-VL, samples with images.

The row is packed by `tensorcad.hf.vision_rows` (4-row position_ids, no mask, no cache). What each
certificate must say is computed here first: each sample run alone through transformers' forward with
its own images (``model(**sample, use_cache=False)``), its cross-entropy on its own next tokens, the
token mean. The recipe passes all five (accumulation cuts the row with each sample's images); each
wrong way fails naming its cause: no positions (transformers' rope index over the whole row), the cache
on (a plain call), and three rows of mRoPE positions only (refused: nothing in them says where a sample
begins).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402
from vision_models import FAMILIES, samples, tiny_vlm  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.hf.vision import vision_rows  # noqa: E402
from tensorcad.runtime.certification import certify_step  # noqa: E402


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return tiny_vlm(request.param)


def batch_of(model):
    rows = vision_rows(model, samples())
    labels = rows.inputs["input_ids"].clone()
    labels[rows.inputs["position_ids"][0] == 0] = -100  # a sample's first token: predicted from none of its own
    return {**rows.inputs, "labels": labels}


def alone_loss(model) -> float:
    """The token mean over every sample run by itself (its images with it) of its next-token cross-entropy."""
    total, count = 0.0, 0
    with torch.no_grad():
        for sample in samples():
            logits = model(**sample, use_cache=False).logits[0]
            ids = sample["input_ids"][0]
            total += float(F.cross_entropy(logits[:-1], ids[1:], reduction="sum"))
            count += len(ids) - 1
    return total / count


def test_the_four_row_recipe_passes_every_step_certificate(model):
    batch = batch_of(model)
    with torch.no_grad():
        packed = float(model(**batch).loss)
    assert packed == pytest.approx(alone_loss(model), abs=1e-5)  # the truth, established without the tool
    report = certify_step(model, batch, accumulation="num_items_in_batch")
    assert report.passed, report.message()
    assert set(report.results) == {"step[labels]", "step[loss]", "step[gradients]", "step[accumulation]",
                                   "eval[parity]"}
    assert report.results["step[loss]"].reference == pytest.approx(alone_loss(model), abs=1e-5)


def test_no_positions_fails_the_loss_by_the_gap_established_alone_and_says_pass_position_ids(model):
    batch = batch_of(model)
    documents = torch.zeros_like(batch["input_ids"])
    documents[0] = torch.repeat_interleave(torch.arange(3), torch.tensor([len(s["input_ids"][0]) for s in samples()]))
    del batch["position_ids"]  # transformers then runs its rope index over the whole row
    batch["documents"] = documents
    with torch.no_grad():
        gap = abs(float(model(**{k: v for k, v in batch.items() if k != "documents"}).loss) - alone_loss(model))
    assert gap > 1e-3
    report = certify_step(model, batch, only=["step[loss]"])
    loss = report.results["step[loss]"]
    assert not loss.passed and loss.gap == pytest.approx(gap, rel=0.1)
    assert "pass position_ids" in report.causes["step[loss]"]


def test_the_cache_on_fails_a_plain_call_naming_use_cache(model):
    batch = {k: v for k, v in batch_of(model).items() if k != "use_cache"}
    had = "use_cache" in vars(model.config)
    was = getattr(model.config, "use_cache", None)
    model.config.use_cache = True  # what a saved config says
    try:
        report = certify_step(model, batch, only=["step[loss]"], call="plain")
    finally:
        if had:
            model.config.use_cache = was
        else:
            del model.config.use_cache
    assert not report.passed
    assert "pass use_cache=False" in report.causes["step[loss]"]


def test_three_rows_of_mrope_positions_are_refused_naming_the_recipe(model):
    batch = batch_of(model)
    batch["position_ids"] = batch["position_ids"][1:]
    with pytest.raises(TensorcadError, match=r"batch.position_ids: 3 rows of positions \(3, 1, \d+\): a "
                                             r"vision-language row packs with 4 .*tensorcad.hf.vision_rows"):
        certify_step(model, batch, only=["step[loss]"])
