"""Hostile input, round three (#32), over one real MCP session (the SDK's ClientSession, `tensorcad mcp` a subprocess).

The operating points that tried 64 GiB allocations or ran for minutes, a mean below one token, names that would
rewrite a terminal: each a tool error of one line, refused before any work; and after twenty of the calls that once
ran out of memory the server still answers.
"""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tensorcad.design import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MEMORY = [  # (arguments of analyze, what the one line says): each tried gigabytes or minutes before #32
    ({"seq": 4194304, "packing": {"mean": 1024}, "cp": {"size": 1024, "shard": "per-document"}},
     "op.cp.size: per-document sharding of 4,195,328 documents over 1,024 ranks"),
    ({"seq": 4194304, "packing": {"mean": 1024, "strategy": "bfd"}}, "op.packing.mean: documents of mean 1024"),
    ({"seq": 4194304, "packing": {"mean": 1024, "strategy": "split"}}, "(2^20) split packing draws"),
    ({"seq": 4194304, "packing": {"mean": 1024, "strategy": "ffd"}}, "(2^20) ffd packing draws"),
]


def named(name: str) -> dict:
    raw = load("nano-sort").to_dict()
    raw["name"] = name
    return raw


async def _session() -> dict:
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "tensorcad.cli", "mcp"], cwd=str(ROOT),
                                       env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out: dict = {"memory": []}
        started = time.monotonic()
        for _ in range(5):  # twenty calls that each once tried a 64 GiB allocation or ran past the budget
            for op, _ in MEMORY:
                out["memory"].append(await session.call_tool("analyze", {"design": "nano-sort", "op": op}))
        out["memory_seconds"] = time.monotonic() - started
        out["after"] = await session.call_tool("presets", {})
        out["mean"] = await session.call_tool("analyze", {"design": "nano-sort", "op": {"packing": {"mean": 1e-320}}})
        out["certify_mean"] = await session.call_tool("certify", {"design": "nano-sort", "pack": 0.5})
        out["escape"] = await session.call_tool("validate", {"design": named("a\x1b[31mred\r")})
        out["blank"] = await session.call_tool("show", {"design": named(" ")})
        out["markup"] = await session.call_tool("show", {"design": named("[bold]x[/bold]")})
        undecided = load("nano-sort").to_dict()
        del undecided["nodes"][1]["in"]["doc"], undecided["inputs"]["documents"]
        undecided["context"] = 1 << 20
        text = json.dumps(undecided).replace('"doc(b, q) == doc(b, kv)"', '"(q - kv) % 3 == 0"')
        started = time.monotonic()
        out["preview"] = await session.call_tool("mask_preview", {"design": json.loads(text),
                                                                  "op": {"seq": 1 << 20}, "cells": 32})
        out["preview_seconds"] = time.monotonic() - started
    return out


@pytest.fixture(scope="module")
def session():
    return asyncio.run(_session())


def one_line(result) -> str:
    assert result.is_error
    [content] = result.content
    assert "\n" not in content.text and "internal error" not in content.text and "Traceback" not in content.text
    return content.text


def test_operating_points_past_the_memory_budget_are_refused_before_work_and_the_server_answers(session):
    assert len(session["memory"]) == 20
    for (_, needle), result in zip(MEMORY * 5, session["memory"]):
        assert needle in one_line(result), one_line(result)
    # Refused up front: twenty calls in far less than one of them took (64 GiB, or 90 s each) on a loaded machine.
    assert session["memory_seconds"] < 60
    assert not session["after"].is_error and "nano-sort" in session["after"].content[0].text


def test_a_packing_mean_below_one_token_is_refused(session):
    assert "op.packing.mean: a mean document length of 9.99989e-321 tokens is below one token" in one_line(
        session["mean"])
    assert "pack: a mean document length of 0.5 tokens is below one token" in one_line(session["certify_mean"])


def test_a_design_name_with_control_characters_or_blank_is_a_tool_error(session):
    text = one_line(session["escape"])
    assert "holds a control character" in text and "\x1b" not in text and "\r" not in text
    assert "is blank" in one_line(session["blank"])
    assert not session["markup"].is_error  # markup is text: MCP prints nothing through rich


def test_a_mask_the_intervals_cannot_decide_previews_at_a_million_tokens_within_the_budget(session):
    result = session["preview"]
    assert not result.is_error, result.content[0].text
    preview = result.structured_content
    assert preview["exact"] is False and preview["seq"] == 1 << 20  # an estimate on the subgrid, and says so
    # One kept score in three, wherever the cell: the subgrid's estimate within 2 points of 1/3 below the diagonal.
    fractions = [f for i, row in enumerate(preview["fractions"]) for j, f in enumerate(row) if j < i]
    assert all(abs(f - 1 / 3) < 0.02 for f in fractions), (min(fractions), max(fractions))
    assert session["preview_seconds"] < 120  # was over 100 s and 2.8 GB unloaded; about 6 s now
