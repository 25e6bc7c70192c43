"""``analyze --pack-strategy all``: every packing strategy at one operating point, one row each.

Comparing strategies for one corpus took a shell loop over ``--pack-strategy``
and reading ten reports side by side (issue 42's friction). Each row is the
same analysis ``analyze --json`` gives for that strategy (``answers.analysis``),
cut to what tells strategies apart: what the rows waste or lose, how many
documents share a row, what attention costs, and the run's GPU hours.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tensorcad.packing.settings import STRATEGIES

COLUMNS = (("strategy", "strategy"), ("padding", "padding"), ("truncated", "truncated"), ("split", "split"),
           ("tokensDropped", "tokens dropped"), ("documentsPerRow", "documents a row"),
           ("keysPerQuery", "keys a query"), ("trainPerToken", "train FLOPs a token"), ("gpuHours", "GPU hours"))


def compare(design: Any, op: Any) -> list[dict]:
    """One row a strategy: ``op`` (whose packing is on) with each of ``STRATEGIES`` in turn."""
    from .answers import analysis

    rows = []
    for strategy in STRATEGIES:
        report = analysis(design, replace(op, packing=replace(op.packing, strategy=strategy)))
        packed = report["flops"]["packed"]
        rows.append({"strategy": strategy, **{k: packed["packing"][k] for k in
                                              ("padding", "truncated", "split", "tokensDropped", "documentsPerRow")},
                     "keysPerQuery": packed["keysPerQuery"], "trainPerToken": packed["trainPerToken"],
                     "gpuHours": report["training"]["gpuHours"]})
    return rows


def render(rows: list[dict]) -> Any:
    """The rows as a rich table, fractions as percentages."""
    from rich.table import Table

    table = Table(title="packing strategies at this operating point")
    for key, title in COLUMNS:
        table.add_column(title, justify="left" if key == "strategy" else "right")
    for row in rows:
        table.add_row(*(_cell(key, row[key]) for key, _ in COLUMNS))
    return table


def _cell(key: str, value: Any) -> str:
    if key == "strategy":
        return str(value)
    if key in ("padding", "truncated", "split", "tokensDropped"):
        return f"{value:.2%}"
    if key in ("trainPerToken", "gpuHours"):
        return f"{value:,.4g}" if key == "trainPerToken" else f"{value:,.0f}"
    return f"{value:,.1f}"
