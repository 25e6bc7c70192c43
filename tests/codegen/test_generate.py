"""generate(): every preset's source compiles, is formatted, deterministic and safe.

Running the generated models is tests/runtime/building/test_build.py's job; here the source
itself is checked, plus the one generated function with an independent oracle (T5's
bias score), which runs in eager arithmetic only.
"""

from __future__ import annotations

import ast
import math

import pytest

import tensorcad
from tensorcad.codegen.generate import VERBATIM, sections

PRESETS = tensorcad.preset_names()
HOSTILE = 'x"); import os; os.system("echo pwned'


@pytest.fixture(scope="module")
def sources():
    return {p: tensorcad.generate(tensorcad.load(p)) for p in PRESETS}


@pytest.mark.parametrize("preset", PRESETS)
def test_compiles_and_round_trips(preset, sources):
    source = sources[preset]
    compile(source, f"<{preset}>", "exec")
    tree = ast.parse(source)
    assert ast.parse(ast.unparse(tree)).body and ast.dump(ast.parse(ast.unparse(tree))) == ast.dump(tree)
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert {"Config", "Model"} <= top and "CONFIG" in assigned
    imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imports |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imports <= {"contextlib", "copy", "math", "sys", "warnings", "dataclasses", "torch"}  # stdlib and torch only


@pytest.mark.parametrize("preset", PRESETS)
def test_deterministic(preset, sources):
    assert tensorcad.generate(tensorcad.load(preset)) == sources[preset]


@pytest.mark.parametrize("preset", PRESETS)
def test_formatted_as_black_leaves_it(preset, sources):
    black = pytest.importorskip("black")
    assert black.format_str(sources[preset], mode=black.Mode()) == sources[preset]


def test_forward_signature_follows_the_inputs(sources):
    def forward_args(source):
        tree = ast.parse(source)
        model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
        return [a.arg for a in forward.args.args]

    # The public contract: one signature for every generated model; what the design
    # has no input for is refused when passed (see test_build's contract test).
    for source in sources.values():
        assert forward_args(source) == ["self", "ids", "documents", "positions"]


def test_no_positions_code_without_a_positions_input():
    for preset in ("llama-3-8b", "llama-3-8b-documents", "gpt2-small", "mistral-7b"):
        own = "\n".join(t for k, t in sections(tensorcad.load(preset)) if k not in VERBATIM)
        tree = ast.parse(own)
        # Model.forward names positions only to refuse them; nothing else may.
        tree.body = [n for n in tree.body if not (isinstance(n, ast.ClassDef) and n.name == "Model")]
        assert '"this design has no positions input: it counts 0..T-1 itself; pass positions=None"' in own
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
        assert not names & {"positions", "pos"}
        if preset != "gpt2-small":
            assert "rotate(q, self.cos, self.sin)" in own


def test_document_mask_is_a_named_factory(sources):
    source = sources["llama-3-8b-documents"]
    assert "def causal_same_document_mask(doc):" in source
    assert "causal_same_document.reads = (doc,)" in source
    assert "def causal(b, h, q_idx, kv_idx):" in sources["llama-3-8b"]
    assert "Sliding window of 4096 keys, the query included" in sources["mistral-7b"]


def _hostile_design():
    raw = tensorcad.load("llama-3-8b-documents").to_dict()
    raw["name"] = HOSTILE + '"""; print(1) #'  # a newline in a name is refused by the name rule (#32)
    ids = {"embed": "__import__", "layers": HOSTILE, "norm": "class", "head": "héad\"'"}
    for node in raw["nodes"]:
        node["id"] = ids[node["id"]]
        node["in"] = {port: ids.get(ref, ref) for port, ref in node.get("in", {}).items()}
    raw["output"] = ids["head"]
    raw["inputs"] = {"ids'); os.system('x": {"role": "tokens"}, "docs#'": {"role": "documents"}}
    raw["nodes"][0]["in"]["x"] = "ids'); os.system('x"
    raw["nodes"][1]["in"]["doc"] = "docs#'"
    return tensorcad.design.resolve(raw)


def test_hostile_names_never_reach_the_source():
    design = _hostile_design()
    source = tensorcad.generate(design)
    compile(source, "<hostile>", "exec")
    for raw in (HOSTILE, "__import__", "os.system(", "print(1)", "héad", "ids')", "docs#'"):
        assert raw not in source, raw
    tree = ast.parse(source)
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"eval", "exec", "__import__", "print", "system"}
    assert tensorcad.generate(design) == source


def test_t5_score_matches_an_independent_bucket():
    torch = pytest.importorskip("torch")
    from tensorcad.runtime import build

    model = build(tensorcad.runtime.scale(tensorcad.load("t5-bias"), 150_000), form="eager")
    namespace = vars(__import__("sys").modules[type(model).__module__])
    table = model.relative_bias.detach()  # (buckets, H)
    score_mod = namespace["relative_position_bias_score"](table)

    def bucket(relative, num_buckets=32, max_distance=128):
        # HF T5Attention._relative_position_bucket, bidirectional=False, one pair at a time
        n = max(-relative, 0)
        exact = num_buckets // 2
        if n < exact:
            return n
        large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
        return min(large, num_buckets - 1)

    T, H = 300, table.shape[1]
    q = torch.arange(T).view(T, 1)
    kv = torch.arange(T).view(1, T)
    score = torch.randn(H, T, T)
    got = score_mod(score, torch.tensor(0), torch.arange(H).view(H, 1, 1), q, kv)
    want = score.clone()
    for h in range(H):
        for i in range(0, T, 7):
            for j in range(T):
                want[h, i, j] += table[bucket(j - i), h]
    rows = torch.arange(0, T, 7)
    assert torch.equal(got[:, rows], want[:, rows])


# Ids that sanitise to what the generated module states of itself (#32): each validated and compiled, then the
# model broke at construction or forward, or the runtime read a submodule where it expected MASKS.
CONTRACT_IDS = ["MASKS", "masks", "recording_attend", "RUNTIME_PATHS", "compile_pieces", "sys", "contextlib", "BLOCK"]


def test_ids_named_like_the_generated_module_s_own_names_build_and_run():
    torch = pytest.importorskip("torch")
    from tensorcad.runtime import build

    raw = tensorcad.load("nano-sort").to_dict()
    for node, new in zip(raw["nodes"], CONTRACT_IDS):
        old, node["id"] = node["id"], new
        for other in raw["nodes"]:
            other["in"] = {port: new if ref == old else ref for port, ref in other.get("in", {}).items()}
        raw["output"] = new if raw["output"] == old else raw["output"]
    design = tensorcad.design.resolve(raw)
    model = build(tensorcad.runtime.scale(design, 50_000), form="eager")
    assert isinstance(model.masks, dict) and callable(model.recording_attend)  # the contract, not a submodule
    ids = torch.randint(0, 8, (1, 16))
    documents = torch.zeros(1, 16, dtype=torch.long)
    with model.recording_attend() as calls:
        logits = model(ids, documents)
    assert logits.shape[:2] == (1, 16) and len(calls) >= 1
