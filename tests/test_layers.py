"""The layering contracts (`lint-imports`, pyproject.toml) hold, and break when a forbidden import is added.

Each broken case copies the package and the contracts to a temporary
directory, adds one import, and runs `lint-imports` there: the contract it
breaks must be named.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("importlinter")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A copy of tensorcad/, tensorcad/testing/ and pyproject.toml, restored between cases."""
    root = tmp_path_factory.mktemp("layers")
    ignore = shutil.ignore_patterns("__pycache__", "static", "presets")
    shutil.copytree(ROOT / "tensorcad", root / "tensorcad", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold_here():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "11 kept, 0 broken" in result.stdout
    assert "ignored imports" not in result.stdout.split("no two modules")[-1]  # no cycle let through


CASES = {
    # module, import added, the contract's name it breaks
    "design imports analysis": ("tensorcad/design/masks.py", "import tensorcad.analysis.report",
                                "tensorcad.design imports no packing, analysis"),
    "engine imports the testing API": ("tensorcad/runtime/certification/registry.py", "import tensorcad.testing.checks",
                               "nothing in tensorcad but its testing API imports tensorcad.testing"),
    "analysis imports torch": ("tensorcad/analysis/blocks.py", "import torch",
                               "the engine (everything but tensorcad.runtime and the HF adapters)"),
    "a cycle": ("tensorcad/errors.py", "import tensorcad.packing",
                "no two modules (or packages) of tensorcad import each other"),
    "a cycle inside packing": ("tensorcad/packing/stream.py", "import tensorcad.packing.drawing",
                               "no two modules (or packages) of tensorcad import each other"),
    "packing imports analysis": ("tensorcad/packing/strategies.py", "import tensorcad.analysis.rows",
                                 "the surfaces over the runtime over the engine over packing"),
    "the runtime imports a surface": ("tensorcad/runtime/building/subject.py", "import tensorcad.views.answers",
                                      "the surfaces over the runtime over the engine over packing"),
    "building imports certification": ("tensorcad/runtime/building/subject.py",
                                       "import tensorcad.runtime.certification.forward.isolation",
                                       "the runtime's rooms: training over certification over building"),
    "certification imports training": ("tensorcad/runtime/certification/registry.py",
                                       "import tensorcad.runtime.training.smoke",
                                       "the runtime's rooms: training over certification over building"),
    "the testing API imports behind a face": ("tensorcad/testing/checks.py", "import tensorcad.packing.stream",
                                      "tensorcad.testing imports tensorcad's packages only through their faces"),
    "the testing API imports behind a room's face": ("tensorcad/testing/checks.py", "import tensorcad.runtime.certification.forward.isolation",
                                             "tensorcad.testing imports tensorcad's packages only through their faces"),
    # the rooms of certification, context parallelism and the hybrids (issue 41)
    "the forward pass imports the step": ("tensorcad/runtime/certification/forward/isolation.py",
                                          "import tensorcad.runtime.certification.step.loss",
                                          "certification's rooms: the step over the forward pass over"),
    "a design check imports the forward pass": ("tensorcad/runtime/certification/design/masks.py",
                                                "import tensorcad.runtime.certification.forward.faithful",
                                                "certification's rooms: the step over the forward pass over"),
    "the design checks import the shard plan": ("tensorcad/runtime/certification/design/masks.py",
                                                 "import tensorcad.runtime.certification.parallel.plan",
                                                 "certification's rooms: the step over the forward pass over"),
    "the shard plan imports the step": ("tensorcad/runtime/certification/parallel/plan.py",
                                        "import tensorcad.runtime.certification.step.batch",
                                        "certification's rooms: the step over the forward pass over"),
    "a certificate imports the registry": ("tensorcad/runtime/certification/step/loss.py",
                                           "import tensorcad.runtime.certification.registry",
                                           "certification's rooms: the step over the forward pass over"),
    "the data path imports the forward pass": ("tensorcad/runtime/certification/data/coverage.py",
                                               "import tensorcad.runtime.certification.forward.isolation",
                                               "certification's rooms: the step over the forward pass over"),
    "the step imports the RL checks": ("tensorcad/runtime/certification/step/loss.py",
                                       "import tensorcad.runtime.certification.rl.aggregation",
                                       "certification's rooms: the step over the forward pass over"),
    "the ranks read the report": ("tensorcad/analysis/context_parallel/ranks.py",
                                  "import tensorcad.analysis.context_parallel.report",
                                  "context parallelism's report over the ranks"),
    "PyTorch's cases read the ranks": ("tensorcad/analysis/context_parallel/pytorch.py",
                                       "import tensorcad.analysis.context_parallel.ranks",
                                       "context parallelism's report over the ranks"),
    "a hybrid's config reads the weights": ("tensorcad/hf/hybrid/families.py", "import tensorcad.hf.hybrid.weights",
                                            "the hybrid families' configs, weights and packing know nothing"),
    "torch commands import the parser": ("tensorcad/cli/torch_commands.py", "import tensorcad.cli.dispatch",
                                         "the command line's torch commands import nothing of it but its options"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_forbidden_import_breaks_its_contract(copy, case):
    module, line, contract = CASES[case]
    path = copy / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n\ndef _added():\n    {line}  # a lazy import is still an import\n")
        result = lint_imports(copy)
    finally:
        path.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Broken contracts" in result.stdout, result.stdout
    assert contract in result.stdout.split("Broken contracts")[-1], result.stdout  # named where it broke


MAX_MODULE_LINES = 450  # issue 25: a module past this is two concepts (one crossed it this round, split by hand)


def test_no_module_of_the_package_or_the_plugin_is_over_450_lines():
    modules = sorted((ROOT / "tensorcad").rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in modules
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split each by concept): {long}"


MAX_FOLDER_MODULES = 15  # issue 41: a folder past this is missing a room (certification held 36, analysis 18)


def _folders():
    for root in (ROOT / "tensorcad",):
        for folder in sorted({root, *(p.parent for p in root.rglob("*.py"))}):
            if "__pycache__" not in folder.parts:
                yield folder, sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")


def test_no_folder_holds_more_than_15_modules():
    crowded = {str(folder.relative_to(ROOT)): len(modules) for folder, modules in _folders()
               if len(modules) > MAX_FOLDER_MODULES}
    assert not crowded, f"folders over {MAX_FOLDER_MODULES} modules (which rooms are they missing?): {crowded}"


def test_no_file_prefix_appears_three_times_in_a_folder():
    """`step_batch`, `step_loss`, `step_labels` beside each other are a package waiting to be made (`step/`)."""
    from collections import Counter

    repeated = {}
    for folder, modules in _folders():
        prefixes = Counter(name.split("_")[0] for name in modules if "_" in name)
        repeated.update({f"{folder.relative_to(ROOT)}/{prefix}_*": n for prefix, n in prefixes.items() if n >= 3})
    assert not repeated, f"a file prefix repeated in one folder (make the package): {repeated}"
