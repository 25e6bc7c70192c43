"""Hostile design files and expressions (#12): each class found by the attack has its regression here.

Every case ends in a TensorcadError of one line that names where the bad
value sits, in bounded time and memory; nothing that validate accepts may
later break analyze or codegen.
"""

import ast
import copy
import json
import os
import subprocess
import sys
import threading

import pytest

from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.analysis.report import analyze
from tensorcad.codegen import generate
from tensorcad.design import load, read, resolve
from tensorcad.design.expr.limits import MAX_TREE_DEPTH
from tensorcad.errors import TensorcadError, join, one_line, shown
from tensorcad.packing import Packing

NANO = load("nano-sort").to_dict()
GPT2 = load("gpt2-small").to_dict()


def refused(raw) -> TensorcadError:
    with pytest.raises(TensorcadError) as info:
        resolve(raw)
    text = str(info.value)
    assert "\n" not in text and len(text) < 2_100
    return info.value


def attention(raw) -> dict:
    """The first attention's params: the dict that says heads and causal."""
    stack = [raw]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            if "heads" in item and "causal" in item:
                return item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    raise AssertionError("no attention")


# -- denial of service from a tiny file -------------------------------------------------

def test_billion_laughs_is_refused_at_the_first_anchor_in_milliseconds(tmp_path):
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(levels) + "\nname: *i\n")
    assert path.stat().st_size < 600  # the 529-byte class: 9^9 strings once expanded
    with pytest.raises(TensorcadError, match=r"anchors and aliases are not allowed \(line 1, column 4\)"):
        read(path)


