"""Shared pieces of the plugin's tests: tiny designs a temporary downstream project holds.

Each design is small enough (about 80k parameters, 256-token context) that
`runtime.scale` leaves it as it is and a forward pass takes milliseconds, so a
pytester run of every check stays quick.
"""

from __future__ import annotations

import json

import pytest

from _pytest import pytester as _pytester


class _KeepLibraries(_pytester.SysModulesSnapshot):
    """pytester's module snapshot, keeping every module but a run's own tests.

    An in-process run drops the modules it imported when it ends; numpy and
    torch (whose compiler registers operator libraries once per process) cannot
    be imported twice, and keeping tensorcad's modules keeps the plugin's model
    cache across runs. Test modules and conftests are still dropped, so each
    run imports its own.
    """

    def __init__(self, preserve=None):
        super().__init__(preserve=lambda name: not name.startswith(("test_", "conftest")))


@pytest.fixture(scope="session", autouse=True)
def _keep_libraries():
    # Session-wide and autouse, so it is in place before any pytester fixture takes a snapshot.
    original = _pytester.SysModulesSnapshot
    _pytester.SysModulesSnapshot = _KeepLibraries
    yield
    _pytester.SysModulesSnapshot = original


def design_json(name: str, mask: str | None = "doc(b, q) == doc(b, kv)", documents: bool = True,
                vocab: int = 64, dim: int = 64, layers: int = 2) -> str:
    attention = {"heads": 4, "head_dim": 16, "causal": True, "rope": {"theta": 10000}}
    inputs = {"ids": {"role": "tokens"}}
    stack_in = {"x": "embed"}
    if documents:
        inputs["documents"] = {"role": "documents"}
        stack_in["doc"] = "documents"
    if mask is not None:
        attention["mask"] = mask
    design = {
        "name": name,
        "context": 256,
        "inputs": inputs,
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
            {"id": "layers", "kind": "stack", "in": stack_in, "params": {"repeat": layers, "block": {
                "kind": "transformer_block", "params": {
                    "dim": dim, "norm": "rmsnorm", "mlp": {"hidden": 2 * dim, "activation": "swiglu"},
                    "attention": attention}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": vocab}},
        ],
        "output": "head",
    }
    return json.dumps(design, indent=2)


ISOLATED = design_json("tiny-documents")
PLAIN = design_json("tiny-plain", mask=None, documents=False)
LEAKING = design_json("tiny-leaking", mask="doc(b, q) >= doc(b, kv)")


@pytest.fixture
def project(pytester: pytest.Pytester):
    """A downstream project: designs/tiny-documents.json and designs/tiny-plain.json, an empty ini."""
    pytester.makeini("[pytest]\n")
    designs = pytester.mkdir("designs")
    (designs / "tiny-documents.json").write_text(ISOLATED)
    (designs / "tiny-plain.json").write_text(PLAIN)
    return pytester


@pytest.fixture
def design_texts() -> dict[str, str]:
    """The test designs' JSON, by name; `make(name, mask=..., documents=...)` builds another."""
    return {"isolated": ISOLATED, "plain": PLAIN, "leaking": LEAKING, "make": design_json}


@pytest.fixture
def golden_file():
    """find(root, kind, design): the one golden of ``design`` under root/snapshots/<kind>/,
    whatever operating point its name carries."""

    def find(root, kind: str, design: str):
        directory = root / "snapshots" / kind
        found = [p for p in directory.iterdir() if p.stem == design or p.stem.startswith(design + "@")]
        assert len(found) == 1, sorted(p.name for p in directory.iterdir())
        return found[0]

    return find


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The wheel of this checkout (`pip wheel --no-deps .`), built once a session (tests/testing/installed.py)."""
    from installed import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))
