"""input-roles and ROPE-02 on designs built to break them."""

import subprocess
import sys
import json

from tensorcad.design import load
from tensorcad.rules import check


def _llama_documents():
    raw = load("llama-3-8b-documents").to_dict()
    raw["nodes"][1]["params"]["repeat"] = 2
    return raw


def test_token_ids_wired_into_the_mask_are_an_input_roles_error():
    raw = _llama_documents()
    raw["nodes"][1]["in"]["doc"] = "ids"
    [d] = [d for d in check(raw) if d.rule == "input-roles"]
    assert d.severity == "error"
    assert d.path == "nodes[1].params.block.params.attention.mask"
    assert "port 'doc'" in d.message
    assert "layers.doc -> layers.block.doc -> layers.block.attention.doc -> layers.block.attention.sdpa.doc" in d.message
    assert "input 'ids' (role tokens)" in d.message


def test_the_cli_exits_1_on_the_error(tmp_path):
    raw = _llama_documents()
    raw["nodes"][1]["in"]["doc"] = "ids"
    path = tmp_path / "wired-wrong.json"
    path.write_text(json.dumps(raw))
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "input-roles" in run.stdout


def _with_positions(raw, into_rope=True, role="positions"):
    raw["inputs"]["positions"] = {"role": role}
    raw["nodes"][1]["in"]["pos"] = "positions"
    if not into_rope:
        raw["nodes"][1]["params"]["block"]["params"]["attention"]["rope"] = None
    return raw


def test_positions_into_rope_are_clean():
    raw = _with_positions(_llama_documents())
    assert [d for d in check(raw) if d.severity == "error"] == []
    [(attention, _)] = load(raw).attentions()


def test_documents_wired_as_positions_are_an_input_roles_error():
    raw = _llama_documents()
    raw["nodes"][1]["in"]["pos"] = "documents"
    found = [d for d in check(raw) if d.rule == "input-roles"]
    assert len(found) == 2  # both rotations, q and k
    assert all("input 'documents' (role documents)" in d.message and "positions" in d.message for d in found)
    assert found[0].path == "nodes[1].params.block.params.attention.rope"


def test_positions_on_an_attention_without_rope_is_rope_02():
    raw = _with_positions(_llama_documents(), into_rope=False)
    [d] = [d for d in check(raw) if d.rule == "ROPE-02"]
    assert d.severity == "error"
    assert d.path == "nodes[1].params.block.params.attention"
    assert "layers.pos -> layers.block.pos -> layers.block.attention.pos" in d.message


def test_a_position_table_fed_token_ids_is_an_input_roles_error():
    raw = load("gpt2-small").to_dict()
    raw["nodes"][1]["in"]["pos"] = "ids"
    [d] = [d for d in check(raw) if d.rule == "input-roles"]
    assert "position table" in d.message and "input 'ids' (role tokens)" in d.message
