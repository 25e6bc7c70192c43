"""The catalog: every kind states its ports and params; docs/catalog.md is generated from it."""

import subprocess
import sys
from pathlib import Path

import pytest

from tensorcad.design.catalog import KINDS, catalog_markdown, catalog_text

DOC = Path(__file__).parents[2] / "docs" / "catalog.md"
REQUIRED_KINDS = {"embedding", "pos_embedding", "linear", "rmsnorm", "layernorm", "mlp", "rope", "sdpa",
                  "gqa_attention", "transformer_block", "stack", "table"}


def test_every_required_kind_is_in_the_catalog():
    assert REQUIRED_KINDS <= set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_param_has_a_type_a_default_and_prose(kind):
    for param in KINDS[kind].params:
        assert param.doc and param.describe_type() and param.describe_default()
    for port in KINDS[kind].ports:
        assert port.doc


def test_docs_catalog_is_in_sync_with_the_source():
    assert DOC.read_text() == catalog_markdown(), "regenerate: tensorcad catalog --markdown > docs/catalog.md"


def test_cli_prints_one_kind():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "catalog", "mlp"], capture_output=True, text=True)
    assert run.returncode == 0
    assert run.stdout == catalog_text("mlp")
    assert "activation ('swiglu' | 'geglu' | 'gelu' | 'gelu_tanh' | 'relu', default swiglu)" in run.stdout


def test_cli_refuses_an_unknown_kind_in_one_line():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "catalog", "conv"], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1
