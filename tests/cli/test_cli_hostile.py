"""The command line under hostile arguments (#12): exit 2 with one line naming the option typed, nothing written."""

import os

import pytest

from tensorcad import cli


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv) -> str:
    code, _, err = run(capsys, *argv)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("tensorcad: "), err
    return err


@pytest.mark.parametrize("option,value", [("--seq", "\u0663"), ("--seq", "\uff11"), ("--gpus", "\u0663"),
                                          ("--mfu", "nan"), ("--pack", "inf"), ("--seq", "9" * 5000)])
def test_numbers_are_ascii_and_finite(capsys, option, value):
    err = refused(capsys, "analyze", "nano-sort", option, value)
    assert f"argument {option}: " in err and len(err) < 300


def test_an_empty_out_is_refused_not_ignored(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "argument --out: expected a file name, got ''" in refused(capsys, "analyze", "nano-sort", "--out", "")
    assert "argument -o/--output: expected a file name" in refused(capsys, "codegen", "nano-sort", "-o", "")
    assert os.listdir(tmp_path) == []


def test_work_past_the_budget_is_refused_up_front_naming_the_option(capsys):
    assert "tensorcad: --seq: 16,777,216 tokens a packed row" in refused(
        capsys, "analyze", "nano-sort", "--seq", "16777216", "--pack", "1")
    err = refused(capsys, "analyze", "nano-sort", "--seq", "65536", "--pack", "1")
    assert err.startswith("tensorcad: --pack: ") and "give a mean of at least 16" in err
    assert "--seq: 16,777,216 tokens is more than 4,194,304" in refused(capsys, "rules", "nano-sort", "--seq",
                                                                         "16777216")


def test_the_design_s_context_past_the_budget_names_seq_and_says_why(capsys, tmp_path):
    import json

    from tensorcad.design import load

    raw = load("nano-sort").to_dict()
    raw["context"] = 2**23
    path = tmp_path / "long.json"
    path.write_text(json.dumps(raw))
    assert "--seq: the design's context 8,388,608: " in refused(capsys, "analyze", str(path))


def test_a_spread_that_underflows_is_refused(capsys):
    assert "--pack-spread: spread 9.99989e-321 is below 0.0001" in refused(
        capsys, "analyze", "nano-sort", "--pack", "64", "--pack-spread", "1e-320")


def test_no_command_is_one_line_on_stderr(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out.startswith("usage:") and err == "tensorcad: name a command (see the list above, or --help)\n"


def test_a_dtype_with_a_newline_is_shown_escaped(capsys):
    assert "--train-dtype: unknown dtype 'fp8\\n'" in refused(capsys, "analyze", "nano-sort", "--train-dtype", "fp8\n")


@pytest.mark.parametrize("design", ["/dev/zero", "/dev/stdin", "x" * 5000, "x" * 5000 + ".json", "nul\x00.json"])
def test_designs_that_are_not_files_are_one_line(capsys, design):
    assert len(refused(capsys, "show", design)) < 400


def test_a_fifo_named_config_json_is_refused_without_blocking(capsys, tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(capsys, "import-hf", str(fifo))
