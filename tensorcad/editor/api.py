"""What the editor's JSON API does, as plain functions of parsed JSON.

Each function takes the request's JSON (already parsed) and returns the
response's JSON, or raises ``TensorcadError`` naming the bad value's path;
the server turns that into HTTP 400 ``{"error", "path"}``. Nothing here
knows about HTTP. Designs arrive as objects (the text being edited) or as a
preset's name; a string is never read as a file path, so a request cannot
make the server read a file.

Operating-point paths are prefixed ``op.`` (``op.packing.mean``); a
design's paths are its own (``nodes[1].params.heads``), as the editor shows
them against the text being edited.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from typing import Any

from tensorcad.analysis.context_parallel.ranks import DEFAULT_SHARD, SHARDINGS
from tensorcad.analysis.operating_point import DEFAULTS, HARDWARE, OperatingPoint
from tensorcad.analysis.operating_point.schema import operating_point_of
from tensorcad.analysis.report import Report, analyze as analyze_design, packed_flops
from tensorcad.analysis.rows import tensor_roles
from tensorcad.design import load, preset_names, show
from tensorcad.design.catalog import KINDS, catalog_text
from tensorcad.design.expr import to_text
from tensorcad.design.load import parse_text
from tensorcad.design.masks import reads_documents
from tensorcad.design.model import Design
from tensorcad.errors import TensorcadError, join, shown
from tensorcad.rules import check
from tensorcad.views.preview import DEFAULT_CELLS, check_cells, mask_preview, sample_row
from tensorcad.views.walkthrough import walkthrough

from .curve import curve as packing_curve
from .kernel_blocks import block_overlay, rank_strip


def _object(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise TensorcadError(path, f"expected an object, got {type(value).__name__}")
    return value


def _only(body: dict, keys: tuple[str, ...], path: str) -> None:
    for key in body:
        if key not in keys:
            raise TensorcadError(join(path, key), f"unknown field (fields: {', '.join(keys)})")


def _design(value: Any) -> Design:
    """A design object, or a preset's name; never a file path."""
    if isinstance(value, str):
        if value not in preset_names():
            raise TensorcadError("design", f"{shown(value)} is not a preset ({', '.join(preset_names())})")
        return load(value)
    return load(_object(value, "design"))


def operating_point(raw: Any, design: Design | None = None) -> OperatingPoint:
    """The operating point from the editor's JSON: the engine's one reader of it (the MCP
    tools' too), held to ``operating_point_schema("input")``; errors name ``op.field``.

    Absent or null fields take the defaults; a packing mean without a spread gets
    spread 1, because real corpora vary (as ``--pack`` alone does on the command line).
    Lengths come as a histogram object, never a path: the browser names no server files.
    """
    return operating_point_of(raw, design, "op")


def _design_of(body: dict) -> Design:
    """The request's design: ``design`` (an object or a preset's name) or ``text`` (JSON being edited)."""
    if ("design" in body) == ("text" in body):
        raise TensorcadError("design", "send the design as `design` (an object or a preset's name) "
                                       "or as `text` (its JSON), one of the two")
    if "text" in body:
        if not isinstance(body["text"], str):
            raise TensorcadError("text", f"expected the design's JSON text, got {type(body['text']).__name__}")
        return load(parse_text(body["text"], "design"))
    return _design(body["design"])


def _request(body: Any, keys: tuple[str, ...]) -> tuple[Design, OperatingPoint, dict]:
    body = _object(body, "")
    _only(body, ("design", "text") + keys, "")
    design = _design_of(body)
    return design, operating_point(body.get("op"), design), body


# The same design and operating point are analysed for the readout, the
# rules and the walkthrough, once per edit; keyed by the design's canonical
# text, so an equal design typed again is not analysed again.
@lru_cache(maxsize=32)
def _report(text: str, op: OperatingPoint) -> Report:
    return analyze_design(load(json.loads(text)), op)


