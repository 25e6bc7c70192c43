"""`tensorcad mcp`: the engine as Model Context Protocol tools, over stdio.

Each tool is a thin call into the same functions the CLI uses, and returns
the same JSON names. A design is a preset name, a path to a .json/.yaml
file, or the design object itself. Bad input comes back as a tool error
carrying the TensorcadError's one line.

Arguments are checked here, strictly, before the SDK's own validation sees
them (whose errors are many lines of pydantic text): every input schema says
``additionalProperties: false`` and the check enforces it, so a misspelled
argument (``packing``, ``seq_len``) is an error naming it and the accepted
ones instead of being ignored; types are JSON's own, with no coercion (``true``
is not 1, ``"256"`` is not 256, and an empty string is not a default); strings
and design objects have size limits. A failure that is not bad input still
reaches the client as one line carrying the engine's message.
"""

from __future__ import annotations

from typing import Any

import functools

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from .errors import TensorcadError, one_line, shown

Design = str | dict[str, Any]

MAX_STRING = 4096  # characters of a preset name, a path, a hardware or a kind
MAX_DESIGN = 4 * 1024 * 1024  # bytes of a design object, as a design file
MAX_DESIGN_DEPTH = 64  # objects and lists within one another in a design object
# The operating point's field names, as this server's arguments spell them.
ARGUMENT_OF = {"packing.mean": "pack", "packing.spread": "pack_spread", "pricePerGpuHour": "price_per_gpu_hour"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _fits(value: Any, schema: dict) -> bool:
    kind = _json_type(value)
    wanted = [s.get("type") for s in schema.get("anyOf", [schema])]
    # JSON's number includes its integers; nothing else converts (no bool as 1, no "256" as 256).
    return kind in wanted or (kind == "integer" and "number" in wanted)


def _describe(schema: dict) -> str:
    return " or ".join(str(s.get("type")) for s in schema.get("anyOf", [schema]))


def _check_size(name: str, value: Any) -> None:
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise TensorcadError(name, f"{len(value):,} characters; at most {MAX_STRING:,}")
    if isinstance(value, (dict, list)):
        stack, size = [(value, 1)], 0
        while stack:
            item, depth = stack.pop()
            if depth > MAX_DESIGN_DEPTH:
                raise TensorcadError(name, f"nests deeper than {MAX_DESIGN_DEPTH}; a design does not")
            if isinstance(item, dict):
                size += len(item)
                stack.extend((v, depth + 1) for v in item.values())
                size += sum(len(k) for k in item)
            elif isinstance(item, list):
                size += len(item)
                stack.extend((v, depth + 1) for v in item)
            elif isinstance(item, str):
                size += len(item)
            if size > MAX_DESIGN:
                raise TensorcadError(name, f"more than {MAX_DESIGN:,} bytes of design; at most {MAX_DESIGN:,}")


def check_arguments(tool: str, schema: dict, arguments: Any) -> None:
    """Refuse arguments the tool's input schema does not describe exactly, in one line naming the argument."""
    if not isinstance(arguments, dict):
        raise TensorcadError("arguments", f"expected an object, got {_json_type(arguments)}")
    accepted = schema.get("properties", {})
    for name in arguments:
        if name not in accepted:
            listed = ", ".join(accepted) or "none"
            raise TensorcadError(shown(name, 40).strip("'") if isinstance(name, str) else shown(name),
                                 f"unknown argument for {tool} (arguments: {listed})")
    for name in schema.get("required", []):
        if name not in arguments:
            raise TensorcadError(name, f"missing; {tool} needs it")
    for name, value in arguments.items():
        spec = accepted[name]
        if not _fits(value, spec):
            raise TensorcadError(name, f"expected {_describe(spec)}, got {_json_type(value)} {shown(value)}")
        _check_size(name, value)
        if isinstance(value, str) and not value and name != "design":
            raise TensorcadError(name, "is empty; leave it out for the default")


class StrictServer(MCPServer):
    """An MCPServer whose tools take exactly the arguments their schemas list, checked before the SDK's validation."""

    async def call_tool(self, name, arguments, context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            try:
                check_arguments(name, tool.parameters, arguments)
            except TensorcadError as e:
                raise ToolError(f"Error executing tool {name}: {e}") from None
        return await super().call_tool(name, arguments, context)


def _strict_schemas(server: MCPServer) -> None:
    """Publish what the check enforces: no property beyond those listed, in every tool's input schema."""
    for tool in server._tool_manager.list_tools():
        tool.parameters["additionalProperties"] = False


def _design(design: Design):
    from .design import load

    if not isinstance(design, (str, dict)):
        raise TensorcadError("design", "a preset name, a file path or a design object")
    if isinstance(design, str) and not design:
        raise TensorcadError("design", "is empty; give a preset name, a file path or a design object")
    return load(design)


def _op(design, seq, pack, pack_spread, hardware, gpus, mfu, price_per_gpu_hour, tokens,
        pack_lengths=None, pack_strategy=None, count=None):
    from .analysis.operating_point import DEFAULTS, OperatingPoint, check_budget
    from .packing import packing_of

    try:
        op = OperatingPoint(
            seq=design.context if seq is None else seq,
            packing=packing_of(pack, pack_spread, lengths=pack_lengths, strategy=pack_strategy),
            count="kept" if count is None else count,
            hardware=DEFAULTS["hardware"] if hardware is None else hardware,
            gpus=DEFAULTS["gpus"] if gpus is None else gpus,
            mfu=DEFAULTS["mfu"] if mfu is None else mfu,
            price_per_gpu_hour=DEFAULTS["price"] if price_per_gpu_hour is None else price_per_gpu_hour,
            tokens=tokens,
        )
        check_budget(design, op)
        return op
    except TensorcadError as e:
        raise TensorcadError(ARGUMENT_OF.get(e.path, e.path), e.message) from None


def _tool(server: MCPServer, description: str):
    """Register a tool whose bad input reaches the client as the TensorcadError's one line."""

    def register(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except TensorcadError as e:
                raise ToolError(str(e)) from None
            except RecursionError:
                raise ToolError("the input nests too deeply to work on") from None
            except MemoryError:
                raise ToolError("the input needs more memory than this server has") from None
            except Exception as e:  # a bug, not bad input: still one line, with the engine's own words
                detail = one_line(str(e).splitlines()[0] if str(e) else "")[:300]
                raise ToolError(f"internal error ({type(e).__name__}){': ' + detail if detail else ''}; "
                                "please report it with the arguments that caused it") from None

        return server.tool(description=description)(call)

    return register


def build_server() -> MCPServer:
    from . import __version__

    server = StrictServer(
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
            raise TensorcadError("kind", f"unknown kind {shown(kind)} ({', '.join(KINDS)})")
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

    _strict_schemas(server)
    return server


def main() -> None:
    # stdio only: the server listens on no socket at all.
    build_server().run("stdio")
