"""`tensorcad …`: the command line over the engine, its parser and its one entry point, `main`.

Bad input prints one line on stderr and exits 2, never a traceback; a check
that fails exits 1. Every command takes --help; figures take --json.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Callable, Sequence

from tensorcad.errors import TensorcadError

from .commands import (
    cmd_analyze,
    cmd_catalog,
    cmd_codegen,
    cmd_editor,
    cmd_import_hf,
    cmd_lengths,
    cmd_mcp,
    cmd_new,
    cmd_presets,
    cmd_rules,
    cmd_show,
    cmd_validate,
)
from .operating_point import add_operating_point
from .options import add_model_options
from .options import EXIT_BAD_INPUT, add_certify_options, add_import_options, escaped, filename, integer
from .views import add_view_commands

WORD_SHOWN = 80  # characters of one typed word argparse quotes back
LONG_WORD = re.compile(r"[^\s',]{%d,}" % (WORD_SHOWN + 1))
from .data_command import add_certify_data


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "tensorcad: " once; the subcommand's name is enough after it.
        command = self.prog.removeprefix("tensorcad").strip()
        # argparse quotes what was typed whole (a 2,000-character choice was echoed in full): each word is cut.
        message = LONG_WORD.sub(lambda m: m.group()[:WORD_SHOWN] + "...", message)
        raise TensorcadError("", f"{command + ': ' if command else ''}{message} (see --help)")


def _runtime_command(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from . import torch_commands  # torch loads only for these commands

        return getattr(torch_commands, name)(args)

    return run


def _checks_epilog(command: str) -> str:
    """What each check of the command holds the design to: the runtime's registry, read lazily."""
    from tensorcad.runtime.certification.registry import CERTIFY, GOLDENS, OPT_IN, REGISTRY, VERIFY  # no torch

    names = VERIFY if command == "verify" else tuple(n for n in CERTIFY if n not in GOLDENS) + OPT_IN
    lines = ["checks, in order:"] + [f"  {n:<19} {REGISTRY[n].holds}" for n in names]
    if command == "certify":
        from tensorcad.runtime.certification.registry import MODEL_CHECKS

        lines.append("  export runs with --export only (pytest: -m export)")
        lines.append("  goldens (golden[analysis|rules|codegen]) run under pytest --tensorcad only")
        lines.append("on a Hugging Face model directory (or --model), the model certificates:")
        lines += [f"  {n:<21} {REGISTRY[n].holds}" for n in MODEL_CHECKS]
    return "\n".join(lines)


