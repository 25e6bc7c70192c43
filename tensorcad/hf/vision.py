"""Vision-language rows: samples with images packed in one row, positions in the 4-row form mRoPE needs.

Qwen2-VL and Qwen2.5-VL turn positions by 3-D mRoPE (temporal, height, width axes
from ``get_rope_index``). transformers reads a packed row from a **4-row**
``position_ids`` (4, B, T): row 0 the text positions, restarting at every sample
(what switches packing on: with no mask and no cache it builds the document mask
from them), rows 1-3 the three mRoPE axes, each computed by the model's own
``get_rope_index`` on each sample alone. Three other ways run without a word and
mix the samples:

- **positions rows**: the three mRoPE rows only (3, B, T): transformers keeps no
  text row, so it builds a causal mask over the whole row;
- **positions over the whole row**: no ``position_ids``: the model runs
  ``get_rope_index`` over the packed row (positions do not restart, no text row);
- **cache**: a cache on (``use_cache=True``): transformers reads packing only
  when no cache exists.

``vision_rows`` packs samples the right way; ``samples_of`` cuts a packed batch
back into its samples (what each sample alone is); ``expected_positions`` and
``positions_differences`` hold a batch's positions to the 4-row form axis by axis;
``diagnose_vision_call`` names which of the three a call is. torch is imported only
when a model runs (as the adapters do).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorcad.errors import TensorcadError

# The four rows of a packed vision-language row's position_ids, in transformers' order.
AXES = ("text", "temporal", "height", "width")
# The causes a packed vision-language call can have, as the certificates name them.
CAUSES = {
    "positions rows": "position_ids holds the {rows} mRoPE rows only: transformers reads packing from a text row "
                      "before them (4 rows: text positions restarting per sample, then temporal, height, width), "
                      "so it masks causally over the whole row",
    "positions over the whole row": "no position_ids: the model runs get_rope_index over the whole packed row, "
                                    "so positions never restart and no text row switches packing on; pass the "
                                    "4-row position_ids of tensorcad.hf.vision_rows",
    "cache": "a cache is on (use_cache): transformers reads packing from position_ids only when no cache exists; "
             "pass use_cache=False",
    "attention mask": "a 2-D attention_mask is given: transformers reads packing from position_ids only without one",
    "positions axis": "position_ids' {axis} row of sample {sample} differs from get_rope_index on the sample alone "
                      "at its token {token}: {got} where {want} was meant",
}


def _rope_index(model: Any) -> Any:
    """The model's own ``get_rope_index`` (on the model or its inner ``.model``)."""
    for holder in (model, getattr(model, "model", None)):
        fn = getattr(holder, "get_rope_index", None)
        if callable(fn):
            return fn
    raise TensorcadError("model", f"{type(model).__name__} has no get_rope_index: not an mRoPE vision-language model")


def _token_ids(model: Any) -> dict[str, int | None]:
    """The placeholder tokens the token types are read from (None where the config names none)."""
    config = model.config
    return {name: getattr(config, name, None) for name in ("image_token_id", "video_token_id")}


def _type_ids(model: Any, ids: Any) -> Any:
    """transformers' ``mm_token_type_ids``: 0 text, 1 image, 2 video, read from the placeholder tokens."""
    tokens = _token_ids(model)
    types = (ids == tokens["image_token_id"]).long()
    if tokens["video_token_id"] is not None:
        types = types + 2 * (ids == tokens["video_token_id"]).long()
    return types.int()


def rope_positions(model: Any, input_ids: Any, image_grid_thw: Any, mm_token_type_ids: Any = None) -> Any:
    """(3, 1, T): the mRoPE axes ``get_rope_index`` gives for one sample alone (a (T,) or (1, T) ``input_ids``)."""
    ids = input_ids.reshape(1, -1)
    fn = _rope_index(model)
    kwargs: dict[str, Any] = {"image_grid_thw": image_grid_thw}
    if "mm_token_type_ids" in inspect.signature(fn).parameters:
        kwargs["mm_token_type_ids"] = (_type_ids(model, ids) if mm_token_type_ids is None
                                       else mm_token_type_ids.reshape(1, -1))
    positions, _ = fn(ids, **kwargs)
    return positions


@dataclass(frozen=True)
class VisionRows:
    """One packed row: ``inputs`` are the model's keyword arguments, ``documents`` (1, T) each token's sample."""

    inputs: dict[str, Any]
    documents: Any
    lengths: tuple[int, ...]


