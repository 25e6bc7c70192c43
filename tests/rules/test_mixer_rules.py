"""mixer-crosses-documents and input-roles on designs built to break them."""

from __future__ import annotations

import tensorcad

HYBRID = "mamba2-hybrid-documents"
PACKED = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=1))


def _unwired():
    raw = tensorcad.load(HYBRID).to_dict()
    del raw["nodes"][1]["in"]["doc"]
    raw["nodes"][1]["params"]["blocks"]["attention"]["params"]["attention"].pop("mask")
    return tensorcad.load(raw)


def _findings(design, op, rule):
    return [d for d in tensorcad.check(design, op) if d.rule == rule]


def test_a_mixer_that_resets_is_no_finding():
    assert _findings(tensorcad.load(HYBRID), PACKED, "mixer-crosses-documents") == []


def test_under_packing_a_mixer_reading_no_documents_is_an_error_naming_its_layers():
    (finding,) = _findings(_unwired(), PACKED, "mixer-crosses-documents")
    assert finding.severity == "error" and finding.path == "nodes[1].params.blocks.mamba.params.mixer.params"
    assert finding.message.startswith("layers.block.mixer (ssm, 42 layers) carries each head's head_dim x state "
                                      "matrix")
    assert "wire doc to the documents input 'documents'" in finding.message


def test_one_document_a_row_crosses_nothing():
    assert _findings(_unwired(), tensorcad.OperatingPoint(seq=8192), "mixer-crosses-documents") == []


def test_a_mixers_doc_from_token_ids_is_an_input_roles_error():
    raw = tensorcad.load(HYBRID).to_dict()
    raw["nodes"][1]["in"]["doc"] = "ids"
    findings = _findings(tensorcad.load(raw), tensorcad.OperatingPoint(seq=8192), "input-roles")
    mixer = [d for d in findings if d.path.endswith("mixer.params")]
    assert len(mixer) == 1 and "resets its state by port 'doc'" in mixer[0].message
    assert "input 'ids' (role tokens)" in mixer[0].message
