"""The resources: the presets (the list and each design's JSON), the catalog, the docs, and the operating-point schema.

Read-only, and only these: every URI is registered by name at start, so no
request can make the server read any other file.
"""

from __future__ import annotations

import json
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from mcp.server.mcpserver import MCPServer

from ..views import answers


def docs_folder() -> Traversable:
    """The docs the server lists: those the wheel ships inside the package (setup.py copies docs/*.md
    into tensorcad/docs/ at build), read through importlib.resources; in a checkout, or an editable
    install of one, the docs/ folder beside the package, where they are written."""
    shipped = files("tensorcad") / "docs"
    return shipped if shipped.is_dir() else Path(__file__).resolve().parents[2] / "docs"


def doc_files() -> list[Traversable]:
    folder = docs_folder()
    if not folder.is_dir():
        return []
    return sorted((f for f in folder.iterdir() if f.name.endswith(".md") and f.is_file()), key=lambda f: f.name)


def _reader(path: Traversable):
    """A resource function reading one file named at start (the SDK takes no arguments for a fixed URI)."""

    def read() -> str:
        return path.read_text(encoding="utf-8")

    read.__name__ = f"read_{path.name.removesuffix('.md').removesuffix('.json')}"
    return read


def register(server: MCPServer) -> None:
    from ..analysis.operating_point.schema import operating_point_schema
    from ..design import preset_names
    from ..design.catalog import catalog_markdown
    from ..design.load import PRESETS

    @server.resource("tensorcad://presets", name="presets", mime_type="application/json",
                     description="The shipped designs: name, parameters, context, description (the presets tool's answer).")
    def presets() -> str:
        return json.dumps(answers.presets(), indent=2)

    for name in preset_names():
        server.resource(f"tensorcad://presets/{name}", name=f"preset {name}", mime_type="application/json",
                        description=f"The design {name}, as shipped.")(_reader(PRESETS / f"{name}.json"))

    @server.resource("tensorcad://catalog", name="catalog", mime_type="text/markdown",
                     description="Every kind a design may use: ports, params, defaults, what it counts.")
    def catalog() -> str:
        return catalog_markdown()

    @server.resource("tensorcad://schema/operating-point", name="operating-point schema",
                     mime_type="application/schema+json",
                     description="The operating point the tools take as op, generated from the engine's types.")
    def schema() -> str:
        return json.dumps(operating_point_schema("input"), indent=2)

    for path in doc_files():
        server.resource(f"tensorcad://docs/{path.name}", name=f"docs/{path.name}", mime_type="text/markdown",
                        description=f"docs/{path.name}")(_reader(path))
