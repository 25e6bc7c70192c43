"""`tensorcad walkthrough | mask-preview` and the --json of show, catalog, codegen and validate (#19)."""

import json

import pytest

from tensorcad.cli import main

NANO_CELL = 2  # nano-sort's 256 tokens in 128 cells


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_mask_preview_of_one_causal_document_is_the_closed_form(capsys):
    code, out, _ = run(capsys, "mask-preview", "nano-sort", "--json")
    preview = json.loads(out)
    assert code == 0 and preview["cellTokens"] == NANO_CELL and not preview["sampled"] and preview["exact"]
    c = NANO_CELL
    for i, line in enumerate(preview["fractions"]):
        # below the diagonal every score is kept, above none; a diagonal cell keeps c(c+1)/2 of c*c
        assert line == [1.0 if j < i else 0.0 if j > i else round((c + 1) / (2 * c), 6) for j in range(len(line))]


def test_mask_preview_draws_a_marked_sample(capsys):
    code, out, _ = run(capsys, "mask-preview", "nano-sort")
    head, *rows = out.splitlines()
    assert code == 0 and "a sample: one document fills the row" in head and len(rows) == 32
    assert all(row == "@" * i + "+" for i, row in enumerate(rows))  # causal: kept below, half on the diagonal
    code, out, _ = run(capsys, "mask-preview", "nano-sort", "--pack", "32")
    assert "a sample: one sampled row of the packing" in out.splitlines()[0]


def test_mask_preview_s_bad_options_are_named(capsys):
    code, _, err = run(capsys, "mask-preview", "nano-sort", "--attention", "3")
    assert code == 2 and err.startswith("tensorcad: --attention: expected an integer in [0, 0]") and err.count("\n") == 1


def test_walkthrough_says_each_stage_with_the_report_s_figures(capsys):
    code, out, _ = run(capsys, "walkthrough", "llama-3-8b-documents", "--seq", "8192", "--pack", "1024",
                       "--pack-spread", "0", "--json")
    steps = json.loads(out)
    _, out, _ = run(capsys, "analyze", "llama-3-8b-documents", "--seq", "8192", "--pack", "1024", "--pack-spread",
                    "0", "--json")
    report = json.loads(out)
    assert [s["step"] for s in steps["steps"]] == ["inputs", "embedding", "blocks", "attention", "head"]
    assert steps["operatingPoint"] == report["operatingPoint"]
    attention = steps["steps"][3]["text"]
    assert f"a query keeps {report['flops']['packed']['keysPerQuery']:,.1f} keys" in attention


def test_walkthrough_of_a_hybrid_says_what_its_mixers_carry_and_reset(capsys):
    code, out, _ = run(capsys, "walkthrough", "mamba2-hybrid-documents", "--json")
    _, report, _ = run(capsys, "analyze", "mamba2-hybrid-documents", "--json")
    report = json.loads(report)
    steps = {s["step"]: s["text"] for s in json.loads(out)["steps"]}
    assert code == 0 and list(steps) == ["inputs", "embedding", "blocks", "mixers", "attention", "head"]
    assert "42 layers mix tokens with a ssm mixer" in steps["mixers"]
    assert "its state is zero at each document's first token" in steps["mixers"]
    assert f"{report['serving']['perStream']['stateBytes'] / 2**20:,.2f} MiB" in steps["mixers"]
    assert "mamba (mixer_block) 42, attention (transformer_block) 6" in steps["blocks"]


@pytest.mark.parametrize("command,key", [("show", "text"), ("codegen", "source")])
def test_json_holds_the_text_the_command_prints(capsys, command, key):
    _, text, _ = run(capsys, command, "nano-sort")
    _, out, _ = run(capsys, command, "nano-sort", "--json")
    assert json.loads(out)[key] == text and json.loads(out)["name"] == "nano-sort"


def test_catalog_json_holds_the_text_and_the_kinds(capsys):
    _, text, _ = run(capsys, "catalog", "rope")
    _, out, _ = run(capsys, "catalog", "rope", "--json")
    assert json.loads(out)["text"] == text and [k["name"] for k in json.loads(out)["kinds"]] == ["rope"]


def test_validate_json_has_an_entry_a_file_and_exits_2_on_a_bad_one(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "inputs": {}, "nodes": [], "output": "y"}')
    code, out, err = run(capsys, "validate", "nano-sort", str(bad), "--json")
    good, broken = json.loads(out)
    assert code == 2 and err == ""
    assert good == {"file": "nano-sort", "ok": True, "name": "nano-sort", "nodes": 4, "context": 256,
                    "inputs": [{"name": "ids", "role": "tokens"}, {"name": "documents", "role": "documents"}]}
    assert broken["ok"] is False and broken["file"] == str(bad)
    assert broken["path"] == "inputs" and broken["error"].startswith("inputs: ")
