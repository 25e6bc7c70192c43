"""One answer for a sequence past the design's context, on every surface.

`rules` makes it an error, `analyze` a warning line and a report flag, the editor's
rules say the same (and the editor starts at the context: tests/editor/test_browser.py),
and the generated model names --seq (tests/runtime/building/test_build.py).
"""

import json
import subprocess
import sys

import tensorcad
from tensorcad import OperatingPoint
from tensorcad.editor import api
from tensorcad.rules import check

WHY = "the sequence is 131,072 tokens, past the design's context of 8,192"


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "tensorcad.cli", *argv], capture_output=True, text=True)


def test_rules_make_it_an_error_on_seq():
    found = check("llama-3-8b-documents", OperatingPoint(seq=131072))
    assert [(d.rule, d.severity, d.path) for d in found if d.rule == "past-context"] == [("past-context", "error", "seq")]
    assert found[0].message.startswith(WHY) and "--seq 8192" in found[0].message
    assert not [d for d in check("llama-3-8b-documents", OperatingPoint(seq=8192)) if d.rule == "past-context"]


def test_cli_rules_exit_1_and_analyze_warns_on_stderr_with_the_flag_in_json():
    run = _cli("rules", "llama-3-8b-documents", "--seq", "131072")
    assert run.returncode == 1 and "past-context" in run.stdout
    run = _cli("analyze", "gpt2-small", "--seq", "2048", "--json")
    assert run.returncode == 0
    assert run.stderr.splitlines() == [
        "tensorcad: warning: the sequence is 2,048 tokens, past the design's context of 1,024: "
        "run at --seq 1024 or less, or raise the design's context"]
    assert json.loads(run.stdout)["warnings"] == [run.stderr.splitlines()[0].removeprefix("tensorcad: warning: ")]
    # At the context: no warning, and the report keeps its shape (goldens unchanged).
    run = _cli("analyze", "gpt2-small", "--json")
    assert run.stderr == "" and "warnings" not in json.loads(run.stdout)


def test_a_learned_table_is_past_the_context_once_not_twice():
    found = check("gpt2-small", OperatingPoint(seq=2048))
    assert [d.rule for d in found if d.severity == "error"] == ["past-context"]


def test_a_table_shorter_than_the_design_context_is_still_its_own_error():
    design = tensorcad.load("gpt2-small").to_dict()
    wpe = next(n for n in design["nodes"] if n["kind"] == "pos_embedding")
    wpe["params"]["context"] = 512
    found = check(design, OperatingPoint(seq=1024))
    assert [(d.rule, d.path) for d in found if d.severity == "error"] == [("position-table", f"{_path(design, wpe)}.params.context")]


def test_the_editor_reports_the_same_error():
    answer = api.rules({"design": "llama-3-8b-documents", "op": {"seq": 131072}})
    assert [d["rule"] for d in answer["diagnostics"] if d["severity"] == "error"] == ["past-context"]


def _path(design, node):
    return f"nodes[{design['nodes'].index(node)}]"
