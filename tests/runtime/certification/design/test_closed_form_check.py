"""closed-form: the unpacked forms are held to every score counted, not only to the engine's copy of them."""

from __future__ import annotations

import pytest

import tensorcad
from tensorcad.packing import closed_form
from tensorcad.analysis import attention as engine
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.runtime.certification.design import closed_form as check


def _attention(name: str, **changes):
    raw = tensorcad.load(name).to_dict()
    stack = next(n for n in raw["nodes"] if n["kind"] == "stack")
    stack["params"]["block"]["params"]["attention"].update(changes)
    return tensorcad.load(raw)


@pytest.mark.parametrize("changes, expected", [
    ({}, lambda t: closed_form.causal(t)),
    ({"window": 24}, lambda t: closed_form.window(t, min(24, t), True)),
    ({"window": 24, "causal": False}, lambda t: closed_form.window(t, min(24, t), False)),
    ({"causal": False}, lambda t: closed_form.full(t)),
])
@pytest.mark.parametrize("seq", [1, 7, 64, 200])
def test_brute_force_count_equals_each_closed_form(changes, expected, seq):
    design = _attention("gpt2-small", **changes)
    (attention, _), *_ = design.attentions()
    assert check.brute_force_keys(attention, seq) == pytest.approx(expected(seq), rel=1e-12)


def test_a_document_mask_over_one_document_a_row_keeps_what_causality_keeps():
    (attention, _), *_ = tensorcad.load("nano-sort").attentions()
    assert check.brute_force_keys(attention, 100) == closed_form.causal(100) == 50.5


def test_a_wrong_formula_the_engine_shares_is_caught(monkeypatch):
    # The engine counts unpacked attention by the closed forms themselves: break one and
    # engine and closed form still agree with each other; only counting every score catches it.
    monkeypatch.setattr(closed_form, "causal", lambda seq: seq / 2)
    assert engine.keys_per_query(next(iter(tensorcad.load("gpt2-small").attentions()))[0], 4096).mean == 2048
    with pytest.raises(AssertionError, match=r"at seq 256, counting every score keeps 128.5 keys a query; "
                                             r"the closed form causal\(seq=256\) gives 128 and the engine 128"):
        check.assert_closed_form("gpt2-small", OperatingPoint(seq=4096))
