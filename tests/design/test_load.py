"""Loading and validating designs: every malformed file names the path of its bad value."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tensorcad.design import load, resolve, show
from tensorcad.errors import TensorcadError

MALFORMED = Path(__file__).parent / "malformed"
EXPECTED = json.loads((MALFORMED / "expected.json").read_text())


def test_at_least_twenty_malformed_files_are_kept():
    assert len(EXPECTED) >= 20
    on_disk = {p.name for p in MALFORMED.iterdir() if p.name != "expected.json"}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_file_raises_naming_its_path(name):
    with pytest.raises(TensorcadError) as info:
        load(MALFORMED / name)
    assert EXPECTED[name] in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", sorted(EXPECTED)[:6] + ["heads-not-divisible.json", "hostile-mask.json"])
def test_cli_validate_prints_one_line_and_exits_2(name):
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "validate", str(MALFORMED / name)],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert name in lines[0] and EXPECTED[name] in lines[0]


def test_cli_validate_accepts_a_good_file(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(load("nano-sort").to_dict()))
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "validate", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "ok" in run.stdout


def test_yaml_and_json_give_the_same_design(tmp_path):
    yaml = pytest.importorskip("yaml")
    raw = load("gpt2-small").to_dict()
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "d.json").write_text(json.dumps(raw))
    assert show(load(tmp_path / "d.yaml")) == show(load(tmp_path / "d.json"))


def test_a_file_larger_than_the_limit_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text('{"name": "' + "x" * (5 * 1024 * 1024) + '"}')
    with pytest.raises(TensorcadError, match="a design file is at most"):
        load(path)


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(TensorcadError, match="llama-3-8b"):
        load("llama-4")


def test_the_resolved_tree_is_immutable():
    design = load("llama-3-8b")
    with pytest.raises(Exception):
        design.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        design.nodes[0].params["vocab"] = 1  # type: ignore[index]


def test_a_stack_hands_its_ports_down_to_every_mask():
    design = load("llama-3-8b-documents")
    [(attention, layers)] = design.attentions()
    assert layers == 32
    wire = attention.tensors["doc"]
    assert wire.source == "documents" and wire.role == "documents"
    assert wire.route == ("layers.doc", "layers.block.doc", "layers.block.attention.doc",
                          "layers.block.attention.sdpa.doc")


def test_show_prints_the_expanded_design():
    text = show(load("llama-3-8b-documents"))
    assert "layers: stack x32 4096->4096" in text
    assert "keeps (q >= kv) & (doc(b, q) == doc(b, kv))" in text
    assert "doc <- input documents (documents)" in text


def test_block_params_may_sit_beside_their_kind():
    raw = json.loads(json.dumps(load("nano-sort").to_dict()))
    block = raw["nodes"][1]["params"]["block"]
    raw["nodes"][1]["params"]["block"] = {"kind": block["kind"], **block["params"]}
    raw["nodes"][1]["params"]["block"]["attention"].update(heads=3, kv_heads=2)
    with pytest.raises(TensorcadError, match=r"^nodes\[1\]\.params\.block\.attention\.heads: "):
        resolve(raw)


def test_importing_tensorcad_does_not_import_torch():
    code = "import sys, tensorcad, tensorcad.design, tensorcad.analysis.report; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.strip() == "False", run.stderr
