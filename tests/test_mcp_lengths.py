"""The MCP analyze tool takes a lengths file, a strategy and a count, through the real MCP client."""

import asyncio
import json
import sys

import pytest

mcp = pytest.importorskip("mcp")

from tensorcad.corpus.histogram import Lengths, write_histogram  # noqa: E402


def test_analyze_takes_lengths_strategy_and_count(tmp_path):
    lengths = Lengths.lognormal(1024, 3.0, 20_000)
    write_histogram(lengths, tmp_path / "h.json")

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "tensorcad.cli", "mcp"])
        async with mcp.Client(params) as client:
            good = await client.call_tool("analyze", {"design": "llama-3-8b-documents", "seq": 8192,
                                                      "pack_lengths": str(tmp_path / "h.json"),
                                                      "pack_strategy": "bfd", "count": "blocks"})
            bad = await client.call_tool("analyze", {"design": "llama-3-8b-documents", "pack": 100,
                                                     "pack_lengths": str(tmp_path / "h.json")})
            return good, bad

    good, bad = asyncio.run(session())
    report = good.structured_content or json.loads(good.content[0].text)
    report = report.get("result", report)
    packing = report["operatingPoint"]["packing"]
    assert packing["strategy"] == "bfd" and packing["lengths"]["documents"] == 20_000
    assert report["training"]["count"] == "blocks" and report["flops"]["packed"]["packing"]["padding"] > 0
    assert bad.is_error and "pack: cannot be given with pack_lengths" in bad.content[0].text
