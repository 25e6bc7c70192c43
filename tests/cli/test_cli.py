"""The CLI's conventions: every command has --help; bad input is one line on stderr and exit 2."""

import subprocess
import sys

import pytest

from tensorcad.cli import parser

COMMANDS = sorted(parser()._subparsers._group_actions[0].choices)


def _run(*argv):
    return subprocess.run([sys.executable, "-m", "tensorcad.cli", *argv], capture_output=True, text=True)


def test_the_commands_are_the_documented_ones():
    assert set(COMMANDS) == {"presets", "catalog", "show", "validate", "analyze", "rules", "codegen", "verify",
                             "certify", "smoke-train", "trace", "editor", "mcp", "new", "import-hf",
                             "lengths", "walkthrough", "mask-preview", "certify-data"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    run = _run(command, "--help")
    assert run.returncode == 0 and run.stdout.startswith("usage: tensorcad " + command)


@pytest.mark.parametrize("argv,text", [
    (["frobnicate"], "invalid choice"),
    (["analyze"], "the following arguments are required: design"),
    (["analyze", "/no/such/design.json"], "no such file"),
    (["analyze", "llama-4"], "neither a preset"),
    (["show", "nano-sort", "--bogus"], "unrecognized arguments"),
    (["codegen", "nano-sort", "--scale", "0"], "--scale: 0 is outside"),
    (["editor", "/no/such.yaml"], "no such file"),
    (["analyze", "gpt2-small", "--out", "/"], "--out: '/' is a directory, not a regular file"),
    (["codegen", "gpt2-small", "-o", "/no/such/dir/model.py"], "--output: cannot write"),
    (["verify", "nano-sort", "--seed", "99999999999999999999999"], "seed: expected an integer"),
    (["smoke-train", "nano-sort", "--seed", "-1"], "seed: expected an integer"),
    (["smoke-train", "nano-sort", "--steps", "0"], "steps: expected an integer"),
    (["certify", "gpt2-small", "--seq", "99999999999"], "--seq: 99999999999 is outside 1..1,024"),
    (["verify", "nano-sort", "--seq", "512"], "seq: expected tokens a row in 1..256"),
    (["analyze", "llama-3-8b", "--seq", "\u0663"], "analyze: argument --seq: '\u0663' is not a number"),
    (["analyze", "llama-3-8b", "--seq", "1.5"], "'1.5' is not a whole number"),
    (["analyze", "llama-3-8b", "--tokens", "inf"], "'inf' is not a number"),
    (["analyze", "nano-sortt"], "(did you mean 'nano-sort'?)"),
    (["catalog", "stak"], "(did you mean 'stack'?)"),
])
def test_bad_input_is_one_line_and_exit_2(argv, text):
    run = _run(*argv)
    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
    assert text in run.stderr


def test_show_prints_the_tree():
    run = _run("show", "gpt2-small")
    assert run.returncode == 0 and "lm_head: linear 768->50257" in run.stdout


def test_verify_defaults_fit_a_short_context():
    # nano-sort holds 256 positions: the default row is 512 tokens or the context, whichever is shorter.
    run = _run("verify", "nano-sort", "--json")
    assert run.returncode == 0, run.stderr
    assert '"seq": 256' in run.stdout


def test_one_prefix_on_argument_errors():
    run = _run("analyze", "llama-3-8b", "--seq", "x")
    assert run.stderr.startswith("tensorcad: analyze: argument --seq:") and run.stderr.count("tensorcad") == 1


def test_numbers_with_exponents_are_accepted_by_integer_options():
    scaled = _run("codegen", "nano-sort", "--scale", "2e5")
    assert scaled.returncode == 0, scaled.stderr
    assert scaled.stdout == _run("codegen", "nano-sort", "--scale", "200000").stdout
    assert _run("analyze", "llama-3-8b", "--seq", "8.192e3", "--json").stdout == _run(
        "analyze", "llama-3-8b", "--seq", "8192", "--json").stdout


def test_validate_reports_every_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(_run("new", "good").stdout)
    run = _run("validate", str(good), "/no/such.json", "nano-sortt", str(good))
    assert run.returncode == 2
    assert run.stdout.splitlines() == [f"{good}: ok (good, 4 nodes)"] * 2
    assert [line.split(": ")[1] for line in run.stderr.splitlines()] == ["/no/such.json", "nano-sortt"]


def test_new_writes_a_renamed_copy_and_never_overwrites(tmp_path):
    import json

    from tensorcad.design import load

    out = tmp_path / "mine.json"
    run = _run("new", "mine", "--from", "llama-3-8b-documents", "-o", str(out))
    assert run.returncode == 0, run.stderr
    written = json.loads(out.read_text())
    assert written == {**load("llama-3-8b-documents").to_dict(), "name": "mine"}
    out.write_text("{}")
    again = _run("new", "mine", "-o", str(out))
    assert again.returncode == 2 and "exists; pass --force" in again.stderr and out.read_text() == "{}"
    assert _run("new", "mine", "-o", str(out), "--force").returncode == 0 and load(str(out)).name == "mine"
    bad = _run("new", "x" * 201, "-o", str(tmp_path / "long.json"))
    assert bad.returncode == 2 and "tensorcad: NAME: must be a string of 1 to 200 characters" in bad.stderr
    assert not (tmp_path / "long.json").exists()
