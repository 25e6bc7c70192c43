"""One real MCP session over stdio (#19): the SDK's ClientSession and stdio_client, `tensorcad mcp` a subprocess.

Every tool is called; each structured result is compared with the command
line's ``--json`` for the same call, run in process through ``cli.main``;
mask_preview's PNG is decoded by Pillow (not by the code that wrote it) and
its pixels held to the fractions; twenty bad calls are tool errors of one
line naming the bad value, and the server answers afterwards. One server for
the module, one session for all of it.
"""

import asyncio
import base64
import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")
jsonschema = pytest.importorskip("jsonschema")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tensorcad.cli import main  # noqa: E402
from tensorcad.packing.corpus.histogram import Lengths, write_histogram  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NANO = str(ROOT / "tensorcad" / "presets" / "nano-sort.json")
HISTOGRAM = {"3": 40, "17": 25, "64": 10, "200": 4, "700": 1}
PACKED_8K = {"seq": 8192, "packing": {"mean": 1024, "spread": 0}, "cp": {"size": 4}}
CERTIFY = {"design": "nano-sort", "params": 50_000, "seq": 64}

# (tool, arguments, the same call on the command line, without --json)
CALLS = {
    "presets": ({}, ["presets"]),
    "catalog": ({"kind": "rope"}, ["catalog", "rope"]),
    "validate": ({"design": NANO}, ["validate", NANO]),
    "show": ({"design": "llama-3-8b-documents"}, ["show", "llama-3-8b-documents"]),
    "analyze": ({"design": "llama-3-8b-documents", "op": PACKED_8K},
                ["analyze", "llama-3-8b-documents", "--seq", "8192", "--pack", "1024", "--pack-spread", "0",
                 "--cp", "4"]),
    "rules": ({"design": "llama-3-8b", "op": {"packing": {"mean": 1024}}}, ["rules", "llama-3-8b", "--pack", "1024"]),
    "codegen": ({"design": "nano-sort", "scale": 200_000}, ["codegen", "nano-sort", "--scale", "200000"]),
    "walkthrough": ({"design": "llama-3-8b-documents", "op": {"seq": 8192, "packing": {"mean": 1024}}},
                    ["walkthrough", "llama-3-8b-documents", "--seq", "8192", "--pack", "1024"]),
    "mask_preview": ({"design": "nano-sort", "op": {"packing": {"mean": 32, "spread": 1}}, "cells": 64},
                     ["mask-preview", "nano-sort", "--pack", "32", "--pack-spread", "1", "--cells", "64"]),
    "certify": (CERTIFY, ["certify", "nano-sort", "--params", "50000", "--seq", "64"]),
    "lengths": ({"histogram": HISTOGRAM}, None),  # the corpus it summarises is written below
}

# Twenty bad calls, each with what its one line must say.
BAD = [
    ("analyze", {"design": "nano-sort", "op": {"seq": 0}}, "op.seq: 0 is outside"),
    ("analyze", {"design": "nano-sort", "op": {"packing": {"men": 64}}}, "op.packing.men: unknown field"),
    ("analyze", {"design": "nano-sort", "op": {"seq": True}}, "op.seq: expected integer or null, got boolean"),
    ("analyze", {"design": "nano-sort", "op": {"packing": {"mean": "64"}}}, "op.packing.mean: expected number"),
    ("analyze", {"design": "nano-sort", "op": {"cp": {"size": 2}}}, "op.cp.size: head-tail chunks of 64 tokens"),
    ("analyze", {"design": "nano-sort", "op": {"hardware": "TPU"}}, "op.hardware: 'TPU' is not one of A100"),
    ("analyze", {"design": "no-such-preset"}, "no-such-preset"),
    ("show", {"design": {"name": "broken", "inputs": {}, "nodes": [], "output": "x"}}, "inputs"),
    ("validate", {"design": 3}, "design: expected string or object, got integer 3"),
    ("rules", {"design": "nano-sort", "pack": 64}, "pack: unknown argument for rules (arguments: design, op)"),
    ("codegen", {"design": "nano-sort", "scale": -5}, "scale: -5 is outside"),
    ("catalog", {"kind": "nope"}, "kind: unknown kind 'nope'"),
    ("walkthrough", {"design": "nano-sort", "op": {"packing": {"spread": 1}}}, "op.packing.spread: needs"),
    ("mask_preview", {"design": "nano-sort", "attention": 7}, "attention: expected an integer in [0, 0]"),
    ("mask_preview", {"design": "nano-sort", "cells": 100_000}, "cells: expected an integer in [1, 256]"),
    ("certify", {"design": "nano-sort", "params": 10**9}, "params: 1,000,000,000 is outside 1..2,000,000"),
    ("certify", {"design": "nano-sort", "seq": 100_000}, "seq: 100,000 is outside 1..512"),
    ("lengths", {"histogram": {"0": 5}}, "histogram.0: unknown field"),
    ("lengths", {"histogram": {"5": 0}}, "histogram: zero documents"),
    ("presets", {"x": 1}, "x: unknown argument for presets"),
]