@lru_cache(maxsize=32)
def _diagnostics(text: str, op: OperatingPoint) -> tuple:
    return tuple(check(load(json.loads(text)), op))


def _key(design: Design) -> str:
    return json.dumps(design.to_dict(), sort_keys=True)


# -- the endpoints -------------------------------------------------------------


def presets() -> dict:
    """GET /api/presets: every preset, its context and whether it reads documents."""
    out = []
    for name in preset_names():
        d = load(name)
        out.append({"name": name, "context": d.context, "documents": d.input("documents") is not None,
                    "description": d.source.get("description", "")})
    return {"presets": out, "hardware": list(HARDWARE), "shardings": list(SHARDINGS), "defaults": {
        "hardware": DEFAULTS["hardware"], "gpus": DEFAULTS["gpus"], "mfu": DEFAULTS["mfu"],
        "pricePerGpuHour": DEFAULTS["price"], "shard": DEFAULT_SHARD}, "maxUpload": MAX_UPLOAD}


def design(name: Any) -> dict:
    """GET /api/design?name=…: a preset's content, to edit."""
    if not isinstance(name, str) or not name:
        raise TensorcadError("name", "which preset? (GET /api/design?name=…)")
    return {"name": name, "design": _design(name).to_dict()}


def describe(d: Design) -> dict:
    """What the inspector shows of a design: its inputs, attentions and printed form."""
    attentions = [{
        "index": i, "path": a.path, "layers": layers, "heads": a.heads, "kvHeads": a.kv_heads,
        "headDim": a.head_dim, "keeps": to_text(a.keep) if a.keep is not None else "every score",
        "readsDocuments": reads_documents(a),
    } for i, (a, layers) in enumerate(d.attentions())]
    return {"name": d.name, "context": d.context,
            "inputs": [{"name": i.name, "role": i.role} for i in d.inputs],
            "documents": d.input("documents") is not None, "attentions": attentions, "show": show(d)}


def validate(body: Any) -> dict:
    """POST /api/validate {design | text}: the design resolved, or its first error."""
    body = _object(body, "")
    _only(body, ("design", "text"), "")
    return describe(_design_of(body))


def analyze(body: Any) -> dict:
    """POST /api/analyze {design, op}: the report, the walkthrough and the design's outline."""
    d, op, _ = _request(body, ("op",))
    report = _report(_key(d), op)
    return {"report": report.to_json(), "walkthrough": walkthrough(d, report), "design": describe(d)}


def rules(body: Any) -> dict:
    """POST /api/rules {design, op}: every diagnostic, errors first."""
    d, op, _ = _request(body, ("op",))
    return {"diagnostics": [x.to_json() for x in _diagnostics(_key(d), op)]}


def check_op(body: Any) -> dict:
    """POST /api/operating-point {op}: the operating point as the engine reads it, or its error."""
    body = _object(body, "")
    _only(body, ("op",), "")
    return {"op": operating_point(body.get("op")).to_json()}