def test_an_alias_alone_is_refused_too(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text("name: &n nano\ndescription: *n\n")
    with pytest.raises(TensorcadError, match="anchors and aliases"):
        read(path)


def test_dev_zero_and_a_link_to_it_are_refused_not_read_forever(tmp_path):
    link = tmp_path / "zero.json"
    os.symlink("/dev/zero", link)
    for path in ("/dev/zero", link):
        with pytest.raises(TensorcadError, match="not a regular file"):
            read(path)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "design.json"
    os.mkfifo(fifo)
    result = {}
    reader = threading.Thread(target=lambda: result.setdefault("error", _error(lambda: read(fifo))), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in result["error"]


def _error(fn) -> str:
    try:
        fn()
    except TensorcadError as e:
        return str(e)
    return ""


def test_the_size_cap_holds_while_reading_not_only_by_stat():
    from tensorcad.design.load import read_bounded

    # /proc files are regular and stat as 0 bytes, like /dev/zero's size: only counting while reading catches them.
    assert os.stat("/proc/self/maps").st_size == 0
    with pytest.raises(TensorcadError, match="more than 100 bytes"):
        read_bounded("/proc/self/maps", "maps", limit=100)


# -- YAML 1.2 and duplicate keys ----------------------------------------------------------

def test_yaml_is_read_by_the_1_2_core_schema(tmp_path):
    from tensorcad.design.formats import parse_yaml

    got = parse_yaml("a: yes\nb: 1:30\nc: on\nd: 0o17\ne: 0x1F\nf: 2001-12-14\ng: ~\nh: TRUE\ni: 1e3\n", "f")
    assert got == {"a": "yes", "b": "1:30", "c": "on", "d": 15, "e": 31, "f": "2001-12-14", "g": None, "h": True,
                   "i": 1000.0}


def test_a_yaml_1_1_boolean_is_not_taken_for_a_flag(tmp_path):
    raw = copy.deepcopy(NANO)
    path = tmp_path / "d.yaml"
    text = json.dumps(raw).replace('"causal": true', '"causal": yes')
    path.write_text(text)
    with pytest.raises(TensorcadError, match=r"attention\.causal: 'yes' is not true or false"):
        load(path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_key_given_twice_is_refused_naming_its_path(tmp_path, suffix):
    path = tmp_path / f"d{suffix}"
    text = json.dumps(NANO).replace('"vocab": 16', '"vocab": 16, "vocab": 17')
    path.write_text(text)
    with pytest.raises(TensorcadError, match=r"nodes\[0\]\.params\.vocab: key 'vocab' is given twice"):
        load(path)


def test_python_tags_are_refused(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("!!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(TensorcadError, match="is not valid YAML"):
        read(path)
    assert not (tmp_path / "pwned").exists()


# -- tracebacks that became one line ----------------------------------------------------

@pytest.mark.parametrize("kind", [["stack"], {"a": 1}, 3, None])
def test_a_kind_that_is_not_a_string_names_its_path(kind):
    raw = copy.deepcopy(NANO)
    raw["nodes"][0]["kind"] = kind
    assert refused(raw).path == "nodes[0].kind"
    raw = copy.deepcopy(NANO)
    raw["nodes"][1]["params"]["block"]["kind"] = kind
    assert refused(raw).path == "nodes[1].params.block.kind"


@pytest.mark.parametrize("name", ["q", "k", "v", "b", "kv", "score", "heads", "max"])
def test_a_port_named_like_a_projection_or_an_expression_name_is_refused(name):
    raw = copy.deepcopy(NANO)
    raw["inputs"][name] = raw["inputs"].pop("documents")
    raw["nodes"][1]["in"][name] = raw["nodes"][1]["in"].pop("doc") and name
    attention(raw)["mask"] = f"{name}(b, q) == {name}(b, kv)"
    error = refused(raw)
    assert error.path == f"nodes[1].in.{name}" and "reserved" in error.message


def test_a_port_name_that_is_not_an_identifier_is_refused():
    raw = copy.deepcopy(NANO)
    raw["nodes"][1]["in"]["a b"] = "documents"
    assert "is not a name" in refused(raw).message


@pytest.mark.parametrize("text", [
    "max(" + ",".join(["q"] * 995) + ") >= kv",  # 995 arguments: a chain 994 deep once parsed
    "<".join(["q"] * 995),  # a 995-term comparison chain
    "min(" + ",".join(["q"] * 300) + ") >= kv",  # made codegen write a module Python could not parse
], ids=["max-995", "chain-995", "min-300"])
def test_flat_text_that_parses_to_a_deep_tree_is_refused_by_its_depth(text):
    raw = copy.deepcopy(GPT2)
    attention(raw)["mask"] = text
    assert "nests 64+ operations deep" in refused(raw).message


def test_what_validate_accepts_at_the_depth_limit_analyze_and_codegen_handle():
    raw = copy.deepcopy(GPT2)
    attention(raw)["mask"] = "min(" + ",".join(["q"] * (MAX_TREE_DEPTH - 1)) + ") >= kv"
    design = resolve(raw)
    analyze(design, OperatingPoint(seq=256))
    compile(ast.parse(generate(design)), "<generated>", "exec")
    attention(raw)["mask"] = "min(" + ",".join(["q"] * (MAX_TREE_DEPTH + 1)) + ") >= kv"
    assert "nests" in refused(raw).message


def test_a_chain_at_the_limit_through_every_stage():
    raw = copy.deepcopy(NANO)
    attention(raw)["mask"] = "(doc(b, q) == doc(b, kv)) & (" + "<=".join(["kv"] * 60) + ")"
    design = resolve(raw)
    analyze(design, OperatingPoint(seq=256, packing=Packing(48)))
    compile(ast.parse(generate(design)), "<generated>", "exec")


def test_a_5000_character_design_name_is_one_line_not_file_name_too_long():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "validate", "x" * 5000], capture_output=True,
                         text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
    assert len(run.stderr) < 400  # the name is shown cut, not in full


# -- messages that are one line -----------------------------------------------------------

def test_a_name_with_a_newline_is_shown_escaped():
    raw = copy.deepcopy(NANO)
    raw["nodes"][0]["id"] = "embed\n\x1b[31mred"
    error = refused(raw)
    assert "\n" not in str(error) and "\x1b" not in str(error) and "\\n" in str(error)


def test_a_path_with_control_characters_is_shown_escaped(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "validate", str(tmp_path / "a\nb\x1b.json")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "\\n" in run.stderr
    assert "\x1b" not in run.stderr


def test_values_are_cut_to_about_80_characters():
    assert len(shown("x" * 10_000)) <= 85
    assert shown(list(range(1000))) == "<list of 1,000 items>"
    assert one_line("a\nb\u2028c\x00") == "a\\nb\\u2028c\\x00"
    assert join("inputs", "a\nb") == "inputs.'a\\nb'"
    raw = copy.deepcopy(NANO)
    raw["nodes"][0]["params"]["vocab"] = "v" * 100_000
    assert len(str(refused(raw))) < 200