def _sample(sample: Any, index: int) -> dict[str, Any]:
    if not isinstance(sample, Mapping):
        raise TensorcadError(f"samples[{index}]", f"expected a dict of a sample's inputs, got {type(sample).__name__}")
    if "input_ids" not in sample:
        raise TensorcadError(f"samples[{index}].input_ids", "every sample needs its input_ids")
    if sample.get("pixel_values_videos") is not None:
        raise TensorcadError(f"samples[{index}].pixel_values_videos", "videos are not packed yet: images only")
    return dict(sample)


def vision_rows(model: Any, samples: Sequence[Mapping[str, Any]]) -> VisionRows:
    """Samples packed in one row the way transformers reads it: the 4-row ``position_ids``.

    Each sample is a dict of one sample's inputs (``input_ids`` (T,) or (1, T), and for a
    sample with images ``pixel_values`` and ``image_grid_thw``, as the processor gives
    them). Row 0 of ``position_ids`` counts each sample's tokens from 0; rows 1-3 are
    ``get_rope_index`` on each sample alone. ``pixel_values`` and ``image_grid_thw`` are
    concatenated in sample order; ``mm_token_type_ids`` is passed where the model takes it, and
    ``use_cache=False`` (Qwen2-VL's config turns a cache on, and a cache turns packing off):
    ``model(**rows.inputs)`` is the whole call.
    """
    import torch

    if not isinstance(samples, Sequence) or not samples:
        raise TensorcadError("samples", "expected a non-empty list of samples")
    read = [_sample(s, i) for i, s in enumerate(samples)]
    ids, text, rope, pixels, grids, types = [], [], [], [], [], []
    for s in read:
        sample_ids = s["input_ids"].reshape(-1)
        grid = s.get("image_grid_thw")
        sample_types = s.get("mm_token_type_ids")
        sample_types = _type_ids(model, sample_ids[None]) if sample_types is None else sample_types.reshape(1, -1)
        ids.append(sample_ids)
        types.append(sample_types[0])
        text.append(torch.arange(len(sample_ids), dtype=torch.long, device=sample_ids.device))
        rope.append(rope_positions(model, sample_ids, grid, sample_types))
        if s.get("pixel_values") is not None:
            pixels.append(s["pixel_values"])
            grids.append(grid)
    packed_ids = torch.cat(ids)[None]
    position_ids = torch.cat([torch.cat(text)[None, None], torch.cat(rope, dim=2).to(torch.long)], dim=0)
    inputs: dict[str, Any] = {"input_ids": packed_ids, "position_ids": position_ids}
    if "use_cache" in inspect.signature(model.forward).parameters:
        inputs["use_cache"] = False  # a cache (the config's default is on) switches transformers' packing off
    if pixels:
        inputs["pixel_values"] = torch.cat(pixels)
        inputs["image_grid_thw"] = torch.cat(grids)
    forward = inspect.signature(model.forward).parameters
    if "mm_token_type_ids" in forward:
        inputs["mm_token_type_ids"] = torch.cat(types)[None]
    lengths = tuple(len(i) for i in ids)
    documents = torch.repeat_interleave(torch.arange(len(ids)), torch.tensor(lengths))[None]
    return VisionRows(inputs, documents, lengths)


def _image_tokens(model: Any, grid: Any) -> int:
    merge = int(model.config.vision_config.spatial_merge_size)
    return int(grid.prod()) // (merge * merge)