# -- the parser ------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="tensorcad",
        description="Read a transformer design, tell what it costs to train and serve, lint it, "
        "generate its PyTorch code and prove that code right.",
        epilog="DESIGN is a preset name (see `tensorcad presets`), a .json/.yaml file, or a Hugging Face "
        "config.json or model directory (see `tensorcad import-hf`).",
    )
    from tensorcad import __version__

    top.add_argument("--version", action="version", version=f"tensorcad {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str, fn: Callable, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, **kw)
        p.set_defaults(fn=fn)
        return p

    p = command("presets", "List the shipped designs with their parameter counts.", cmd_presets)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("catalog", "Describe every kind, or one: ports, params, defaults, what it counts.", cmd_catalog)
    p.add_argument("kind", nargs="?", help="one kind")
    p.add_argument("--markdown", action="store_true", help="print docs/catalog.md")
    p.add_argument("--json", action="store_true", help="print the kinds and the text as JSON")
    p = command("show", "Print the resolved design: composites expanded, ports handed down, masks parsed.", cmd_show)
    p.add_argument("design")
    p.add_argument("--json", action="store_true", help="print {name, text} as JSON")
    p = command("new", "Start a design file from a preset (or another design), renamed.", cmd_new)
    p.add_argument("name", help="the new design's name")
    p.add_argument("--from", dest="source", default="nano-sort", metavar="DESIGN",
                   help="the preset or design file to copy (default nano-sort, the smallest with documents)")
    p.add_argument("-o", "--output", metavar="FILE", type=filename, help="write to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p = command("validate", "Check design files: one line each, ok or the bad value's path; exit 2 if any is bad.",
                cmd_validate)
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print one object a file: ok, or the bad value's path and error")

    p = command("analyze", "Params, FLOPs per token, attention, training time and cost, serving.", cmd_analyze)
    p.add_argument("design")
    add_operating_point(p)
    add_import_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", metavar="FILE", type=filename, help="write the JSON report to FILE")

    p = command("rules", "Lint a design at an operating point; exit 1 on an error.", cmd_rules)
    p.add_argument("design")
    add_operating_point(p)
    add_import_options(p)
    p.add_argument("--json", action="store_true", help="print diagnostics as JSON")

    p = command("codegen", "Write the design's PyTorch module (needs only torch).", cmd_codegen)
    p.add_argument("design")
    p.add_argument("--scale", type=integer, metavar="PARAMS", help="shrink to about PARAMS parameters first")
    p.add_argument("-o", "--output", metavar="FILE", type=filename, help="write to FILE instead of stdout")
    p.add_argument("--json", action="store_true", help="print {name, scale, source} as JSON")
    add_view_commands(command)

    from tensorcad.hf import SUPPORTED  # no torch: the families the import knows, named once

    p = command("import-hf", "Write the design of a Hugging Face config.json or local model directory "
                f"(model_type {', '.join(SUPPORTED)}); what it cannot say is refused, naming the field.",
                cmd_import_hf)
    p.add_argument("config", metavar="CONFIG_OR_DIR", help="a config.json, or a directory holding one (never the hub)")
    p.add_argument("--documents", action="store_true",
                   help="add a documents input and the document mask: packed documents never see each other")
    p.add_argument("--positions", action="store_true",
                   help="add a positions input (restarting per document, as HF's flattening collator gives them)")
    p.add_argument("--name", help="the design's name (default: the directory's)")
    p.add_argument("-o", "--output", metavar="FILE", type=filename, help="write to FILE instead of stdout")

    p = command("verify", "Build the scaled model and prove it: certify's checks (less goldens) plus "
                "forward, FLOPs, fused-equals-eager and kept scores.", _runtime_command("verify"),
                epilog=_checks_epilog("verify"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("design")
    add_certify_options(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON, without progress")

    p = command("certify", "Run the checks `pytest --tensorcad` runs, without pytest: a design's checks on a "
                "design; on a Hugging Face model directory the model certificates, on transformers' model with "
                "its own weights; exit 1 on a failure.", _runtime_command("certify"),
                epilog=_checks_epilog("certify"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("designs", nargs="*", metavar="DESIGN_OR_MODEL_DIR")
    add_certify_options(p)
    add_model_options(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON, without progress")

    add_certify_data(command)

    p = command("smoke-train", "Train the scaled model a few hundred steps and report a falling loss. "
                "Minutes on a CPU: the defaults took 348-755 s on 2 shared cores; the time goes as "
                "--steps x --rows x --seq x --params.",
                _runtime_command("smoke_train"))
    p.add_argument("design")
    p.add_argument("--steps", type=integer, default=300, help="AdamW steps (default 300)")
    p.add_argument("--params", type=integer, default=2_000_000,
                   help="scale the design to about this many parameters first (default 2,000,000)")
    p.add_argument("--seed", type=integer, default=0, help="seed of the weights and the batches (default 0)")
    p.add_argument("--rows", type=integer, default=16, help="rows a step (default 16)")
    p.add_argument("--seq", type=integer, help="tokens a row (default 128, or the scaled design's context if "
                                               "shorter)")
    p.add_argument("--corpus", metavar="FILE",
                   help="train on real documents (JSONL, Parquet or text) instead of sorting problems, "
                        "their boundaries kept; needs a design with a documents input")
    p.add_argument("--tokenizer", metavar="DIR", help="a local Hugging Face tokenizer (default: UTF-8 bytes)")
    p.add_argument("--field", default="text", help="the JSONL field or Parquet column of the text (default text)")
    p.add_argument("--pack-strategy", metavar="S", choices=("stream", "bfd", "ffd", "split", "pad"),
                   help="how the corpus's documents fill rows (default stream)")
    p.add_argument("--json", action="store_true")

    p = command("trace", "Print each op of a forward pass with its shapes and FLOPs beside the analysis.",
                _runtime_command("trace"))
    p.add_argument("design")
    p.add_argument("--seq", type=integer, help="tokens a row (default 256, or the design's context if shorter)")
    p.add_argument("--params", type=integer, default=2_000_000)
    p.add_argument("--json", action="store_true")
    p = command("lengths", "Count the document lengths of a corpus and write their histogram.", cmd_lengths,
                epilog="CORPUS: files, directories of shards or globs ('shards/*.jsonl.zst'): .jsonl/.ndjson "
                       "(the text under --field; .gz or .zst), .parquet (a column, needs pyarrow), .arrow (a saved "
                       "datasets folder's shards), or plain text split by --separator. A token_count or length "
                       "column is read where a shard has one. Streams: memory stays flat. With --merge, CORPUS "
                       "is histograms (what this command writes) to add up.")
    p.add_argument("corpus", nargs="+", metavar="CORPUS",
                   help="corpus files, folders of shards or globs (with --merge: histograms)")
    p.add_argument("--merge", action="store_true",
                   help="add up the histograms CORPUS names, exactly, instead of counting documents")
    # None, not the defaults, so --merge can tell an option given from one left alone (it counts no text).
    p.add_argument("--field", help="the JSONL field or Parquet column of the text (default text)")
    p.add_argument("--length-column", metavar="NAME",
                   help="read each document's length from this column or field (default: token_count or length "
                        "where a shard has one, unless --by or --tokenizer says to count the text)")
    p.add_argument("--separator", type=escaped,
                   help="what divides plain-text documents, backslash escapes allowed (default a blank line)")
    p.add_argument("--by", choices=("bytes", "whitespace"),
                   help="count tokens of the text as UTF-8 bytes or whitespace-separated words (default whitespace, "
                        "where no length column is read)")
    p.add_argument("--tokenizer", metavar="DIR", help="count with a local Hugging Face tokenizer (its tokenizer.json)")
    p.add_argument("--workers", type=integer, metavar="N",
                   help="count the shards in N processes (default 1, this one; with --engine, the local cluster's "
                        "workers, default 2)")
    p.add_argument("--engine", choices=("dask",),
                   help="count the shards as tasks on a Dask cluster: a local one, or --scheduler's")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --engine dask: the cluster's scheduler (tcp://HOST:8786), whose workers read the shards")
    p.add_argument("-o", "--out", default="lengths.json", metavar="FILE",
                   help="where to write the histogram (default lengths.json; '' not to write); "
                        "never over a corpus, nor over a file that exists without --force")
    p.add_argument("--force", action="store_true", help="write over an existing --out")
    p.add_argument("--no-plot", action="store_true", help="print no plot")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = command("editor", "Open the local web editor (served on 127.0.0.1 only).", cmd_editor)
    p.add_argument("design", nargs="?", help="a design to open (default: what you last edited, else llama-3-8b-documents)")
    p.add_argument("--port", type=integer, default=0, help="port on 127.0.0.1 (default: any free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address instead of opening a browser")
    command("mcp", "Serve the engine as MCP tools over stdio: every command above that answers in JSON, "
            "with resources for the presets, the catalog and the docs (see the README's MCP section).", cmd_mcp)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    try:
        args = top.parse_args(argv)
        if not getattr(args, "fn", None):
            top.print_help()
            sys.stderr.write("tensorcad: name a command (see the list above, or --help)\n")
            return EXIT_BAD_INPUT
        return args.fn(args)
    except TensorcadError as e:
        sys.stderr.write(f"tensorcad: {e}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("tensorcad: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0

