"""`tensorcad mcp`: the engine as Model Context Protocol tools, over stdio.

Each tool is a thin call into the same functions the CLI uses, and returns
the same JSON names. A design is a preset name, a path to a .json/.yaml
file, or the design object itself. Bad input comes back as a tool error
carrying the TensorcadError's one line.
"""

from __future__ import annotations

from typing import Any

import functools

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from .errors import TensorcadError

Design = str | dict[str, Any]


def _design(design: Design):
    from .design import load

    if not isinstance(design, (str, dict)):
        raise TensorcadError("design", "a preset name, a file path or a design object")
    return load(design)


def _op(design, seq, pack, pack_spread, hardware, gpus, mfu, price_per_gpu_hour, tokens,
        pack_lengths=None, pack_strategy=None, count=None):
    from .analysis.operating_point import DEFAULTS, OperatingPoint
    from .packing import packing_of

    return OperatingPoint(
        seq=design.context if seq is None else seq,
        packing=packing_of(pack, pack_spread, lengths=pack_lengths, strategy=pack_strategy),
        count="kept" if count is None else count,
        hardware=hardware or DEFAULTS["hardware"],
        gpus=DEFAULTS["gpus"] if gpus is None else gpus,
        mfu=DEFAULTS["mfu"] if mfu is None else mfu,
        price_per_gpu_hour=DEFAULTS["price"] if price_per_gpu_hour is None else price_per_gpu_hour,
        tokens=tokens,
    )


def _tool(server: MCPServer, description: str):
    """Register a tool whose bad input reaches the client as the TensorcadError's one line."""

    def register(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except TensorcadError as e:
                raise ToolError(str(e)) from None

        return server.tool(description=description)(call)

    return register


def build_server() -> MCPServer:
    from . import __version__

    server = MCPServer(
        "tensorcad",
        version=__version__,
        instructions="Cost, lint and generate code for transformer designs. A design is a preset name "
        "(see `presets`), a .json/.yaml path, or a design object. Packing (pack = mean document length, "
        "pack_spread = its coefficient of variation, default 1) is a condition of training only.",
    )

    @_tool(server, "The shipped designs with their parameter counts and contexts.")
    def presets() -> list[dict]:
        from .analysis.params import count_params
        from .design import load, preset_names

        return [{"name": n, "params": count_params(load(n)).total, "context": load(n).context}
                for n in preset_names()]

    @_tool(server, "The catalog of kinds (ports, params, defaults), or one kind.")
    def catalog(kind: str | None = None) -> str:
        from .design.catalog import KINDS, catalog_text

        if kind is not None and kind not in KINDS:
            raise TensorcadError("kind", f"unknown kind {kind!r} ({', '.join(KINDS)})")
        return catalog_text(kind)

    @_tool(server, "Validate a design and print its resolved tree.")
    def show(design: Design) -> str:
        from .design import show as show_design

        return show_design(_design(design))

    @_tool(server, "Analyze a design: params, FLOPs per token (packed for training when pack is set), "
                             "training time and cost, serving. Returns the report's JSON.")
    def analyze(design: Design, seq: int | None = None, pack: float | None = None, pack_spread: float | None = None,
                hardware: str | None = None, gpus: int | None = None, mfu: float | None = None,
                price_per_gpu_hour: float | None = None, tokens: float | None = None,
                pack_lengths: str | None = None, pack_strategy: str | None = None,
                count: str | None = None) -> dict:
        """pack_lengths: a file of document lengths (histogram or list) instead of pack/pack_spread;
        pack_strategy: stream, bfd, ffd, split or pad; count: kept or blocks (what training counts)."""
        from .analysis.report import analyze as run

        d = _design(design)
        return run(d, _op(d, seq, pack, pack_spread, hardware, gpus, mfu, price_per_gpu_hour, tokens,
                          pack_lengths, pack_strategy, count)).to_json()

    @_tool(server, "Lint a design at an operating point: [{rule, severity, message, path}].")
    def rules(design: Design, seq: int | None = None, pack: float | None = None,
              pack_spread: float | None = None) -> list[dict]:
        from .rules import check

        d = _design(design)
        return [x.to_json() for x in check(d, _op(d, seq, pack, pack_spread, None, None, None, None, None))]

    @_tool(server, "Generate the design's PyTorch module (needs only torch); scale shrinks it first.")
    def codegen(design: Design, scale: int | None = None) -> str:
        from .codegen import generate

        d = _design(design)
        if scale is not None:
            from .runtime.scaling import scale as shrink

            d = shrink(d, params=scale)
        return generate(d)

    return server


def main() -> None:
    # stdio only: the server listens on no socket at all.
    build_server().run("stdio")
