"""The tables docs/packing.md prints about strategies and the headline count, computed here.

``python -m tensorcad.analysis.evidence`` prints both tables in Markdown;
``--write docs/packing.md`` replaces them between their markers, and
``tests/analysis/test_evidence.py`` fails when the file and this code disagree.
Nothing in them is typed in: every figure is the engine's report.

Lengths are log-normal, one document per stratum of 200,000 (the quantile at
(i + 0.5)/n rounded to whole tokens, at least 1): a heavy-tailed corpus in
the shape web text has, reproducible without a download.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from functools import lru_cache

from tensorcad.packing import STRATEGIES, Packing
from tensorcad.packing.corpus.histogram import Lengths

from .operating_point import OperatingPoint
from .report import analyze

DESIGN = "llama-3-8b-documents"
SEQ = 8192
DOCUMENTS = 200_000
# Realistic packings for the headline: web text (log-normal c = 3) streamed and
# best-fit, short chat-like documents, and long documents at 32k.
PACKINGS = (
    ("web text, stream", 1024, 3.0, "stream", 8192),
    ("web text, bfd", 1024, 3.0, "bfd", 8192),
    ("short documents, stream", 256, 1.5, "stream", 8192),
    ("long documents, stream", 4096, 2.0, "stream", 32768),
)
WINDOWS = (None, 1024)
# The gap in training cost between counting blocks and kept scores past which
# the headline would move to blocks: a hundredth of the cost.
MOVE_AT = 0.01


@lru_cache(maxsize=16)
def lognormal_lengths(mean: float, spread: float, documents: int = DOCUMENTS) -> Lengths:
    """Log-normal lengths of the given mean and coefficient of variation, one per stratum."""
    return Lengths.lognormal(mean, spread, documents)


def _windowed(window: int | None) -> dict | str:
    if window is None:
        return DESIGN
    from tensorcad.design import load

    source = copy.deepcopy(dict(load(DESIGN).source))
    source = _plain(source)
    source["name"] = f"{DESIGN}-window-{window}"
    source["nodes"][1]["params"]["block"]["params"]["attention"]["window"] = window
    return source


def _plain(value):
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _report(design, seq: int, packing: Packing, count: str = "kept") -> dict:
    return analyze(design, OperatingPoint(seq=seq, packing=packing, count=count)).to_json()


def strategy_rows(mean: float = 1024, spread: float = 3.0, seq: int = SEQ) -> list[dict]:
    """Each strategy on Llama-3-8B with the document mask: what it loses, keys, blocks, cost per real token."""
    lengths = lognormal_lengths(mean, spread)
    rows = []
    for strategy in STRATEGIES:
        report = _report(DESIGN, seq, Packing(None, None, lengths=lengths, strategy=strategy))
        blocks = _report(DESIGN, seq, Packing(None, None, lengths=lengths, strategy=strategy), "blocks")
        packed = report["flops"]["packed"]
        rows.append({"strategy": strategy, **packed["packing"], "keysPerQuery": packed["keysPerQuery"],
                     "blockRatio": packed["blockRatio"], "trainPerToken": packed["trainPerToken"],
                     "cost": report["training"]["cost"], "costBlocks": blocks["training"]["cost"]})
    stream = rows[0]
    for row in rows:
        row["costVsStream"] = row["cost"] / stream["cost"]
        row["costBlocksVsStream"] = row["costBlocks"] / stream["costBlocks"]
    return rows


def headline_rows() -> list[dict]:
    """Kept scores against whole blocks at realistic packings, with and without a window."""
    rows = []
    for name, mean, spread, strategy, seq in PACKINGS:
        packing = Packing(None, None, lengths=lognormal_lengths(mean, spread), strategy=strategy)
        for window in WINDOWS:
            design = _windowed(window)
            kept, blocks = _report(design, seq, packing), _report(design, seq, packing, "blocks")
            packed = kept["flops"]["packed"]
            rows.append({"packing": name, "seq": seq, "window": window, "keysPerQuery": packed["keysPerQuery"],
                         "attentionShare": packed["attentionShare"], "blockRatio": packed["blockRatio"],
                         "costGap": blocks["training"]["cost"] / kept["training"]["cost"] - 1})
    return rows


def strategy_table() -> str:
    lengths = lognormal_lengths(1024, 3.0)
    lines = [f"Llama-3-8B with the document mask at {SEQ:,} tokens; {lengths.documents:,} log-normal lengths "
             f"(mean {lengths.mean:,.1f}, c = {lengths.spread:.2f}, p99 {lengths.quantile(0.99):,}, "
             f"max {lengths.max:,}); bin-packers and TRL see 1,000 documents at a time. Truncated, split and "
             "positions continued are shares of documents; dropped, of tokens.",
             "",
             "| strategy | padding | truncated | split | tokens dropped | positions continued | keys a query "
             "| blocks per kept score | train cost / real token vs stream (kept) | (blocks) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in strategy_rows():
        lines.append(f"| `{r['strategy']}` | {r['padding']:.2%} | {r['truncated']:.2%} | {r['split']:.2%} "
                     f"| {r['tokensDropped']:.2%} | {r['positionsContinued']:.2%} "
                     f"| {r['keysPerQuery']:,.1f} | {r['blockRatio']:.3f} | {r['costVsStream']:.4f} "
                     f"| {r['costBlocksVsStream']:.4f} |")
    return "\n".join(lines)


def headline_table() -> tuple[str, float]:
    rows = headline_rows()
    lines = ["| packing | tokens | window | keys a query | attention share | blocks per kept score "
             "| training cost, blocks vs kept |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        window = "none" if r["window"] is None else f"{r['window']:,}"
        lines.append(f"| {r['packing']} | {r['seq']:,} | {window} | {r['keysPerQuery']:,.1f} "
                     f"| {r['attentionShare']:.2%} | {r['blockRatio']:.3f} | +{r['costGap']:.2%} |")
    worst = max(r["costGap"] for r in rows)
    return "\n".join(lines), worst


def decision(worst: float) -> str:
    verdict = "stays `kept`" if worst < MOVE_AT else "moves to `blocks`"
    return (f"The largest gap in training cost above is {worst:.2%}; the headline moves only past "
            f"{MOVE_AT:.0%}, so the default count {verdict}.")


def sections() -> dict[str, str]:
    table, worst = headline_table()
    return {"strategies": strategy_table(), "headline": table + "\n\n" + decision(worst)}


def _replace(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- BEGIN {name} --> ... <!-- END {name} --> markers")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def between(text: str, name: str) -> str:
    """What a file holds between a section's markers (for the test that it is current)."""
    found = re.search(rf"<!-- BEGIN {name} -->\n(.*?)\n<!-- END {name} -->", text, re.S)
    return found.group(1) if found else ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorcad.analysis.evidence", description=__doc__.splitlines()[0])
    p.add_argument("--write", metavar="FILE", help="replace the tables between their markers in FILE")
    args = p.parse_args(argv)
    found = sections()
    if args.write:
        from pathlib import Path

        text = Path(args.write).read_text()
        for name, body in found.items():
            text = _replace(text, name, body)
        Path(args.write).write_text(text)
    else:
        for name, body in found.items():
            sys.stdout.write(f"<!-- {name} -->\n{body}\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
