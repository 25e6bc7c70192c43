"""A Hugging Face user's first hour on the command line (issue 33): each friction, reproduced through `main`."""

from __future__ import annotations

import json

import pytest

from tensorcad.cli import main

CONFIG = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
          "tie_word_embeddings": False, "architectures": ["LlamaForCausalLM"]}


@pytest.fixture
def model_dir(tmp_path):
    directory = tmp_path / "tiny-llama"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(CONFIG))
    return str(directory)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# 1. analyze MODEL_DIR --pack 64 printed a packed header and no packed figure, and never said why.

def test_analyze_a_config_with_pack_says_its_assumption_in_one_line_and_keeps_a_packed_row(model_dir, capsys):
    code, out, err = run(capsys, "analyze", model_dir, "--pack", "64")
    assert code == 0
    assert err == (f"tensorcad: note: {model_dir} imported without --documents: packed documents see each other "
                   "(transformers with a cache or a 2D attention_mask); for DataCollatorWithFlattening's "
                   "position_ids with use_cache=False, pass --documents --positions\n")
    # Attention crossing documents is plain causal attention over the row: (T + 1) / 2 keys a query at T = 256.
    assert "128.5 keys a query" in out
    row = next(line for line in out.splitlines() if line.startswith("packed train / token"))
    train = next(line for line in out.splitlines() if line.startswith("train / token"))
    assert row.split()[4:6] == train.split()[3:5]  # the same figure as one document a row
    assert "packed documents attend to each other" in row


def test_analyze_a_config_with_documents_prints_the_packed_figures_and_no_note(model_dir, capsys):
    code, out, err = run(capsys, "analyze", model_dir, "--pack", "64", "--pack-spread", "0", "--pack-strategy",
                         "bfd", "--documents", "--positions", "--json")
    assert code == 0 and err == ""
    report = json.loads(out)
    # Fixed 64-token documents packed best-fit into 256-token rows: 4 whole documents a row, each
    # query keeps the (i + 1) keys of its own document: mean (64 + 1) / 2 = 32.5.
    assert report["flops"]["packed"]["keysPerQuery"] == pytest.approx(32.5, rel=1e-9)


def test_rules_on_a_config_says_what_the_model_does_and_how_to_import_the_other(model_dir, capsys):
    code, out, err = run(capsys, "rules", model_dir, "--pack", "64", "--json")
    [note] = json.loads(out)
    assert note["rule"] == "packing-unused"
    assert "this design's attention crosses documents" in note["message"]
    assert "imported with --documents --positions" in note["message"]
    code, out, _ = run(capsys, "rules", model_dir, "--pack", "64", "--documents", "--json")
    assert "packing-unused" not in [d["rule"] for d in json.loads(out)]


def test_documents_on_a_design_file_is_refused_in_one_line(capsys):
    code, out, err = run(capsys, "analyze", "nano-sort", "--documents")
    assert code == 2 and err == ("tensorcad: --documents: imports a Hugging Face config with that input; "
                                 "'nano-sort' is not a config.json or model directory (a design's inputs are "
                                 "its own)\n")


def test_walkthrough_takes_documents_too(model_dir, capsys):
    code, out, _ = run(capsys, "walkthrough", model_dir, "--pack", "64", "--documents", "--json")
    assert code == 0 and "doc(b, q) == doc(b, kv)" in out
