"""MCP arguments are strict (#12): the real SDK client, in process, against every tool's schema.

A misspelled or unknown argument, at the top or inside the operating point, a
JSON type the schema does not list (no bool as an integer, no string as a
number), an empty string standing for a default: each is a one-line tool
error naming the argument, never ignored.
"""

import asyncio
import json
import logging

import pytest

mcp = pytest.importorskip("mcp")

from tensorcad.mcp import MAX_STRING, build_server  # noqa: E402

logging.getLogger("mcp").setLevel(logging.ERROR)
SERVER = build_server()
TOOLS = {t.name: t.parameters for t in SERVER._tool_manager.list_tools()}


def call(tool, arguments, server=SERVER):
    async def go():
        async with mcp.Client(server) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(go())


def error_line(result) -> str:
    assert result.is_error, result
    [content] = result.content
    assert "\n" not in content.text and "validation error" not in content.text
    return content.text


def test_the_tool_names_and_arguments_are_kept():
    assert {name: sorted(schema["properties"]) for name, schema in TOOLS.items()} == {
        "presets": [], "catalog": ["kind"], "show": ["design"], "validate": ["design"],
        "codegen": ["design", "scale"], "rules": ["design", "op"], "analyze": ["design", "op"],
        "walkthrough": ["design", "op"], "mask_preview": ["attention", "cells", "design", "head", "op"],
        "certify": ["call", "design", "model", "pack", "params", "seed", "seq", "spread"], "lengths": ["histogram"]}


def test_the_operating_point_argument_is_the_engine_s_schema():
    from tensorcad.analysis.operating_point.schema import operating_point_schema

    for tool in ("analyze", "rules", "walkthrough", "mask_preview"):
        assert TOOLS[tool]["properties"]["op"]["anyOf"][0] == operating_point_schema("input")


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_input_schema_forbids_other_properties(tool):
    assert TOOLS[tool]["additionalProperties"] is False


async def _listed():
    async with mcp.Client(SERVER) as client:
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}


def test_the_client_sees_the_strict_schemas():
    assert all(schema["additionalProperties"] is False for schema in asyncio.run(_listed()).values())


@pytest.mark.parametrize("name", ["packing", "pack", "seq_len", "spread", "gpu"])
def test_a_misspelled_argument_is_an_error_naming_it_and_the_accepted_ones(name):
    text = error_line(call("analyze", {"design": "nano-sort", name: 64}))
    assert f"{name}: unknown argument for analyze (arguments: design, op)" in text


@pytest.mark.parametrize("op,needle", [
    ({"seq_len": 64}, "op.seq_len: unknown field (fields: seq, packing, hardware"),
    ({"packing": {"men": 64}}, "op.packing.men: unknown field (fields: mean, spread, lengths, strategy, buffer)"),
    ({"cp": {"ranks": 2}}, "op.cp.ranks: unknown field (fields: size, shard)"),
    ({"packing": {"lengths": {"ten": 3}}}, "op.packing.lengths.ten: unknown field"),
])
def test_a_misspelled_field_of_the_operating_point_is_an_error_naming_its_path(op, needle):
    assert needle in error_line(call("analyze", {"design": "nano-sort", "op": op}))


@pytest.mark.parametrize("op,needle", [
    ({"seq": True}, "op.seq: expected integer or null, got boolean True"),
    ({"seq": "256"}, "op.seq: expected integer or null, got string '256'"),
    ({"seq": 256.0}, "op.seq: expected integer or null, got number 256.0"),
    ({"packing": {"mean": "64"}}, "op.packing.mean: expected number or null, got string '64'"),
    ({"packing": {"mean": False}}, "op.packing.mean: expected number or null, got boolean False"),
    ({"hardware": ""}, "op.hardware: '' is not one of A100, H100"),
    ({"hardware": 100}, "op.hardware: expected string or null, got integer 100"),
    ({"packing": "64"}, "op.packing: expected object or null, got string '64'"),
])
def test_types_are_json_s_own_with_no_coercion(op, needle):
    assert needle in error_line(call("analyze", {"design": "nano-sort", "op": op}))


def test_an_empty_or_long_string_argument_is_refused():
    assert "kind: is empty; leave it out for the default" in error_line(call("catalog", {"kind": ""}))
    assert f"kind: {MAX_STRING + 1:,} characters; at most {MAX_STRING:,}" in error_line(
        call("catalog", {"kind": "x" * (MAX_STRING + 1)}))


def test_a_design_object_is_size_and_depth_limited():
    deep: object = 1
    for _ in range(100):
        deep = {"a": deep}
    assert "design: nests deeper than 64" in error_line(call("show", {"design": deep}))


def test_an_integer_is_a_number_and_the_figures_follow_the_packing():
    packed = call("analyze", {"design": "nano-sort", "op": {"packing": {"mean": 64, "spread": 0}}})
    assert not packed.is_error
    report = json.loads(packed.content[0].text)
    assert {k: report["operatingPoint"]["packing"][k] for k in ("mean", "spread")} == {"mean": 64.0, "spread": 0.0}


def test_the_operating_point_names_the_argument_typed():
    def analyze(op):
        return error_line(call("analyze", {"design": "nano-sort", "op": op}))

    assert "op.packing.spread: spread" in analyze({"packing": {"mean": 64, "spread": 1e-320}})
    assert "op.pricePerGpuHour: -1.0 is outside" in analyze({"pricePerGpuHour": -1})
    assert "op.seq: 16,777,216 tokens" in analyze({"seq": 2**24, "packing": {"mean": 1}})
    assert "op.cp.shard: 'diagonal' is not one of contiguous" in analyze({"cp": {"size": 2, "shard": "diagonal"}})


def test_a_missing_argument_and_an_empty_design_are_one_line():
    assert "design: missing; show needs it" in error_line(call("show", {}))
    assert "design: is empty" in error_line(call("show", {"design": ""}))


def test_an_internal_failure_carries_the_engine_s_message(monkeypatch):
    import tensorcad.design

    def broken(design):
        raise RuntimeError("the printer lost its place\nat line 2")

    # A fault injected where the tool calls the engine: the wrapper, not the engine, is under test.
    monkeypatch.setattr(tensorcad.design, "show", broken)
    text = error_line(call("show", {"design": "nano-sort"}, server=build_server()))
    assert "internal error (RuntimeError): the printer lost its place" in text


def test_a_histogram_key_of_5000_digits_is_one_line_naming_it():
    """Before: MCP 'internal error (ValueError)' (int() of 5,000 digits) and an editor 500: issue 47's round-three
    leftover. The editor reads its operating point through the same operating_point_of."""
    from tensorcad.analysis.operating_point.schema import operating_point_of
    from tensorcad.errors import TensorcadError

    key = "1" * 5000
    text = error_line(call("analyze", {"design": "nano-sort", "op": {"packing": {"lengths": {key: 3}}}}))
    assert "op.packing.lengths.11111111111111111111...: a length of 5,000 digits" in text and len(text) < 300
    with pytest.raises(TensorcadError) as refused:
        operating_point_of({"packing": {"lengths": {key: 3}}})
    assert refused.value.path.startswith("op.packing.lengths.")