def samples_of(model: Any, inputs: Mapping[str, Any], documents: Any) -> list[dict[str, Any]]:
    """Each sample of a packed one-row batch as its own inputs: its tokens, its images' pixels and grids.

    Images are read in order: an image belongs to the sample holding its placeholder
    tokens, ``t*h*w / merge**2`` of them; its ``t*h*w`` patches are the next rows of
    ``pixel_values``. Positions are not carried: a sample alone is run as the model
    runs it, counting its own.
    """
    ids = inputs["input_ids"]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise TensorcadError("inputs.input_ids", f"expected one packed row (1, T), got {tuple(ids.shape)}")
    if documents.shape != ids.shape:
        raise TensorcadError("documents", f"shape {tuple(documents.shape)} differs from input_ids {tuple(ids.shape)}")
    image = _token_ids(model)["image_token_id"]
    grids = inputs.get("image_grid_thw")
    pixels = inputs.get("pixel_values")
    images = list(grids) if grids is not None else []
    doc = documents[0].tolist()
    starts = [0] + [t for t in range(1, len(doc)) if doc[t] != doc[t - 1]]
    ends = starts[1:] + [len(doc)]
    out, image_at, patch_at = [], 0, 0
    for index, (first, end) in enumerate(zip(starts, ends)):
        sample_ids = ids[:, first:end]
        tokens = int((sample_ids == image).sum())
        mine = []
        while tokens > 0:
            if image_at >= len(images):
                raise TensorcadError("inputs.image_grid_thw", f"sample {index} holds image tokens past the last image")
            tokens -= _image_tokens(model, images[image_at])
            mine.append(image_at)
            image_at += 1
        if tokens < 0:
            raise TensorcadError("inputs.image_grid_thw",
                                 f"sample {index}'s image tokens end inside image {mine[-1]}: an image crosses samples")
        sample: dict[str, Any] = {"input_ids": sample_ids}
        if "mm_token_type_ids" in inputs:
            sample["mm_token_type_ids"] = inputs["mm_token_type_ids"][:, first:end]
        if mine:
            patches = sum(int(images[i].prod()) for i in mine)
            sample["pixel_values"] = pixels[patch_at:patch_at + patches]
            sample["image_grid_thw"] = grids[mine[0]:mine[-1] + 1]
            patch_at += patches
        out.append({"first": first, "end": end, "inputs": sample})
    return out


@dataclass(frozen=True)
class AxisDifference:
    """Row ``axis`` of the batch's position_ids differs for ``sample`` first at its ``token``."""

    axis: str
    sample: int
    token: int
    got: int
    want: int

    def message(self) -> str:
        return CAUSES["positions axis"].format(axis=self.axis, sample=self.sample, token=self.token,
                                               got=self.got, want=self.want)


def expected_positions(model: Any, inputs: Mapping[str, Any], documents: Any) -> Any:
    """(4, 1, T): the 4-row positions of ``vision_rows`` for this packed batch, from its own samples."""
    samples = [s["inputs"] for s in samples_of(model, inputs, documents)]
    return vision_rows(model, samples).inputs["position_ids"]


def positions_differences(model: Any, inputs: Mapping[str, Any], documents: Any) -> tuple[AxisDifference, ...]:
    """Where each row of a 4-row ``position_ids`` differs from the model's own, one per (axis, sample)."""
    got = inputs.get("position_ids")
    if got is None or got.dim() != 3 or got.shape[0] != 4:
        return ()
    want = expected_positions(model, inputs, documents).to(got.device)
    found = []
    for index, s in enumerate(samples_of(model, inputs, documents)):
        first, end = s["first"], s["end"]
        for a, axis in enumerate(AXES):
            bad = (got[a, 0, first:end] != want[a, 0, first:end]).nonzero()
            if len(bad):
                t = int(bad[0])
                found.append(AxisDifference(axis, index, t, int(got[a, 0, first + t]), int(want[a, 0, first + t])))
    return tuple(found)


def diagnose_vision_call(model: Any, inputs: Mapping[str, Any], documents: Any,
                         cached: bool) -> tuple[str, str] | None:
    """(cause, why) for a packed vision-language call that cannot keep its samples apart; None when none is seen.

    ``cached`` is whether the call returned a cache (the certificate reads it off the
    outputs: the call's own settings and the config's default both end there).
    """
    positions = inputs.get("position_ids")
    if positions is None:
        return "positions over the whole row", CAUSES["positions over the whole row"]
    if positions.dim() == 3 and positions.shape[0] != 4:
        return "positions rows", CAUSES["positions rows"].format(rows=positions.shape[0])
    if positions.dim() == 2:
        return "positions rows", CAUSES["positions rows"].format(rows=1)
    if cached:
        return "cache", CAUSES["cache"]
    mask = inputs.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        return "attention mask", CAUSES["attention mask"]
    differences = positions_differences(model, inputs, documents)
    if differences:
        return f"positions axis {differences[0].axis}", differences[0].message()
    return None


__all__ = ("AXES", "CAUSES", "AxisDifference", "VisionRows", "diagnose_vision_call", "expected_positions",
           "positions_differences", "rope_positions", "samples_of", "vision_rows")
