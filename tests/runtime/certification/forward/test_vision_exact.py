"""The vision-language certificates' results to the letter (issue 46's mutation): every branch of each message,
the JSON, when each passes, and transformers' token types read off the placeholder tokens."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hf"))

from tensorcad.hf.vision import AxisDifference, _type_ids  # noqa: E402
from tensorcad.runtime.certification.forward.vision import (  # noqa: E402
    SampleGap,
    SampleLeak,
    VisionFaithfulResult,
    VisionIsolationResult,
)

GAPS = (SampleGap(0, 0, 5, 0, 1e-7), SampleGap(1, 5, 9, 3, 0.25), SampleGap(2, 14, 4, 1, 0.5))
AXIS = AxisDifference("temporal", 1, 3, 7, 5)


def faithful(gaps=GAPS, cause=None, why=None, axes=()):
    return VisionFaithfulResult(gaps, 1e-5, cause, why, axes)


def test_faithful_in_words():
    worst = faithful(cause="cache", why="use_cache=True")
    assert not worst.passed and [g.sample for g in worst.differing] == [1, 2] and worst.largest == 0.5
    assert worst.message() == ("sample 2 (4 tokens from position 14) differs from itself run alone by 0.5 at its "
                               "token 1 (tolerance 1e-05); cause: cache: use_cache=True")
    assert faithful().message() == ("sample 2 (4 tokens from position 14) differs from itself run alone by 0.5 at "
                                    "its token 1 (tolerance 1e-05)")
    close = GAPS[:1] + (SampleGap(1, 5, 9, 2, 1e-5),)  # a gap equal to the tolerance passes
    assert faithful(close).passed and faithful(close).message() == (
        "faithful: 2 samples each equal to itself run alone, largest difference 1e-05 (tolerance 1e-05)")
    blind = faithful(close, cause="positions rows", why="three rows")
    assert not blind.passed and blind.message() == ("every sample equals itself alone on this batch, but the call "
                                                    "cannot keep samples apart; cause: positions rows: three rows")
    nothing = faithful(())
    assert not nothing.passed and nothing.largest == 0.0 and nothing.message() == "no sample was compared"
    nan = faithful(GAPS + (SampleGap(3, 18, 2, 0, math.nan),))
    assert [g.sample for g in nan.differing] == [1, 2, 3] and nan.message().startswith("sample 3 (2 tokens")


def test_faithful_json():
    result = faithful(GAPS[1:2], cause="positions axis temporal", why=AXIS.message(), axes=(AXIS,))
    assert result.to_json() == {
        "passed": False, "tolerance": 1e-5, "largest": 0.25, "cause": "positions axis temporal",
        "gaps": [{"sample": 1, "first": 5, "length": 9, "token": 3, "largest": 0.25}],
        "axes": ["position_ids' temporal row of sample 1 differs from get_rope_index on the sample alone at its "
                 "token 3: 7 where 5 was meant"],
        "message": result.message()}
    assert result.message().endswith("; cause: positions axis temporal: " + AXIS.message())


def isolation(leaks=(), perturbed=3, own=0.5, cause=None, why=None):
    return VisionIsolationResult(leaks, perturbed, own, cause, why)


def test_isolation_in_words():
    leaks = (SampleLeak(0, 1, 0.125, 9), SampleLeak(0, 2, 0.375, 14), SampleLeak(1, 2, 0.25, 15))
    failed = isolation(leaks, cause="cache", why="use_cache=True")
    assert not failed.passed and failed.message() == (
        "changing sample 0 (its text and pixels) moved sample 2 by up to 0.375, first at position 14; cause: "
        "cache: use_cache=True")
    assert isolation(leaks).message() == ("changing sample 0 (its text and pixels) moved sample 2 by up to 0.375, "
                                          "first at position 14")
    clean = isolation()
    assert clean.passed and clean.message() == ("isolated: 3 samples changed (text and pixels), every other logit "
                                                "bitwise equal (own logits moved by at least 0.5)")
    vacuous = isolation(own=0.0)
    assert not vacuous.passed and vacuous.message() == ("changing a sample moved none of its own logits: isolation "
                                                        "would pass vacuously")
    assert not isolation(own=math.nan).passed
    blind = isolation(cause="positions over the whole row", why="no position_ids")
    assert not blind.passed and blind.message() == (
        "no sample moved another on this batch, but the call cannot keep samples apart; cause: positions over the "
        "whole row: no position_ids")
    assert not isolation(perturbed=0).passed


def test_token_types_are_read_off_the_placeholders():
    config = types.SimpleNamespace(image_token_id=7, video_token_id=8, vision_start_token_id=5,
                                   vision_end_token_id=6)
    model = types.SimpleNamespace(config=config)
    ids = torch.tensor([[1, 5, 7, 7, 6, 2, 5, 8, 8, 6]])
    types_ = _type_ids(model, ids)
    assert types_.dtype == torch.int32 and types_.tolist() == [[0, 0, 1, 1, 0, 0, 0, 2, 2, 0]]
    config.video_token_id = None  # a model with images only
    assert _type_ids(model, ids).tolist() == [[0, 0, 1, 1, 0, 0, 0, 0, 0, 0]]


@pytest.fixture(scope="module")
def packed_row():
    pytest.importorskip("transformers")
    from tensorcad.hf import vision_rows

    from vision_models import samples, tiny_vlm

    model = tiny_vlm("qwen2_vl")
    rows = vision_rows(model, samples())
    return model, rows


def test_a_changed_sample_redraws_its_text_and_pixels_only(packed_row):
    from tensorcad.hf.vision import samples_of
    from tensorcad.runtime.certification.forward.vision import _changed

    model, rows = packed_row
    config = model.config
    special = [config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id]
    given = samples_of(model, rows.inputs, rows.documents)
    ids, pixels = rows.inputs["input_ids"], rows.inputs["pixel_values"]
    pixels_at = 0
    for index, s in enumerate(given):
        changed = _changed(model, rows.inputs, s, torch.Generator().manual_seed(index), pixels_at)
        new = changed["input_ids"]
        first, end = s["first"], s["end"]
        for t in range(ids.shape[1]):
            old, now = int(ids[0, t]), int(new[0, t])
            if first <= t < end and old not in special:
                assert now != old and now not in special and 0 <= now < config.text_config.vocab_size
            else:
                assert now == old  # other samples, and this sample's vision tokens, untouched
        own = s["inputs"].get("pixel_values")
        if own is None:
            assert changed["pixel_values"] is pixels
        else:
            moved = (changed["pixel_values"] != pixels).any(dim=-1)
            assert moved.nonzero().flatten().tolist() == list(range(pixels_at, pixels_at + len(own)))
            pixels_at += len(own)
        assert torch.equal(ids, rows.inputs["input_ids"])  # the caller's inputs are not changed in place
        again = _changed(model, rows.inputs, s, torch.Generator().manual_seed(index), 0)
        assert torch.equal(again["input_ids"], new)  # drawn from the generator it is given, nothing else
    assert pixels_at == len(pixels) and len(given) == 3


class RaisingAt:
    """The model, raising on its ``at``-th call (1-based): which run the certificate names."""

    def __init__(self, model, at):
        self.model, self.at, self.calls = model, at, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("  planted\n")
        return self.model(**kwargs)


@pytest.mark.parametrize("check, at, who", [
    ("isolation", 1, "model (the packed row)"),
    ("isolation", 3, "model (sample 1 changed)"),
    ("faithful", 1, "model (the packed row)"),
    ("faithful", 4, "model (sample 2 run alone)"),
])
def test_a_raising_model_is_named_by_the_run(packed_row, check, at, who):
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.certification import check_vision_faithful, check_vision_isolation

    model, rows = packed_row
    run = check_vision_isolation if check == "isolation" else check_vision_faithful
    with pytest.raises(TensorcadError) as e:
        run(RaisingAt(model, at), rows.inputs, rows.documents)
    assert str(e.value) == f"{who}: raised RuntimeError: planted"


def test_every_cause_and_refusal_in_words(packed_row):
    from tensorcad.errors import TensorcadError
    from tensorcad.hf.vision import diagnose_vision_call, samples_of, vision_rows

    from vision_models import samples

    model, rows = packed_row
    inputs, documents = rows.inputs, rows.documents
    text_row = dict(inputs, position_ids=inputs["position_ids"][0])
    assert diagnose_vision_call(model, text_row, documents, False) == (
        "positions rows", "position_ids holds the 1 mRoPE rows only: transformers reads packing from a text row "
        "before them (4 rows: text positions restarting per sample, then temporal, height, width), so it masks "
        "causally over the whole row")
    assert diagnose_vision_call(model, dict(inputs, position_ids=inputs["position_ids"][1:]), documents, False)[1] \
        .startswith("position_ids holds the 3 mRoPE rows only")
    assert diagnose_vision_call(model, {k: v for k, v in inputs.items() if k != "position_ids"}, documents,
                                False)[1] == (
        "no position_ids: the model runs get_rope_index over the whole packed row, so positions never restart and no "
        "text row switches packing on; pass the 4-row position_ids of tensorcad.hf.vision_rows")
    assert diagnose_vision_call(model, inputs, documents, True) == (
        "cache", "a cache is on (use_cache): transformers reads packing from position_ids only when no cache exists; "
        "pass use_cache=False")
    masked = dict(inputs, attention_mask=torch.ones_like(inputs["input_ids"]))
    assert diagnose_vision_call(model, masked, documents, False) == (
        "attention mask", "a 2-D attention_mask is given: transformers reads packing from position_ids only without "
        "one")
    assert diagnose_vision_call(model, dict(inputs, attention_mask=None), documents, False) is None

    def refused(call):
        with pytest.raises(TensorcadError) as e:
            call()
        return str(e.value)

    given = samples()
    assert refused(lambda: vision_rows(model, ["x"])) == "samples[0]: expected a dict of a sample's inputs, got str"
    assert refused(lambda: vision_rows(model, [given[0], {}])) == \
        "samples[1].input_ids: every sample needs its input_ids"
    assert refused(lambda: vision_rows(model, [dict(given[0], pixel_values_videos=torch.zeros(1))])) == \
        "samples[0].pixel_values_videos: videos are not packed yet: images only"
    assert refused(lambda: vision_rows(model, ())) == "samples: expected a non-empty list of samples"
    assert refused(lambda: samples_of(model, dict(inputs, input_ids=inputs["input_ids"][0]), documents)) == \
        "inputs.input_ids: expected one packed row (1, T), got (46,)"
    two = dict(inputs, input_ids=inputs["input_ids"].repeat(2, 1))
    assert refused(lambda: samples_of(model, two, documents.repeat(2, 1))) == \
        "inputs.input_ids: expected one packed row (1, T), got (2, 46)"
    assert refused(lambda: samples_of(model, inputs, documents[:, :-1])) == \
        "documents: shape (1, 45) differs from input_ids (1, 46)"
    crossing = documents.clone()
    crossing[0, 7:17] = 1  # sample 0's image tokens cut by the boundary
    assert refused(lambda: samples_of(model, inputs, crossing)) == \
        "inputs.image_grid_thw: sample 0's image tokens end inside image 0: an image crosses samples"
    assert refused(lambda: samples_of(model, dict(inputs, image_grid_thw=inputs["image_grid_thw"][:1]),
                                      documents)) == \
        "inputs.image_grid_thw: sample 1 holds image tokens past the last image"


def test_the_samples_of_a_packed_row(packed_row):
    from tensorcad.hf.vision import samples_of

    model, rows = packed_row
    inputs = rows.inputs
    read = samples_of(model, inputs, rows.documents)
    assert [(s["first"], s["end"]) for s in read] == [(0, 17), (17, 37), (37, 46)] and rows.lengths == (17, 20, 9)
    grids, pixels = inputs["image_grid_thw"], inputs["pixel_values"]
    patches = [int(g.prod()) for g in grids]  # t x h x w patches an image
    assert torch.equal(read[0]["inputs"]["pixel_values"], pixels[:patches[0]])
    assert torch.equal(read[1]["inputs"]["pixel_values"], pixels[patches[0]:patches[0] + patches[1]])
    assert torch.equal(read[1]["inputs"]["image_grid_thw"], grids[1:2])
    assert "pixel_values" not in read[2]["inputs"] and "image_grid_thw" not in read[2]["inputs"]
    for s in read:
        assert torch.equal(s["inputs"]["input_ids"], inputs["input_ids"][:, s["first"]:s["end"]])
        assert torch.equal(s["inputs"]["mm_token_type_ids"], inputs["mm_token_type_ids"][:, s["first"]:s["end"]])
    no_types = samples_of(model, {k: v for k, v in inputs.items() if k != "mm_token_type_ids"}, rows.documents)
    assert all("mm_token_type_ids" not in s["inputs"] for s in no_types)
    assert inputs["use_cache"] is False
    assert rows.documents.tolist() == [[0] * 17 + [1] * 20 + [2] * 9]
    assert inputs["position_ids"][0, 0].tolist() == list(range(17)) + list(range(20)) + list(range(9))


def test_what_the_certificates_read_and_refuse():
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.certification.forward.vision import _cached, _read

    assert _cached({"logits": 1, "past_key_values": object()}) and _cached({"cache": object()})
    assert not _cached({"logits": 1, "past_key_values": None})
    assert _cached(types.SimpleNamespace(past_key_values=object())) and _cached(types.SimpleNamespace(cache=1))
    assert not _cached(types.SimpleNamespace(logits=1))
    ids = torch.zeros(1, 3, dtype=torch.long)
    for inputs in ([ids], {"ids": ids}):
        with pytest.raises(TensorcadError) as e:
            _read(None, inputs, ids)
        assert str(e.value) == "inputs: expected the packed row's keyword arguments, input_ids among them"
    for documents in ([[0, 0, 1]], torch.zeros(1, 3)):
        with pytest.raises(TensorcadError) as e:
            _read(None, {"input_ids": ids}, documents)
        assert str(e.value) == "documents: expected a (1, T) integer tensor: each token's sample"


def _logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits[0]


def _three_images(text):
    """A text-only sample of ``text`` first, then three samples with an image each, one of a single token."""
    from vision_models import sample

    g = torch.Generator().manual_seed(4)
    return [{"input_ids": torch.tensor([text])}, sample(2, (1, 4, 4), 1, g), sample(1, (1, 2, 2), 2, g),
            sample(0, (1, 4, 8), 3, g)]


@pytest.mark.parametrize("which", ["fixture", "three images after text"])
def test_each_gap_and_each_leak_is_the_tests_own(packed_row, which):
    from tensorcad.hf.vision import samples_of, vision_rows
    from tensorcad.runtime.certification import check_vision_faithful, check_vision_isolation
    from tensorcad.runtime.certification.forward.vision import _changed

    model, rows = packed_row
    if which != "fixture":
        rows = vision_rows(model, _three_images([3, 9]))
    whole = {k: v for k, v in rows.inputs.items() if k != "position_ids"}  # positions over the whole row: leaks
    given = samples_of(model, whole, rows.documents)
    base = _logits(model, whole)
    # faithful: each sample's largest difference from itself alone, and the token it is at
    result = check_vision_faithful(model, whole, rows.documents)
    for index, (gap, s) in enumerate(zip(result.gaps, given)):
        diff = (base[s["first"]:s["end"]] - _logits(model, dict(s["inputs"], use_cache=False))).abs()
        token = int(diff.max(dim=-1).values.argmax())
        assert (gap.sample, gap.first, gap.length, gap.token) == (index, s["first"], s["end"] - s["first"], token)
        assert gap.largest == pytest.approx(float(diff.max()), abs=1e-6)
    assert result.axes == () and result.cause == "positions over the whole row"
    # isolation: the samples changed in turn from one generator, as the certificate draws them
    generator, pixels_at, leaks, own = torch.Generator().manual_seed(0), 0, [], []
    for index, s in enumerate(given):
        out = _logits(model, _changed(model, whole, s, generator, pixels_at))
        pixels_at += len(s["inputs"].get("pixel_values", ()))
        own.append(float((out[s["first"]:s["end"]] - base[s["first"]:s["end"]]).abs().max()))
        for other, t in enumerate(given):
            if other == index:
                continue
            span = slice(t["first"], t["end"])
            moved = (out[span] != base[span]).any(dim=-1).nonzero().flatten()
            if len(moved):
                leaks.append((index, other, float((out[span] - base[span]).abs().max()), t["first"] + int(moved[0])))
    isolated = check_vision_isolation(model, whole, rows.documents)
    assert [(x.changed, x.moved, x.position) for x in isolated.leaks] == [(a, b, p) for a, b, _, p in leaks]
    assert [x.largest for x in isolated.leaks] == pytest.approx([v for _, _, v, _ in leaks], abs=1e-6)
    assert leaks and isolated.own_change == pytest.approx(min(own), abs=1e-6)
    assert isolated.message().endswith("; cause: positions over the whole row: no position_ids: the model runs "
                                       "get_rope_index over the whole packed row, so positions never restart and no "
                                       "text row switches packing on; pass the 4-row position_ids of "
                                       "tensorcad.hf.vision_rows")
    assert check_vision_faithful(model, whole, rows.documents, atol=0.25).tolerance == 0.25


def test_token_types_from_a_config_naming_no_video():
    model = types.SimpleNamespace(config=types.SimpleNamespace(image_token_id=7))
    assert _type_ids(model, torch.tensor([[7, 8, 7]])).tolist() == [[1, 0, 1]]


def test_a_model_without_get_rope_index_is_refused():
    from tensorcad.errors import TensorcadError
    from tensorcad.hf.vision import rope_positions

    with pytest.raises(TensorcadError) as e:
        rope_positions(object(), torch.zeros(3, dtype=torch.long), None)
    assert str(e.value) == "model: object has no get_rope_index: not an mRoPE vision-language model"


def test_rows_without_token_types_read_them_off_the_placeholders(packed_row):
    from tensorcad.hf.vision import vision_rows

    from vision_models import samples

    model, rows = packed_row
    bare = [{k: v for k, v in s.items() if k != "mm_token_type_ids"} for s in samples()]
    again = vision_rows(model, bare)
    for key in ("input_ids", "position_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw"):
        assert torch.equal(again.inputs[key], rows.inputs[key]), key


def test_three_images_one_of_a_single_token_and_a_one_token_sample(packed_row):
    from tensorcad.hf.vision import samples_of, vision_rows

    model, _ = packed_row
    given = _three_images([3])
    rows = vision_rows(model, given)
    read = samples_of(model, rows.inputs, rows.documents)
    assert [(s["first"], s["end"]) for s in read] == [(0, 1), (1, 10), (10, 16), (16, 29)]
    assert "pixel_values" not in read[0]["inputs"]
    for s, want in zip(read[1:], given[1:]):
        assert torch.equal(s["inputs"]["pixel_values"], want["pixel_values"])
        assert torch.equal(s["inputs"]["image_grid_thw"], want["image_grid_thw"])
    text = vision_rows(model, [given[0], {"input_ids": torch.tensor([[5, 6]])}])
    assert "image_grid_thw" not in text.inputs
    assert [(s["first"], s["end"]) for s in samples_of(model, text.inputs, text.documents)] == [(0, 1), (1, 3)]


def test_an_axis_moved_is_named_with_what_it_holds_and_what_was_meant(packed_row):
    from tensorcad.hf.vision import positions_differences

    model, rows = packed_row
    positions = rows.inputs["position_ids"].clone()
    meant = int(positions[3, 0, 17 + 3])
    positions[3, 0, 17 + 3] += 5  # sample 1's width axis at its token 3
    found = positions_differences(model, dict(rows.inputs, position_ids=positions), rows.documents)
    assert found == (AxisDifference("width", 1, 3, meant + 5, meant),)
