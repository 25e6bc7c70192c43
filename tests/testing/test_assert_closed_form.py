"""assert_closed_form: the engine's keys per query against the right closed form, both figures named."""

from __future__ import annotations

import json

import pytest

import tensorcad
from tensorcad.testing import assert_closed_form
from tensorcad.testing.assertions import NoClosedForm, expected_keys_per_query
from tensorcad.packing import closed_form
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing


def design(design_texts, **kw):
    return tensorcad.load(json.loads(design_texts["make"]("t", **kw)))


def test_causal_is_exact(design_texts):
    got, want = assert_closed_form(design(design_texts), OperatingPoint(seq=256), rel=0)
    assert want == closed_form.causal(256) == 128.5


def test_fixed_lengths_are_held_to_the_phase_average(design_texts):
    op = OperatingPoint(seq=256, packing=Packing(32, 0.0))
    # fixed documents are decided exactly: held at 1e-12, not 1%
    got, want = assert_closed_form(design(design_texts), op, rel=1e-12)
    assert want == closed_form.fixed_phase_average(256, 32)


def test_gamma_lengths_are_held_to_the_edge_corrected_form(design_texts):
    op = OperatingPoint(seq=256, packing=Packing(48, 1.0))
    got, want = assert_closed_form(design(design_texts), op)
    assert want == closed_form.edge_corrected(256, 48, 1.0)


def test_a_preset_at_the_proposals_figure():
    op = OperatingPoint(seq=8192, packing=Packing(1024, 0.0))
    got, want = assert_closed_form("llama-3-8b-documents", op, rel=0.01)
    assert want == pytest.approx(491.1667, abs=1e-4)


def test_window_and_full_pick_their_forms(design_texts):
    windowed = json.loads(design_texts["make"]("w", mask=None, documents=False))
    windowed["nodes"][1]["params"]["block"]["params"]["attention"]["window"] = 64
    assert expected_keys_per_query(tensorcad.load(windowed), OperatingPoint(seq=256))[0] == \
        closed_form.window(256, 64)
    full = json.loads(design_texts["make"]("f", mask=None, documents=False))
    full["nodes"][1]["params"]["block"]["params"]["attention"]["causal"] = False
    assert_closed_form(tensorcad.load(full), OperatingPoint(seq=256), rel=0)


def test_a_disagreement_names_both_figures(design_texts, monkeypatch):
    import tensorcad.runtime.certification.design.closed_form as check  # the runtime's check the assertion is

    monkeypatch.setattr(check, "engine_keys_per_query", lambda d, op: (130.0, "flops.keysPerQuery"))
    with pytest.raises(AssertionError, match=r"flops.keysPerQuery is 130 but the closed form causal\(seq=256\) "
                                             r"gives 128.5 \(relative difference 0.0117 > rel=0.01\)"):
        assert_closed_form(design(design_texts), OperatingPoint(seq=256), rel=0.01)


def test_a_mask_no_closed_form_describes_is_refused(design_texts):
    with pytest.raises(NoClosedForm, match="no closed form"):
        assert_closed_form(design(design_texts, mask="doc(b, q) >= doc(b, kv)"),
                           OperatingPoint(seq=256, packing=Packing(48, 1.0)))
