"""assert_block_counts_agree: the engine's blocks against create_block_mask on the model's own mask."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import tensorcad
from tensorcad.testing import assert_block_counts_agree
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing


def test_document_mask_agrees_block_for_block(design_texts):
    design = tensorcad.load(json.loads(design_texts["isolated"]))
    (result,) = assert_block_counts_agree(design, OperatingPoint(seq=256, packing=Packing(48, 1.0)), rows=4)
    assert result.passed and result.rows == 4
    assert result.torch_full + result.torch_partial == result.engine_full + result.engine_partial > 0


def test_a_disagreement_names_both_counts(design_texts, monkeypatch):
    import tensorcad.runtime.building.blockmask as blockmask

    real = blockmask.compare_blocks

    def off_by_one(*args, **kwargs):
        result = real(*args, **kwargs)
        return replace(result, engine_partial=result.engine_partial + 1, mismatched_rows=(2,))

    monkeypatch.setattr(blockmask, "compare_blocks", off_by_one)
    design = tensorcad.load(json.loads(design_texts["isolated"]))
    with pytest.raises(AssertionError, match=r"block counts disagree\n.*create_block_mask computes \d+ full "
                                             r"\+ \d+ partial blocks, the engine \d+ \+ \d+; rows that differ: 2"):
        assert_block_counts_agree(design, OperatingPoint(seq=256, packing=Packing(48, 1.0)), rows=4)
