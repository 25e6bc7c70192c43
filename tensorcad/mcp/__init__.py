"""`tensorcad mcp`: the engine as Model Context Protocol tools and resources, over stdio.

Every tool is a thin call into ``tensorcad.views.answers``, the functions the
CLI's ``--json`` prints, and returns that JSON as structured content under a
declared output schema (``tools``, ``schemas``); arguments are strict
(``strict``); ``certify`` runs in a child process killed at its deadline
(``certify_process``); the presets, the catalog, the docs and the operating-point
schema are resources (``resources``).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from .strict import MAX_DESIGN, MAX_DESIGN_DEPTH, MAX_STRING, StrictServer, check_arguments

__all__ = ["MAX_DESIGN", "MAX_DESIGN_DEPTH", "MAX_STRING", "StrictServer", "build_server", "check_arguments", "main"]


def build_server() -> MCPServer:
    from .. import __version__
    from . import resources, tools

    server = StrictServer(
        "tensorcad",
        version=__version__,
        instructions="Cost, lint, generate and certify transformer designs. A design is a preset name "
        "(see `presets` or the tensorcad://presets resource), a .json/.yaml path, or a design object. The "
        "operating point `op` is the JSON the engine reports: {seq, packing: {mean, spread} or {lengths, "
        "strategy}, cp: {size, shard}, hardware, gpus, ...} (tensorcad://schema/operating-point). Packing "
        "(mean document length; spread 1 when only a mean is given) is a condition of training only.",
    )
    tools.register(server)
    resources.register(server)
    return server


def main() -> None:
    # stdio only: the server listens on no socket at all.
    build_server().run("stdio")
