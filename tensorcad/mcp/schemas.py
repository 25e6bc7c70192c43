"""The tools' output schemas: the shape of each answer in ``tensorcad.views.answers``.

An answer's operating point is the engine's own schema
(``analysis.operating_point.schema``, as reported); the report's other
sections are objects whose figures the report's own tests pin. Every object
here that lists its fields is closed (``additionalProperties: false``), so a
field renamed in an answer fails the client's validation of the result.
"""

from __future__ import annotations

from ..analysis.operating_point.schema import operating_point_schema
from ..design.catalog import KINDS

STRING, INTEGER, NUMBER, BOOLEAN = ({"type": t} for t in ("string", "integer", "number", "boolean"))
OBJECT = {"type": "object"}


def closed(properties: dict, optional: tuple[str, ...] = ()) -> dict:
    """An object of exactly these fields, all required but ``optional``."""
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "required": [k for k in properties if k not in optional]}


def listed(items: dict) -> dict:
    """A list answer, as structured content holds it: ``{"result": [...]}``."""
    return closed({"result": {"type": "array", "items": items}})


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


PRESETS = listed(closed({"name": STRING, "params": INTEGER, "context": INTEGER, "description": STRING}))
CATALOG = closed({"kinds": {"type": "array", "items": closed({"name": {"type": "string", "enum": list(KINDS)},
                                                             "doc": STRING})},
                  "text": STRING})
SHOW = closed({"name": STRING, "text": STRING})
VALIDATE = closed({"ok": {"type": "boolean", "const": True}, "name": STRING, "nodes": INTEGER, "context": INTEGER,
                   "inputs": {"type": "array", "items": closed({"name": STRING, "role": STRING})}})
# The report's sections (analysis.report.Report.to_json); contextParallel's is its own module's.
_FLOPS = {name: NUMBER for name in ("fwdPerToken", "trainPerToken", "fwdAttention", "keysPerQuery",
                                    "attentionShare", "fwdAttentionBlocks", "blockRatio")}
_FLOPS["packing"] = OBJECT  # under a packing: what it did to the rows (padding, documents split)
_FLOPS["fwdMixing"] = NUMBER  # a design with stateful mixers: their taps and scans
_TRAINING = closed({"tokens": NUMBER, "seconds": NUMBER, "gpuHours": NUMBER, "cost": NUMBER,
                    "count": {"type": "string", "enum": ["blocks"]}}, optional=("count",))
_SERVING = closed({"fwdPerToken": NUMBER, "perStream": closed({"kvCacheBytes": NUMBER, "decodeFlopsPerToken": NUMBER,
                                                                "stateBytes": NUMBER}, optional=("stateBytes",))},
                  optional=("perStream",))
# a design with stateful mixers: each distinct block (analysis.layers.LayerFlops)
_LAYER = closed({"name": STRING, "block": STRING, "mixer": STRING, "layers": INTEGER, "fwdPerToken": NUMBER,
                 "packedFwdPerToken": NUMBER, "readsDocuments": BOOLEAN, "movesWithDocumentLength": BOOLEAN},
                optional=("block", "packedFwdPerToken"))
_PARAMS = closed({"total": INTEGER, "embedding": INTEGER, "matmul": INTEGER, "active": INTEGER},
                 ("active",))  # active: only where a design has a moe
# capacity-bound experts (analysis.capacity): the routings they drop
_CAPACITY = closed({"node": STRING, "layers": INTEGER, "capacity": NUMBER, "scope": STRING, "microBatch": INTEGER,
                    "droppedUnpacked": NUMBER, "droppedPacked": NUMBER, "droppedPackedError": NUMBER},
                   optional=("droppedPacked", "droppedPackedError"))
# multi-token prediction's modules (analysis.mtp)
_MTP = closed({"depth": INTEGER, "params": _PARAMS, "fwdPerToken": NUMBER, "trainPerToken": NUMBER})
ANALYZE = closed({"design": STRING, "operatingPoint": operating_point_schema("report"),
                  "params": _PARAMS,
                  "flops": closed({**_FLOPS, "packed": closed(_FLOPS, optional=("packing", "fwdMixing"))},
                                  optional=("packing", "packed", "fwdMixing")),
                  "training": _TRAINING, "serving": _SERVING,
                  "warnings": {"type": "array", "items": STRING}, "contextParallel": OBJECT,
                  "layers": {"type": "array", "items": _LAYER},
                  "capacity": {"type": "array", "items": _CAPACITY}, "mtp": _MTP},
                 optional=("warnings", "contextParallel", "layers", "capacity", "mtp"))
RULES = listed(closed({"rule": STRING, "severity": {"type": "string", "enum": ["error", "warn", "note"]},
                       "message": STRING, "path": STRING}))
CODEGEN = closed({"name": STRING, "scale": nullable(INTEGER), "source": STRING})
WALKTHROUGH = closed({"design": STRING, "operatingPoint": operating_point_schema("report"),
                      "steps": {"type": "array", "items": closed({"step": STRING, "title": STRING, "text": STRING})}})
_PACKING = operating_point_schema("report")["properties"]["packing"]
MASK_PREVIEW = closed({
    "design": STRING, "attention": INTEGER, "path": STRING, "layers": INTEGER, "head": INTEGER, "keeps": STRING,
    "seq": INTEGER, "cells": INTEGER, "cellTokens": INTEGER, "exact": BOOLEAN, "stride": INTEGER,
    "sampled": BOOLEAN, "sample": STRING, "packing": _PACKING, "documents": INTEGER,
    "documentStarts": {"type": "array", "items": INTEGER},
    "fractions": {"type": "array", "items": {"type": "array", "items": {"type": "number", "minimum": 0,
                                                                         "maximum": 1}}},
})
LENGTHS = closed({"documents": INTEGER, "tokens": INTEGER, "mean": NUMBER, "spread": NUMBER, "p50": INTEGER,
                  "p90": INTEGER, "p99": INTEGER, "max": INTEGER})
_CHECK = closed({"name": STRING, "status": {"type": "string", "enum": ["passed", "failed", "skipped"]},
                 "outcome": STRING, "passed": BOOLEAN, "skipped": BOOLEAN, "message": STRING, "figures": OBJECT,
                 "seconds": NUMBER})
CERTIFY = closed({"design": STRING, "passed": BOOLEAN, "settings": OBJECT,
                  "checks": {"type": "array", "items": _CHECK}, "call": STRING}, optional=("call",))
