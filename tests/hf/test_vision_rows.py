"""tensorcad.hf.vision: samples with images packed in one row, the 4-row positions, and the row cut back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.hf import vision_rows  # noqa: E402
from tensorcad.hf.vision import diagnose_vision_call, positions_differences, samples_of  # noqa: E402

from vision_models import FAMILIES, IMAGE, samples, tiny_vlm  # noqa: E402


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return tiny_vlm(request.param)


def test_rows_are_text_positions_then_each_samples_own_rope_index(model):
    given = samples()
    rows = vision_rows(model, given)
    positions = rows.inputs["position_ids"]
    assert positions.shape == (4, 1, sum(s["input_ids"].shape[1] for s in given))
    first = 0
    for s in given:
        n = s["input_ids"].shape[1]
        # the text row counts each sample from 0: what switches transformers' packing on
        assert positions[0, 0, first:first + n].tolist() == list(range(n))
        # the three mRoPE rows: the model's own get_rope_index on the sample alone
        alone, _ = model.model.get_rope_index(s["input_ids"], mm_token_type_ids=s["mm_token_type_ids"],
                                              image_grid_thw=s.get("image_grid_thw"))
        assert torch.equal(positions[1:, :, first:first + n], alone)
        first += n
    assert rows.documents[0].tolist() == [i for i, s in enumerate(given) for _ in range(s["input_ids"].shape[1])]
    assert rows.inputs["use_cache"] is False
    assert torch.equal(rows.inputs["pixel_values"], torch.cat([given[0]["pixel_values"], given[1]["pixel_values"]]))
    assert rows.inputs["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 8]]
    # an image's rows are not the text row: the rows differ where the image sits
    assert not torch.equal(positions[0], positions[2])


def test_samples_of_cuts_the_row_back_into_its_samples(model):
    given = samples()
    rows = vision_rows(model, given)
    cut = samples_of(model, rows.inputs, rows.documents)
    assert len(cut) == len(given)
    for s, c in zip(given, cut):
        assert torch.equal(c["inputs"]["input_ids"], s["input_ids"])
        for key in ("pixel_values", "image_grid_thw"):
            assert (key in c["inputs"]) == (key in s)
            if key in s:
                assert torch.equal(c["inputs"][key], s[key])


def test_the_clean_rows_have_no_cause_and_each_wrong_way_is_named(model):
    rows = vision_rows(model, samples())
    assert diagnose_vision_call(model, rows.inputs, rows.documents, cached=False) is None
    three = dict(rows.inputs, position_ids=rows.inputs["position_ids"][1:])
    assert diagnose_vision_call(model, three, rows.documents, False)[0] == "positions rows"
    none = {k: v for k, v in rows.inputs.items() if k != "position_ids"}
    assert diagnose_vision_call(model, none, rows.documents, False)[0] == "positions over the whole row"
    assert diagnose_vision_call(model, rows.inputs, rows.documents, cached=True)[0] == "cache"


def test_an_axis_that_differs_is_named_with_its_sample(model):
    rows = vision_rows(model, samples())
    positions = rows.inputs["position_ids"].clone()
    start = rows.documents[0].tolist().index(1)
    image_at = rows.inputs["input_ids"][0].tolist().index(IMAGE, start)
    positions[2, 0, image_at + 1] += 3  # sample 1's height axis, its image's second token
    planted = dict(rows.inputs, position_ids=positions)
    found = positions_differences(model, planted, rows.documents)
    assert [(d.axis, d.sample, d.token) for d in found] == [("height", 1, image_at + 1 - start)]
    cause, why = diagnose_vision_call(model, planted, rows.documents, False)
    assert cause == "positions axis height" and "sample 1" in why


def test_bad_samples_are_refused_naming_the_path(model):
    with pytest.raises(TensorcadError, match=r"samples\[0\]"):
        vision_rows(model, ["not a sample"])
    with pytest.raises(TensorcadError, match=r"samples\[0\]\.input_ids"):
        vision_rows(model, [{}])
    with pytest.raises(TensorcadError, match="videos"):
        vision_rows(model, [dict(samples()[0], pixel_values_videos=torch.zeros(1))])
    with pytest.raises(TensorcadError, match="^samples"):
        vision_rows(model, [])
    rows = vision_rows(model, samples())
    # an image that ends inside the next sample: the boundary is drawn through its tokens
    docs = rows.documents.clone()
    start = docs[0].tolist().index(1)
    docs[0, start - 10:start] = 1
    with pytest.raises(TensorcadError, match="image_grid_thw"):
        samples_of(model, rows.inputs, docs)
