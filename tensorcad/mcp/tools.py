"""The tools: each a thin call into ``tensorcad.views.answers``, the functions the CLI's ``--json`` prints.

A design is a preset name, a path to a .json/.yaml file (or a Hugging Face
config), or the design object itself. An operating point is the JSON the
engine reports (``operating_point_schema("input")``): ``{"seq": 8192,
"packing": {"mean": 1024, "spread": 0}, "cp": {"size": 4}}``.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any, Literal

import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ImageContent, TextContent

from ..analysis.operating_point.schema import histogram_schema, operating_point_schema
from ..errors import TensorcadError
from ..views import answers
from . import schemas
from .strict import tool

Design = str | dict[str, Any]
# certify builds and runs a model in this server's process: bounded, so that one call cannot hold it for long.
MAX_CERTIFY_PARAMS = 2_000_000
MAX_CERTIFY_SEQ = 512
CERTIFY_SECONDS = 120.0


def _design(design: Design):
    from ..hf import load_design  # a Hugging Face config is a design too, as on the command line

    if isinstance(design, str) and not design:
        raise TensorcadError("design", "is empty; give a preset name, a file path or a design object")
    return load_design(design)


def _op(raw, design):
    from ..analysis.operating_point.schema import operating_point_of

    return operating_point_of(raw, design, "op")


def _settings(seq, pack, spread, params, seed, call=None):
    from tensorcad.runtime.building.settings import DEFAULTS, Settings  # no torch

    from ..packing import packing_of

    params = DEFAULTS["params"] if params is None else params
    if not 1 <= params <= MAX_CERTIFY_PARAMS:
        raise TensorcadError("params", f"{params:,} is outside 1..{MAX_CERTIFY_PARAMS:,}, what certify builds "
                                       "here within its time (run `tensorcad certify --params N` for more)")
    if seq is not None and not 1 <= seq <= MAX_CERTIFY_SEQ:
        raise TensorcadError("seq", f"{seq:,} is outside 1..{MAX_CERTIFY_SEQ:,}, the rows certify runs here "
                                    "within its time (run `tensorcad certify --seq N` for more)")
    if pack is None and spread is None:
        pack, spread = DEFAULTS["pack"], DEFAULTS["spread"]
    else:
        packing = packing_of(pack, spread, mean_path="pack", spread_path="spread")
        pack, spread = packing.mean, packing.spread
    try:
        return Settings(seq=seq, pack=pack, spread=spread, params=params,
                        seed=DEFAULTS["seed"] if seed is None else seed, call=call or "trainer")
    except TensorcadError as e:
        raise TensorcadError(e.path.removeprefix("tensorcad."), e.message) from None


def _notify(ctx: Context | None, done: int, count: int, message: str) -> None:
    """An MCP progress notification from this worker thread (the SDK runs a sync tool in one); the
    client sees them only when it asked, with a progress callback."""
    if ctx is None:
        return
    try:
        anyio.from_thread.run(ctx.report_progress, done, count, message)
    except Exception:  # noqa: BLE001 - progress is a courtesy: a client gone or deaf must not fail the check
        pass


def register(server: MCPServer) -> None:
    op = {"op": {"anyOf": [operating_point_schema("input"), {"type": "null"}],
                 "description": "the operating point, as the engine reports it (absent: the defaults)"}}

    @tool(server, "The shipped designs with their parameter counts, contexts and descriptions.", schemas.PRESETS)
    def presets() -> list:
        return answers.presets()

    @tool(server, "The catalog of kinds (ports, params, defaults), or one kind.", schemas.CATALOG)
    def catalog(kind: str | None = None) -> dict:
        return answers.catalog(kind)

    @tool(server, "Check a design: its name, nodes, context and inputs, or the bad value's path.", schemas.VALIDATE)
    def validate(design: Design) -> dict:
        return answers.validation(_design(design))

    @tool(server, "The resolved design: composites expanded, ports handed down, masks parsed.", schemas.SHOW)
    def show(design: Design) -> dict:
        return answers.show(_design(design))

    @tool(server, "Analyze a design at an operating point: params, FLOPs per token (packed for training under "
                  "op.packing), training time and cost, serving, and each rank's work under op.cp.",
          schemas.ANALYZE, op)
    def analyze(design: Design, op: dict | None = None) -> dict:
        d = _design(design)
        return answers.analysis(d, _op(op, d))

    @tool(server, "Lint a design at an operating point: [{rule, severity, message, path}].", schemas.RULES, op)
    def rules(design: Design, op: dict | None = None) -> list:
        d = _design(design)
        return answers.diagnostics(d, _op(op, d))

    @tool(server, "Generate the design's PyTorch module (needs only torch); scale shrinks it to about that "
                  "many parameters first.", schemas.CODEGEN)
    def codegen(design: Design, scale: int | None = None) -> dict:
        return answers.codegen(_design(design), scale)

    @tool(server, "What each part of the design does, in words, with its figures at the operating point.",
          schemas.WALKTHROUGH, op)
    def walkthrough(design: Design, op: dict | None = None) -> dict:
        d = _design(design)
        return answers.walkthrough(d, _op(op, d))

    @tool(server, "What one attention's mask keeps over one row: a sample (one row the packing could draw), "
                  "as each cell's kept fraction, a PNG and a small text drawing.", schemas.MASK_PREVIEW, op)
    def mask_preview(design: Design, op: dict | None = None, attention: int | None = None,
                     cells: int | None = None, head: int | None = None) -> dict:
        from tensorcad.views.mask_image import drawing, png

        d = _design(design)
        preview = answers.mask_preview(d, _op(op, d), 0 if attention is None else attention, cells,
                                       0 if head is None else head)
        image = ImageContent(type="image", data=base64.b64encode(png(preview["fractions"])).decode(),
                             mime_type="image/png")
        return preview, [image, TextContent(type="text", text=drawing(preview))]

    @tool(server, f"Certify a design as `tensorcad certify` does (rules, isolation, closed form, block counts, "
                  f"the training step) on a model scaled to at most {MAX_CERTIFY_PARAMS:,} parameters, rows of at most "
                  f"{MAX_CERTIFY_SEQ} tokens, within {CERTIFY_SECONDS:g} s; or, given model='pkg.module:factory' "
                  "instead of a design, the model certificates of what that factory makes, as `tensorcad certify "
                  "--model` runs them, called as `call` says ('trainer': as transformers' Trainer, use_cache=False; "
                  "'plain': model(**batch), the config's own use_cache).", schemas.CERTIFY)
    def certify(design: Design | None = None, model: str | None = None, call: Literal["trainer", "plain"] | None = None,
                seq: int | None = None, pack: float | None = None, spread: float | None = None,
                params: int | None = None, seed: int | None = None, ctx: Context | None = None) -> dict:
        from .certify_process import certify_in_child

        if (design is None) == (model is None):
            raise TensorcadError("design", "give a design, or model='pkg.module:factory' (one of them)")
        if call is not None and model is None:
            raise TensorcadError("call", "is how a model's loop calls it: give it with model='pkg.module:factory'")
        settings = _settings(seq, pack, spread, params, seed, call)
        if model is not None:
            from tensorcad.runtime.certification.certificates import MODEL_CHECKS  # no torch at import

            settings = replace(settings, model=model)  # a bad factory name is refused here, in one line
            return certify_in_child(None, settings, CERTIFY_SECONDS, len(MODEL_CHECKS),
                                    lambda done, count, message: _notify(ctx, done, count, message))
        _design(design)  # a bad design is refused here, before a process is started
        # In a child killed at the deadline, building the scaled model included: a check is never waited out.
        return certify_in_child(design, settings, CERTIFY_SECONDS, len(answers.certify_checks()),
                                lambda done, count, message: _notify(ctx, done, count, message))

    @tool(server, "Summarise document lengths given inline as a histogram {\"length\": documents}: documents, "
                  "tokens, mean, spread, quantiles (give it as op.packing.lengths to analyze).", schemas.LENGTHS,
          {"histogram": histogram_schema()})
    def lengths(histogram: dict) -> dict:
        from ..analysis.operating_point.schema import histogram_lengths

        return answers.lengths_summary(histogram_lengths(histogram, "histogram"))
