"""Strict arguments, and tool results that carry their JSON as structured content.

Arguments are checked here, strictly, before the SDK's own validation sees
them (whose errors are many lines of pydantic text): every input schema says
``additionalProperties: false``, at every level of the operating point too,
and the check enforces it, so a misspelled argument (``packing`` at the top,
``op.packing.men``) is an error naming it and the accepted ones instead of
being ignored; types are JSON's own, with no coercion (``true`` is not 1,
``"256"`` is not 256, and an empty string is not a default); strings and
design objects have size limits.

A tool returns its answer's JSON (``tensorcad.views.answers``); ``tool`` turns it
into a result whose structured content is that JSON (a list wrapped as
``{"result": [...]}``, since structured content is an object) under the
output schema the tool declares, with the same JSON as text for clients that
read only text. Bad input reaches the client as a tool error carrying the
TensorcadError's one line; a failure that is not bad input still reaches it
as one line carrying the engine's message.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from ..errors import TensorcadError, one_line, shown
from ..json_schema import check, describe, json_type

MAX_STRING = 4096  # characters of a preset name, a path, a hardware or a kind
MAX_DESIGN = 4 * 1024 * 1024  # bytes of a design object, as a design file
MAX_DESIGN_DEPTH = 64  # objects and lists within one another in a design object


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


def _empty_strings(name: str, value: Any) -> None:
    """No empty string stands for a default, at any level of an argument (a design's own text aside)."""
    if isinstance(value, str) and not value:
        raise TensorcadError(name, "is empty; leave it out for the default")
    if isinstance(value, dict):
        for key, item in value.items():
            _empty_strings(f"{name}.{key}", item)


def check_arguments(tool: str, schema: dict, arguments: Any) -> None:
    """Refuse arguments the tool's input schema does not describe exactly, in one line naming the argument."""
    if not isinstance(arguments, dict):
        raise TensorcadError("arguments", f"expected an object, got {json_type(arguments)}")
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
        _check_size(name, value)
        if name != "design":  # a design object is the design language's to check, with its own paths
            check(value, accepted[name], name)
            _empty_strings(name, value)
        elif json_type(value) not in ("string", "object"):
            raise TensorcadError(name, f"expected {describe(accepted[name])}, got {json_type(value)} {shown(value)}")


class StrictServer(MCPServer):
    """An MCPServer whose tools take exactly the arguments their schemas list, checked before the SDK's validation."""

    async def call_tool(self, name, arguments, context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            try:
                check_arguments(name, tool.parameters, arguments)
            except TensorcadError as e:
                raise ToolError(str(e)) from None  # the one line, as the engine's own errors read
        return await super().call_tool(name, arguments, context)


def _result(answer: Any, extra: list) -> CallToolResult:
    structured = answer if isinstance(answer, dict) else {"result": answer}
    text = TextContent(type="text", text=json.dumps(answer, indent=2))
    return CallToolResult(content=[text, *extra], structured_content=structured)


def tool(server: MCPServer, description: str, output: dict, arguments: dict[str, dict] | None = None):
    """Register a tool returning an answer's JSON (or ``(json, [more content])``) under the ``output`` schema.

    ``arguments`` replaces the schemas the SDK derives from the signature for
    the arguments it names (the operating point's, generated from the engine).
    """

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                answer = fn(*args, **kwargs)
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
            answer, extra = answer if isinstance(answer, tuple) else (answer, [])
            return _result(answer, extra)

        # The SDK builds the result's schema from the return annotation: a CallToolResult is passed
        # through as built, and the schema it publishes is set below, from the answer's own shape.
        call.__signature__ = inspect.signature(fn, eval_str=True).replace(return_annotation=CallToolResult)
        server.tool(description=description)(call)
        registered = server._tool_manager.get_tool(fn.__name__)
        registered.fn_metadata.output_schema = output
        for name, schema in (arguments or {}).items():
            registered.parameters["properties"][name] = schema
        registered.parameters["additionalProperties"] = False
        return call

    return register