def preview(body: Any) -> dict:
    """POST /api/preview {design, op, attention, cells, head}: one row's mask as kept fractions."""
    d, op, body = _request(body, ("op", "attention", "cells", "head"))
    attentions = d.attentions()
    if not attentions:
        raise TensorcadError("attention", "the design has no attention to preview")
    index = body.get("attention", 0)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(attentions):
        raise TensorcadError("attention", f"expected an integer in [0, {len(attentions) - 1}], got {shown(index)}")
    attention, layers = attentions[index]
    cells, head = check_cells(body.get("cells", DEFAULT_CELLS)), body.get("head", 0)
    if isinstance(head, bool) or not isinstance(head, int):  # True == 1 would share head 1's cached answer
        raise TensorcadError("head", f"expected an integer in [0, {attention.heads - 1}], got {shown(head)}")
    # Packing is a condition of training: only a mask that reads documents sees it.
    packing = op.packing if reads_documents(attention) else None
    # Everything the drawing depends on, hashable (the attention itself holds mappings): an edit of
    # the widths, the layers, the cluster or another attention draws nothing again.
    key = (attention.keep, attention.heads, attention.causal, attention.window, attention.mask is None,
           tuple(sorted(tensor_roles(attention).items())), op.seq, packing, op.seed, op.block, op.cp, cells, head)
    drawing = _PREVIEWS.get(key)
    if drawing is None:
        drawing = _drawing(attention, op, packing, cells, head)
        with _PREVIEWS_LOCK:
            if len(_PREVIEWS) >= 32:
                _PREVIEWS.pop(next(iter(_PREVIEWS)))
            _PREVIEWS[key] = drawing
    return {"attention": index, "path": attention.path, "layers": layers,
            "keeps": to_text(attention.keep) if attention.keep is not None else "every score", **drawing}


_PREVIEWS: dict = {}
_PREVIEWS_LOCK = threading.Lock()


def _drawing(attention, op: OperatingPoint, packing, cells: int, head: int) -> dict:
    row = sample_row(op.seq, packing, op.seed)
    result = mask_preview(attention, row, cells, head)
    n = result.fractions.shape[0]
    starts = [int(t) for t in (row.documents[1:] != row.documents[:-1]).nonzero()[0] + 1]
    return {
        "seq": result.seq, "cells": n, "cellTokens": result.cell, "exact": result.exact,
        "stride": result.stride, "sample": "one sampled row" if row.sampled else "one document fills the row",
        "sampled": row.sampled, "packing": None if packing is None else packing.to_json(),
        "documentStarts": starts[:4096], "documents": len(starts) + 1,
        "fractions": [[round(float(x), 6) for x in line] for line in result.fractions],
        "kernelBlocks": block_overlay(attention, row, op.block, head),
        "cpRanks": None if op.cp is None else rank_strip(attention, row, op.cp, op.block),
    }


def chart(body: Any) -> dict:
    """POST /api/chart {design, op}: keys a query and blocks per kept score against the mean document length."""
    d, op, _ = _request(body, ("op",))
    return packing_curve(d, op, lambda at: packed_flops(d, at))


MAX_UPLOAD = 3_000_000  # bytes of a lengths file: base64 makes 4,000,000, inside server.MAX_BODY


def lengths(body: Any) -> dict:
    """POST /api/lengths {name, base64}: a lengths file's histogram, read as ``--pack-lengths`` reads it."""
    import base64
    import binascii
    from pathlib import PurePosixPath

    from tensorcad.packing.corpus.histogram import lengths_from_bytes

    body = _object(body, "")
    _only(body, ("name", "base64"), "")
    name, data = body.get("name"), body.get("base64")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise TensorcadError("name", "expected the file's name (its suffix says its format), at most 200 characters")
    if not name.isprintable():
        raise TensorcadError("name", "the file's name holds characters that are not printable")
    if not isinstance(data, str):
        raise TensorcadError("base64", "expected the file's bytes, base64-encoded")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise TensorcadError("base64", "is not base64") from None
    if len(raw) > MAX_UPLOAD:
        raise TensorcadError("base64", f"a file of {len(raw):,} bytes; at most {MAX_UPLOAD:,} here "
                                       "(write a histogram with `tensorcad lengths`, which is tiny)")
    # Only the base name is shown back, and it is never opened: the bytes came with it.
    shown_name = PurePosixPath(name.replace("\\", "/")).name or "lengths"
    read = lengths_from_bytes(raw, shown_name)
    return {"name": shown_name, "histogram": read.to_json(), "summary": read.summary()}


def catalog() -> dict:
    """GET /api/catalog: every kind, as text and as a list."""
    return {"text": catalog_text(), "kinds": [{"name": k.name, "doc": k.doc} for k in KINDS.values()]}
