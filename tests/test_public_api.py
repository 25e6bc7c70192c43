"""The public API: DESIGN.md's snippets run as written, and every name the docs or a face give imports.

Tests outside this repo use these names; a module that moved (tensorcad.faces.MOVED) still
imports from where it was.
"""

import subprocess
import sys

import pytest

import tensorcad
from tensorcad import closed_form


def test_the_engine_snippet():
    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    report = tensorcad.analyze(design, op)
    assert report.to_json()["flops"]["packed"]["keysPerQuery"] == pytest.approx(
        closed_form.fixed_phase_average(8192, 1024), rel=1e-6)
    diagnostics = tensorcad.check(design, op)
    assert [(d.rule, d.severity) for d in diagnostics] == [("document-blocks", "note")]
    assert {"rule", "severity", "message", "path"} <= set(vars(diagnostics[0]))
    source = tensorcad.generate(design)
    assert "class Model(nn.Module)" in source and "import torch" in source
    docs, pos = tensorcad.packing.draw(rows=4, seq=512, mean=96, spread=1.0, seed=0)
    assert docs.shape == pos.shape == (4, 512)
    assert (tensorcad.packing.positions_of(docs) == pos).all()


def test_the_runtime_snippet():
    torch = pytest.importorskip("torch")
    design = tensorcad.load("llama-3-8b-documents")
    small = tensorcad.runtime.scale(design, params=2_000_000)
    model = tensorcad.runtime.build(small, form="flex")
    assert model.form == "flex"
    model.form = "eager"
    docs, _ = tensorcad.packing.draw(rows=2, seq=64, mean=16, spread=1.0, seed=0)
    ids = torch.zeros(2, 64, dtype=torch.long)
    with torch.no_grad():
        logits = model(ids, torch.from_numpy(docs))
    assert logits.shape == (2, 64, small.node(small.output).dim)


def test_the_harness_snippet():
    pytest.importorskip("torch")
    from tensorcad.testing import assert_closed_form, assert_isolated

    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    engine, exact = assert_closed_form(design, op, rel=0.02)
    assert engine == pytest.approx(exact, rel=1e-6)
    assert callable(assert_isolated)


@pytest.mark.slow
def test_block_counts_at_the_operating_points_own_length():
    # The scaled model holds 1,024 positions; the mask is still counted over 8,192-token rows.
    from tensorcad.testing import assert_block_counts_agree

    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    [result] = assert_block_counts_agree(design, op, rows=64)
    assert result.rows == 64 and result.seq == 8192 and result.mismatched_rows == ()


# --- every public name the docs and the faces name imports from where they say --------------------

import ast  # noqa: E402
import importlib  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

