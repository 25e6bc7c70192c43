"""assert_vision_packed: the 4-row recipe holds; three mRoPE rows only fail naming the cause and the sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf"))

from tensorcad.testing import CertificateError, assert_vision_packed  # noqa: E402
from tensorcad.hf import vision_rows  # noqa: E402

from vision_models import samples, tiny_vlm  # noqa: E402


def test_the_recipe_passes_and_three_rows_fail_with_the_cause():
    model = tiny_vlm("qwen2_5_vl")
    rows = vision_rows(model, samples())
    assert assert_vision_packed(model, rows.inputs, rows.documents).passed
    three = dict(rows.inputs, position_ids=rows.inputs["position_ids"][1:])
    with pytest.raises(CertificateError, match=r"(?s)differs from itself alone.*sample 1 .*cause: positions rows"):
        assert_vision_packed(model, three, rows.documents)