async def _session() -> dict:
    # From the clone's root with this process's environment: the server is the code under test.
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "tensorcad.cli", "mcp"], cwd=str(ROOT),
                                       env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
        progress = []

        async def heard(done, count, message):
            progress.append((done, count, message))

        results = {name: await session.call_tool(name, arguments, progress_callback=heard if name == "certify"
                                                 else None) for name, (arguments, _) in CALLS.items()}
        bad = [await session.call_tool(name, arguments) for name, arguments, _ in BAD]
        after = await session.call_tool("presets", {})
        resources = [str(r.uri) for r in (await session.list_resources()).resources]
        packing_doc = (await session.read_resource("tensorcad://docs/packing.md")).contents[0].text
        schema = json.loads((await session.read_resource("tensorcad://schema/operating-point")).contents[0].text)
    return {"listed": listed, "results": results, "progress": progress, "bad": bad, "after": after,
            "resources": resources,
            "packing_doc": packing_doc, "schema": schema}


@pytest.fixture(scope="module")
def session():
    return asyncio.run(_session())


def cli_json(argv: list[str]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main([*argv, "--json"])
    return json.loads(out.getvalue())


def structured(result):
    assert not result.is_error, result.content[0].text
    content = result.structured_content
    return content["result"] if set(content) == {"result"} else content


def test_every_tool_is_called_and_declares_a_closed_output_schema(session):
    assert set(session["listed"]) == set(CALLS)
    for name, listed in session["listed"].items():
        assert listed.output_schema is not None and listed.output_schema["additionalProperties"] is False, name
        assert listed.input_schema["additionalProperties"] is False, name
        jsonschema.validate(session["results"][name].structured_content, listed.output_schema)


@pytest.mark.parametrize("name", [n for n, (_, argv) in CALLS.items() if argv is not None and n not in
                                  ("validate", "certify")])
def test_the_structured_result_equals_the_cli_json(session, name):
    assert structured(session["results"][name]) == cli_json(CALLS[name][1])


def test_validate_equals_the_cli_s_entry_for_the_file(session):
    [entry] = cli_json(CALLS["validate"][1])
    assert entry.pop("file") == NANO
    assert structured(session["results"]["validate"]) == entry


def test_certify_equals_the_cli_but_for_the_seconds_each_check_took(session):
    def untimed(value):  # what a check took is a clock's reading, at every level it is reported
        if isinstance(value, dict):
            return {k: untimed(v) for k, v in value.items() if k != "seconds"}
        return [untimed(v) for v in value] if isinstance(value, list) else value

    [cli] = cli_json(CALLS["certify"][1])
    ours = structured(session["results"]["certify"])
    assert untimed(ours) == untimed(cli)
    assert ours["passed"] and [c["name"] for c in ours["checks"]][:3] == ["rules", "isolation[eager]",
                                                                          "isolation[flex]"]


def test_certify_reports_its_progress_check_by_check(session):
    names = [c["name"] for c in structured(session["results"]["certify"])["checks"]]
    assert session["progress"] == [(i, len(names), f"certify: {name}") for i, name in enumerate(names + ["done"])]


def test_analyze_carries_the_context_parallel_figures(session):
    report = structured(session["results"]["analyze"])
    assert report["operatingPoint"]["cp"] == {"size": 4, "shard": "headtail"}
    assert len(report["contextParallel"]["ranks"]) == 4


def test_lengths_equals_the_cli_on_a_corpus_of_those_lengths(session, tmp_path):
    corpus = tmp_path / "corpus.txt"
    documents = [" ".join(["w"] * int(n)) for n, count in HISTOGRAM.items() for _ in range(count)]
    corpus.write_text("\n\n".join(documents) + "\n")
    cli = cli_json(["lengths", str(corpus), "--by", "whitespace", "-o", str(tmp_path / "h.json")])
    # Only what describes the corpus file itself is the CLI's alone.
    shown_by_the_cli_alone = ("empty", "by", "shards", "workers", "engine", "histogram")
    assert {k: v for k, v in cli.items() if k not in shown_by_the_cli_alone} == structured(
        session["results"]["lengths"])


def test_the_histogram_as_op_packing_lengths_is_the_file_the_cli_reads(tmp_path):
    write_histogram(Lengths(tuple(map(int, HISTOGRAM)), tuple(HISTOGRAM.values())), tmp_path / "h.json")

    from tensorcad.mcp import build_server

    async def go():  # in process: the stdio session above already shows the transport
        async with mcp.Client(build_server()) as client:
            return await client.call_tool("analyze", {"design": "nano-sort", "op": {
                "packing": {"lengths": HISTOGRAM, "strategy": "bfd"}, "count": "blocks"}})

    cli = cli_json(["analyze", "nano-sort", "--pack-lengths", str(tmp_path / "h.json"), "--pack-strategy", "bfd",
                    "--count", "blocks"])
    assert structured(asyncio.run(go())) == cli


def test_mask_preview_s_png_decodes_to_the_fractions(session):
    image_module = pytest.importorskip("PIL.Image")
    import numpy as np

    result = session["results"]["mask_preview"]
    preview = structured(result)
    [image] = [c for c in result.content if c.type == "image"]
    assert image.mime_type == "image/png"
    png = image_module.open(io.BytesIO(base64.b64decode(image.data)))
    png.load()
    assert png.format == "PNG" and png.mode == "L" and png.size == (2 * preview["cells"], 2 * preview["cells"])
    pixels = np.asarray(png)
    expected = np.rint(np.asarray(preview["fractions"]) * 255)
    assert (pixels[::2, ::2] == expected).all() and (pixels[1::2, 1::2] == expected).all()
    assert preview["sampled"] and preview["documents"] > 1  # a packed row: documents on the diagonal
    [text] = [c.text for c in result.content if c.type == "text" and "a sample" in c.text]
    assert "one sampled row of the packing" in text and len(text.splitlines()) == 1 + 32


def test_twenty_bad_calls_are_one_line_tool_errors_and_the_server_still_answers(session):
    for (name, arguments, needle), result in zip(BAD, session["bad"]):
        assert result.is_error, (name, arguments)
        [content] = result.content
        assert "\n" not in content.text and "validation error" not in content.text, content.text
        assert "Traceback" not in content.text and needle in content.text, (needle, content.text)
    assert len(session["bad"]) == 20
    assert structured(session["after"]) == structured(session["results"]["presets"])


def test_resources_hold_the_presets_the_catalog_the_docs_and_the_schema(session):
    from tensorcad.analysis.operating_point.schema import operating_point_schema
    from tensorcad.design import preset_names

    resources = set(session["resources"])
    assert {"tensorcad://presets", "tensorcad://catalog", "tensorcad://schema/operating-point"} <= resources
    assert {f"tensorcad://presets/{n}" for n in preset_names()} <= resources
    assert {f"tensorcad://docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= resources
    assert session["packing_doc"] == (ROOT / "docs" / "packing.md").read_text()
    assert session["schema"] == operating_point_schema("input")