from tensorcad.faces import MOVED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(r"`((?:tensorcad|harness)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _resolve(dotted: str):
    """The object a dotted name means, read as a user reads it: attributes of a face first, a module only
    where no face has the name (so `tensorcad.closed_form` is the face's name, not the module's old path)."""
    parts = dotted.split(".")
    value = importlib.import_module(parts[0])
    for cut, part in enumerate(parts[1:], 2):
        try:
            value = getattr(value, part)
        except AttributeError:
            value = importlib.import_module(".".join(parts[:cut]))
    return value


def _documented() -> list[str]:
    names = set()
    for page in PAGES:
        text = page.read_text()
        names |= {m.group(1) for m in DOTTED.finditer(text)}
        for block in re.findall(r"```python\n(.*?)```", text, re.S):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorcad"):
                    names |= {f"{node.module}.{a.name}" for a in node.names}
                elif isinstance(node, ast.Import):
                    names |= {a.name for a in node.names if a.name.startswith("tensorcad")}
    return sorted(names)


def _faces() -> list[str]:
    names = []
    for init in sorted((ROOT / "tensorcad").rglob("__init__.py")):
        module = ".".join(init.parent.relative_to(ROOT).parts)
        names += [f"{module}.{name}" for name in importlib.import_module(module).__dict__.get("__all__", ())]
    return names


@pytest.mark.parametrize("name", _documented())
def test_every_name_the_docs_give_imports_from_where_they_say(name):
    assert _resolve(name) is not None


@pytest.mark.parametrize("name", _faces())
def test_every_name_a_face_lists_is_there(name):
    module, _, attribute = name.rpartition(".")
    assert getattr(importlib.import_module(module), attribute) is not None


def test_the_lists_are_not_empty():
    # What the two tests above range over: a parser that found nothing would pass them vacuously.
    assert len(_documented()) > 30 and "tensorcad.packing.draw" in _documented()
    assert len(_faces()) > 150 and "tensorcad.runtime.build" in _faces()


def test_every_module_that_moved_still_imports_from_where_it_was():
    # In a fresh process: the same module object under both paths, and its own spec kept.
    code = ("import importlib, sys\n"
            "from tensorcad.faces import MOVED\n"
            "for old, new in sorted(MOVED.items()):\n"
            "    a, b = importlib.import_module(old), importlib.import_module(new)\n"
            "    if a is not b or b.__spec__.name != new or sys.modules[old] is not b:\n"
            "        print(old, a, b, b.__spec__.name)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout == "", run.stdout + run.stderr
    assert len(MOVED) > 20 and MOVED["tensorcad.runtime.isolation"] == "tensorcad.runtime.certification.forward.isolation"


def test_an_old_path_warns_naming_the_new_one():
    # Each old path, in a fresh process: one DeprecationWarning, naming where the module is now.
    code = ("import importlib, warnings\n"
            "from tensorcad.faces import MOVED\n"
            "for old, new in sorted(MOVED.items()):\n"
            "    with warnings.catch_warnings(record=True) as seen:\n"
            "        warnings.simplefilter('always')\n"
            "        importlib.import_module(old)\n"
            "    said = [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)]\n"
            "    if len(said) != 1 or new not in said[0] or old not in said[0]:\n"
            "        print(old, said)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout == "", run.stdout + run.stderr
    # the rooms of issue 41 among them, each to its room
    assert MOVED["tensorcad.runtime.certification.step_loss"] == "tensorcad.runtime.certification.step.loss"
    assert MOVED["tensorcad.analysis.context_parallel_report"] == "tensorcad.analysis.context_parallel.report"
    assert MOVED["tensorcad.hf.hybrid_packing"] == "tensorcad.hf.hybrid.packing"


def test_a_submodule_of_a_moved_package_is_one_module_under_both_paths():
    # tensorcad.corpus is packing.corpus: its histogram must not load twice (two Lengths classes).
    code = ("import tensorcad.corpus.histogram as old, tensorcad.packing.corpus.histogram as new\n"
            "from tensorcad.corpus.histogram import Lengths\n"
            "assert old is new and Lengths is new.Lengths\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr


def test_nothing_in_the_repository_imports_an_old_path():
    old = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(re.escape(m) for m in MOVED) + r")\b(?!\.)")
    # nor as a submodule of the package it lived in (`from tensorcad.runtime.certification import step_loss`)
    by_name = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?\s*([\w, ]+)")

    def names_a_moved_module(line: str) -> bool:
        m = by_name.search(line)
        return m is not None and any(f"{m.group(1)}.{name.split(' as ')[0].strip()}" in MOVED
                                     for name in m.group(2).split(","))

    found = [f"{path.relative_to(ROOT)}:{n}" for top in ("tensorcad", "tests", "benchmarks", "tools")
             for path in (ROOT / top).rglob("*.py") if path.name != "test_public_api.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if old.search(line) or names_a_moved_module(line)]
    assert found == []


def test_the_version_is_pyprojects():
    import tomllib

    import tensorcad

    assert tensorcad.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert run.stdout.strip() == f"tensorcad {tensorcad.__version__}", run.stdout + run.stderr
