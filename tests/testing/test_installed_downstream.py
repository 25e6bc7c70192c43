"""Installed as users install it (issue 48): the wheel owns its names, ships what it serves, and passes a
downstream project's tests in an environment made here, from a folder outside the checkout.

The environment sees this machine's torch, transformers and mcp (the system's site-packages, as a user's
environment with them installed would); tensorcad itself comes from the wheel alone, which each test checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
import zipfile

import pytest

from installed import ROOT, make_env, run

pytest.importorskip("transformers")
pytest.importorskip("mcp")

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_wheel_installs_no_generic_top_level_name(wheel):
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert names == {"tensorcad", f"tensorcad-{VERSION}.dist-info"}, names
    listed = zipfile.ZipFile(wheel).namelist()
    # what the servers serve is inside: the docs the MCP resources list, the editor's files, the presets
    assert "tensorcad/docs/harness.md" in listed and "tensorcad/py.typed" in listed
    assert any(n.startswith("tensorcad/editor/static/") for n in listed)
    assert "tensorcad/presets/llama-3-8b-documents.json" in listed
    entry_points = next(n for n in listed if n.endswith("entry_points.txt"))
    assert "tensorcad = tensorcad.testing.plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture(scope="module")
def user_env(tmp_path_factory, wheel):
    root = tmp_path_factory.mktemp("user")
    python = make_env(root / "env", f"{wheel}[pytest,mcp]", system_site_packages=True)
    where = run(python, "-c", "import tensorcad, tensorcad.testing; print(tensorcad.__file__)", cwd=root)
    assert where.returncode == 0 and where.stdout.startswith(str(root / "env")), where.stdout + where.stderr
    return python, root


MODELS = '''
import torch
import torch.nn as nn


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


class Leaky(nn.Module):
    """Each position reads the mean of its whole row: the documents packed in it see each other."""

    vocab = 64

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.out = nn.Embedding(64, 8), nn.Linear(8, 64)

    def forward(self, ids, documents, positions=None):
        x = self.embed(ids)
        return self.out(x + x.mean(dim=1, keepdim=True))


def leaky():
    return Leaky().eval()
'''


def _project(root, models: list[str]):
    project = root / f"downstream-{len(models)}-{models[0].split(':')[1]}"
    (project / "designs").mkdir(parents=True, exist_ok=True)  # the same project, written again, is the same
    (project / "designs" / "tiny.json").write_text((ROOT / "tensorcad" / "presets" / "nano-sort.json").read_text())
    (project / "downstream_models.py").write_text(MODELS)
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [tool.pytest.ini_options]
        tensorcad_designs = ["designs"]
        tensorcad_models = {json.dumps(models)}
        """))
    (project / "test_downstream.py").write_text(textwrap.dedent("""\
        import pytest
        from tensorcad.testing import assert_faithful, assert_isolated

        @pytest.mark.tensorcad(design="designs/tiny.json", seq=128, pack=32, forms=["eager"])
        def test_isolated_and_faithful(tensorcad_model, tensorcad_batch):
            assert_isolated(tensorcad_model, *tensorcad_batch)
            assert_faithful(tensorcad_model, *tensorcad_batch)
        """))
    return project


FAST = ["-p", "no:cacheprovider", "--no-tensorcad-subprocess", "-k", "not flex and not golden and not export"]


def test_a_downstream_project_collects_and_passes_its_items(user_env):
    python, root = user_env
    project = _project(root, ["downstream_models:tiny_llama"])
    result = run(python, "-m", "pytest", *FAST, "-q", cwd=project)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # the marker's test, the design's items and the model's certificates, each collected and passed
    assert "failed" not in out and "error" not in out.lower()
    counts = run(python, "-m", "pytest", *FAST, "--co", "-q", cwd=project).stdout
    assert "test_downstream.py::test_isolated_and_faithful" in counts
    assert "designs/tiny.json::isolation[eager]" in counts
    assert "pyproject.toml::downstream_models:tiny_llama::faithful" in counts


def test_a_planted_leak_fails_with_the_certificates_message(user_env):
    python, root = user_env
    project = _project(root, ["downstream_models:leaky"])
    result = run(python, "-m", "pytest", *FAST, "-q", "-m", "isolation", cwd=project)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "documents are not isolated" in out, out


def test_the_command_line_from_the_wheel(user_env):
    python, root = user_env
    tensorcad = str(python.parent / "tensorcad")
    version = subprocess.run([tensorcad, "--version"], capture_output=True, text=True, cwd=root)
    assert version.stdout.strip() == f"tensorcad {VERSION}", version.stdout + version.stderr
    analyze = subprocess.run([tensorcad, "analyze", "llama-3-8b-documents", "--pack", "1024", "--pack-spread", "0",
                              "--json"], capture_output=True, text=True, cwd=root)
    assert analyze.returncode == 0, analyze.stderr
    assert round(json.loads(analyze.stdout)["flops"]["packed"]["keysPerQuery"], 2) == 491.17
    saved = root / "saved-llama"
    save = run(python, "-c", f"import sys; sys.path.insert(0, {str(_project(root, ['downstream_models:tiny_llama']))!r}); "
                             f"from downstream_models import tiny_llama; tiny_llama().save_pretrained({str(saved)!r})",
               cwd=root)
    assert save.returncode == 0, save.stderr
    certify = subprocess.run([tensorcad, "certify", str(saved), "--call", "trainer"] if _has_call_option(tensorcad)
                             else [tensorcad, "certify", str(saved)], capture_output=True, text=True, cwd=root,
                             timeout=300)
    assert certify.returncode == 0, certify.stdout + certify.stderr


def _has_call_option(tensorcad: str) -> bool:
    return "--call" in subprocess.run([tensorcad, "certify", "--help"], capture_output=True, text=True).stdout


def test_an_mcp_client_reads_the_docs_the_wheel_ships(user_env):
    python, root = user_env
    script = textwrap.dedent(f"""\
        import asyncio, os
        import mcp

        async def main():
            server = mcp.StdioServerParameters(command={str(python.parent / 'tensorcad')!r}, args=["mcp"],
                                               env=dict(os.environ))
            async with mcp.Client(server) as client:
                text = (await client.read_resource("tensorcad://docs/harness.md")).contents[0].text
                print(len(text), text.splitlines()[0])

        asyncio.run(main())
        """)
    result = run(python, "-c", script, cwd=root, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    length, _, title = result.stdout.strip().partition(" ")
    assert int(length) == len((ROOT / "docs" / "harness.md").read_text()) and title.startswith("# "), result.stdout


def test_the_editor_serves_its_page_from_the_wheel(user_env):
    python, root = user_env
    script = textwrap.dedent("""\
        import threading, urllib.request
        from tensorcad.editor import make_server

        httpd, address = make_server()
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        page = urllib.request.urlopen(address, timeout=30).read().decode()
        print(address.split(":")[1], "<html" in page.lower(), len(page))
        httpd.shutdown()
        """)
    result = run(python, "-c", script, cwd=root, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    host, html, size = result.stdout.split()
    assert host == "//127.0.0.1" and html == "True" and int(size) > 500, result.stdout


def test_a_project_with_its_own_harness_folder_imports_both(user_env):
    python, root = user_env
    project = root / "has-harness"
    (project / "harness").mkdir(parents=True)
    (project / "harness" / "__init__.py").write_text("OURS = 'the project harness'\n")
    (project / "test_both.py").write_text(textwrap.dedent("""\
        import harness
        import tensorcad.testing

        def test_both():
            assert harness.OURS == "the project harness"
            assert callable(tensorcad.testing.assert_isolated)
        """))
    result = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr
