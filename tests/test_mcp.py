"""The MCP server, driven by the real MCP SDK client over stdio (`tensorcad mcp` as a subprocess)."""

import asyncio
import json
import sys

import pytest

mcp = pytest.importorskip("mcp")

from tensorcad import closed_form  # noqa: E402


def _result(r):
    if r.structured_content is not None:
        return r.structured_content.get("result", r.structured_content)
    return json.loads(r.content[0].text) if r.content[0].text[:1] in "[{" else r.content[0].text


async def _session(calls):
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "tensorcad.cli", "mcp"])
    out = []
    async with mcp.Client(params) as client:
        out.append(sorted(t.name for t in (await client.list_tools()).tools))
        for name, arguments in calls:
            out.append(await client.call_tool(name, arguments))
    return out


@pytest.fixture(scope="module")
def answers():
    return asyncio.run(_session([
        ("analyze", {"design": "llama-3-8b-documents", "seq": 8192, "pack": 1024, "pack_spread": 0}),
        ("analyze", {"design": "llama-3-8b-documents", "seq": 4096, "pack": 512}),
        ("analyze", {"design": "llama-3-8b", "seq": 0}),
        ("rules", {"design": "llama-3-8b", "pack": 1024}),
        ("show", {"design": {"name": "broken", "inputs": {}, "nodes": [], "output": "x"}}),
        ("presets", {}),
    ]))


def test_the_tools_are_listed(answers):
    assert answers[0] == ["analyze", "catalog", "codegen", "presets", "rules", "show"]


def test_analyze_reports_packed_figures_with_the_report_names(answers):
    report = _result(answers[1])
    # decided exactly for fixed documents: the closed form itself, not near it
    assert report["flops"]["packed"]["keysPerQuery"] == closed_form.fixed_phase_average(8192, 1024)


def test_a_mean_alone_gets_spread_one(answers):
    assert _result(answers[2])["operatingPoint"]["packing"] == {"mean": 512.0, "spread": 1.0, "strategy": "stream"}


def test_bad_input_is_a_tool_error_naming_the_value(answers):
    assert answers[3].is_error
    assert "seq: 0 is outside" in answers[3].content[0].text
    assert answers[5].is_error and "inputs" in answers[5].content[0].text


def test_rules_carry_the_packing_note(answers):
    assert [d["rule"] for d in _result(answers[4])] == ["packing-unused"]


def test_presets_list_counts(answers):
    presets = {p["name"]: p["params"] for p in _result(answers[6])}
    assert presets["llama-3-8b"] == 8_030_261_248
