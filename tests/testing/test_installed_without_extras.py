"""Installing tensorcad without its test extras leaves every other project's pytest run as it was (issue 49).

Before: the wheel installed beside pytest alone made every pytest run of that environment
crash at start-up (INTERNALERROR ... No module named 'syrupy'): the plugin's session hook
imported its snapshot module, which imported syrupy at module level.
"""

from __future__ import annotations

import pytest

from installed import make_env, run

@pytest.fixture(scope="module")
def bare(tmp_path_factory, wheel):
    """A fresh environment: the wheel without extras, and pytest; nothing of the system's site-packages."""
    root = tmp_path_factory.mktemp("bare")
    return make_env(root / "env", str(wheel), "pytest"), root


def test_an_unrelated_projects_tests_pass_untouched(bare):
    python, root = bare
    project = root / "unrelated"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "unrelated"\nversion = "1"\n')
    (project / "test_sums.py").write_text("def test_sum():\n    assert sum([1, 2]) == 3\n")
    result = run(python, "-m", "pytest", "-q", "-W", "error", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    output = (result.stdout + result.stderr).lower()
    assert "tensorcad" not in output and "warning" not in output and "internalerror" not in output, output
    # the plugin was loaded all the same (its entry point), and asked for nothing it does not have
    listed = run(python, "-m", "pytest", "--co", cwd=project)
    assert "plugins: tensorcad-" in listed.stdout, listed.stdout


def test_a_project_collecting_designs_is_told_in_one_line_what_to_install(bare):
    python, root = bare
    project = root / "designs-project"
    (project / "designs").mkdir(parents=True)
    (project / "designs" / "tiny.json").write_text(_nano_sort())
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntensorcad_designs = ["designs"]\n')
    result = run(python, "-m", "pytest", "-p", "no:cacheprovider", cwd=project)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "INTERNALERROR" not in out and "Traceback" not in out, out
    # said once in the header, then on each item that needs it, each time one line
    header = out.split("collected")[0].splitlines()
    assert [line for line in header if line.startswith("tensorcad:")] == [
        "tensorcad: models and their certificates need torch, which is not installed: pip install 'tensorcad[pytest]'",
        "tensorcad: goldens need syrupy, which is not installed: pip install 'tensorcad[pytest]'"], out
    assert "tiny.json::golden[codegen]: tensorcad: goldens need syrupy, which is not installed: " \
           "pip install 'tensorcad[pytest]'" in out
    assert "tiny.json::isolation[eager]: tensorcad: models and their certificates need torch" in out
    # what needs neither runs: the rules and the closed form are the engine's (numpy)
    assert "2 passed" in out, out


def test_with_the_documented_extra_the_same_projects_items_run(tmp_path_factory, wheel):
    root = tmp_path_factory.mktemp("extra")
    # torch and syrupy as this machine has them (the system's site-packages): pip installs only tensorcad,
    # the extra's other requirements already met, as a user's environment with torch would.
    python = make_env(root / "env", f"{wheel}[pytest]", system_site_packages=True)
    project = root / "designs-project"
    (project / "designs").mkdir(parents=True)
    (project / "designs" / "tiny.json").write_text(_nano_sort())
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntensorcad_designs = ["designs"]\n')
    select = ["-q", "-p", "no:cacheprovider", "-k", "golden or eager or rules"]
    written = run(python, "-m", "pytest", *select, "--snapshot-update", cwd=project)
    assert written.returncode == 0, written.stdout + written.stderr
    result = run(python, "-m", "pytest", *select, cwd=project)
    assert result.returncode == 0 and "5 passed" in result.stdout, result.stdout + result.stderr
    assert "not installed" not in result.stdout


def _nano_sort() -> str:
    from installed import ROOT

    return (ROOT / "tensorcad" / "presets" / "nano-sort.json").read_text()
