"""docs/architecture.md names every package of the house and every layering contract.

A package added without a line on the page, or a contract the page does not list,
fails here: the page is where a newcomer looks for where a thing lives.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def _packages() -> list[str]:
    found = []
    for init in sorted((ROOT / "tensorcad").rglob("__init__.py")):
        found.append(init.parent.relative_to(ROOT).as_posix() + "/")
    return found


def _contracts() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [c["id"] for c in config["tool"]["importlinter"]["contracts"]]


@pytest.mark.parametrize("package", _packages())
def test_the_page_names_every_package(package):
    assert f"`{package}`" in PAGE or f"{package} " in PAGE, f"docs/architecture.md does not name {package}"


@pytest.mark.parametrize("contract", _contracts())
def test_the_page_lists_every_contract(contract):
    assert f"| `{contract}` |" in PAGE, f"docs/architecture.md does not list the contract {contract}"


def test_the_drawing_holds_the_layers_the_contract_holds():
    # Each layer of house-layers appears in the drawing, in the contract's order (top first).
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [layers] = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "house-layers"]
    drawing = PAGE.split("```")[1]
    where = []
    for layer in layers:
        names = [name.strip() for name in layer.split("|")]
        positions = [drawing.find(f"tensorcad/{n}/") if f"tensorcad/{n}/" in drawing else drawing.find(f"{n}.py")
                     for n in names]
        assert all(p >= 0 for p in positions), f"the drawing lacks {layer}"
        where.append(min(positions))
    assert where == sorted(where), "the drawing's order differs from house-layers'"

