"""packing-unused and document-blocks, on the presets the proposal names."""

import pytest

from tensorcad.packing import closed_form
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing
from tensorcad.rules import check


def _rules(design, **op):
    return {d.rule: d for d in check(design, OperatingPoint(**op))}


def test_llama_documents_in_1024_token_documents_gets_the_note():
    found = _rules("llama-3-8b-documents", seq=8192, packing=Packing(1024, 0))
    d = found["document-blocks"]
    assert d.severity == "note"
    ratio = closed_form.fixed_phase_block_ratio(8192, 1024)
    assert ratio == pytest.approx(1.37, abs=0.005)
    assert f"{ratio:.2f}x" in d.message
    # The difference on the whole forward pass, from closed forms alone.
    keys = closed_form.fixed_phase_average(8192, 1024)
    attention = 32 * 4 * keys * 128 * 32
    share = (ratio - 1) * attention / (2 * 7_504_658_432 + attention)
    assert share == pytest.approx(0.006, abs=0.0005)
    assert f"{share:.1%}" in d.message
    assert "packing-unused" not in found


def test_nano_sort_in_128_token_documents_is_warned_about():
    d = _rules("nano-sort", seq=1024, packing=Packing(128, 0))["document-blocks"]
    assert d.severity == "warn"


@pytest.mark.parametrize("design,seq", [("llama-3-8b-documents", 8192), ("nano-sort", 1024)])
def test_neither_fires_without_packing(design, seq):
    assert "document-blocks" not in _rules(design, seq=seq)


def test_packing_on_a_design_without_a_document_mask_is_a_note():
    d = _rules("llama-3-8b", seq=8192, packing=Packing(1024))["packing-unused"]
    assert d.severity == "note" and "no mask reads a documents input" in d.message
