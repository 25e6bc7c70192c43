"""Vision-language rows certified on tiny random Qwen2-VL and Qwen2.5-VL: the 4-row recipe and three wrong ways.

Each gap the certificate reports is held to the truth this test computes itself: the
packed call run here, each sample run alone through ``model(...)`` here, the largest
difference of their logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hf"))

from tensorcad.hf import vision_rows  # noqa: E402
from tensorcad.runtime.certification import check_vision_faithful, check_vision_isolation  # noqa: E402

from vision_models import FAMILIES, IMAGE, samples, tiny_vlm  # noqa: E402


@pytest.fixture(scope="module", params=FAMILIES)
def packed(request):
    model = tiny_vlm(request.param)
    given = samples()
    return model, given, vision_rows(model, given)


def _wrong_ways(inputs):
    return {
        "positions rows": (dict(inputs, position_ids=inputs["position_ids"][1:]), {}),
        "positions over the whole row": ({k: v for k, v in inputs.items() if k != "position_ids"}, {}),
        "cache": (inputs, {"use_cache": True}),
    }


def _truth(model, given, inputs, call):
    """Each sample's largest logit difference, packed under this call against the sample alone, computed here."""
    with torch.no_grad():
        packed = model(**{**inputs, **call}).logits[0]
        gaps, first = [], 0
        for s in given:
            n = s["input_ids"].shape[1]
            alone = model(**s, use_cache=False).logits[0]
            gaps.append(float((packed[first:first + n] - alone).abs().max()))
            first += n
    return gaps


def test_the_four_row_recipe_is_faithful_and_isolated(packed):
    model, given, rows = packed
    faithful = check_vision_faithful(model, rows.inputs, rows.documents)
    assert faithful.passed, faithful.message()
    assert len(faithful.gaps) == 3 and faithful.largest <= 1e-5
    assert faithful.largest == pytest.approx(max(_truth(model, given, rows.inputs, {})), abs=1e-7)
    isolated = check_vision_isolation(model, rows.inputs, rows.documents)
    assert isolated.passed, isolated.message()
    assert isolated.perturbed == 3 and isolated.own_change > 0


@pytest.mark.parametrize("way", ["positions rows", "positions over the whole row", "cache"])
def test_each_wrong_way_fails_naming_its_cause_with_the_true_gap(packed, way):
    model, given, rows = packed
    inputs, call = _wrong_ways(rows.inputs)[way]
    result = check_vision_faithful(model, inputs, rows.documents, **call)
    assert not result.passed
    assert result.cause == way and f"cause: {way}:" in result.message()
    truth = _truth(model, given, inputs, call)
    assert truth[0] <= 1e-5  # the first sample sees nothing before it: only later ones move
    for measured, true in zip(result.gaps, truth):
        assert measured.largest == pytest.approx(true, rel=0.10)
    assert max(truth) > 0.1
    worst = max(result.gaps, key=lambda g: g.largest)
    assert f"sample {worst.sample} " in result.message()
    isolated = check_vision_isolation(model, inputs, rows.documents, **call)
    assert not isolated.passed and isolated.leaks and isolated.cause == way
    assert all(leak.moved > leak.changed for leak in isolated.leaks)  # causal: a sample moves later ones only


def test_a_cache_the_config_turns_on_is_the_users_call_and_fails(packed):
    model, given, rows = packed
    inputs = {k: v for k, v in rows.inputs.items() if k != "use_cache"}
    assert model.config.text_config.use_cache  # the config's default, which the call inherits
    result = check_vision_faithful(model, inputs, rows.documents)
    assert not result.passed and result.cause == "cache"


def test_one_axis_wrong_fails_naming_the_axis_and_the_sample(packed):
    model, given, rows = packed
    positions = rows.inputs["position_ids"].clone()
    start = rows.documents[0].tolist().index(1)
    image_at = rows.inputs["input_ids"][0].tolist().index(IMAGE, start)
    positions[1, 0, image_at:image_at + 4] += 1  # sample 1's temporal axis, over its image's first tokens
    planted = dict(rows.inputs, position_ids=positions)
    result = check_vision_faithful(model, planted, rows.documents)
    assert not result.passed
    assert result.cause == "positions axis temporal" and "temporal row of sample 1" in result.message()
    assert [g.sample for g in result.differing] == [1]
    assert result.gaps[1].largest == pytest.approx(_truth(model, given, planted, {})[1], rel=0.10)
