"""`tensorcad …`: the command line over the engine.

Bad input prints one line on stderr and exits 2, never a traceback; a check
that fails exits 1. Every command takes --help; figures take --json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .cli_operating_point import add_operating_point, operating_point
from .cli_options import add_certify_options, console, filename, integer
from .cli_views import add_view_commands
from .errors import TensorcadError, one_line, shown

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "tensorcad: " once; the subcommand's name is enough after it.
        command = self.prog.removeprefix("tensorcad").strip()
        raise TensorcadError("", f"{command + ': ' if command else ''}{message} (see --help)")


def write_output(path: str, text: str, option: str) -> None:
    """Write a file the user named, turning the OS's refusal into one line."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise TensorcadError(option, f"cannot write {shown(path)}: {e.strerror}") from None


def _emit(data: Any, args: argparse.Namespace) -> None:
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    out = getattr(args, "out", None)
    if out is not None:
        write_output(out, text, "--out")
    if getattr(args, "json", False) or out is None:
        sys.stdout.write(text)


_console = console  # one console for every command (cli_options)


# -- commands --------------------------------------------------------------------


def cmd_presets(args: argparse.Namespace) -> int:
    from . import answers

    rows = answers.presets()
    if args.json:
        _emit(rows, args)
        return 0
    from rich.table import Table

    table = Table("preset", "params", "context", "description", box=None)
    for r in rows:
        table.add_row(r["name"], f"{r['params']:,}", f"{r['context']:,}", r["description"])
    _console().print(table)
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from . import answers
    from .design.catalog import catalog_markdown

    answers.check_kind(args.kind)
    if args.json:
        _emit(answers.catalog(args.kind), args)
        return 0
    sys.stdout.write(catalog_markdown() if args.markdown else answers.catalog(args.kind)["text"])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from . import answers
    from .hf import load_design as load  # a Hugging Face config is a design too

    shown_design = answers.show(load(args.design))
    if args.json:
        _emit(shown_design, args)
    else:
        sys.stdout.write(shown_design["text"])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .answers import validation
    from .design import load

    bad, answers = 0, []
    for file in args.files:  # every file, not only up to the first bad one
        try:
            design = load(file)
        except TensorcadError as e:
            bad += 1
            answers.append({"file": file, "ok": False, "path": e.path, "error": str(e)})
            if args.json:
                continue
            # Name the file too: a validate run may cover many.
            where = one_line(file) if len(file) <= 200 else shown(file)
            line = str(e) if str(e).startswith(where) else f"{where}: {e}"
            sys.stderr.write(f"tensorcad: {line}\n")
            continue
        answers.append({"file": file, **validation(design)})
        if not args.json:
            print(f"{one_line(file)}: ok ({one_line(design.name)}, {len(design.nodes)} nodes)")
    if args.json:
        _emit(answers, args)
    return EXIT_BAD_INPUT if bad else 0


def cmd_new(args: argparse.Namespace) -> int:
    from .design import load

    design = load(args.source).to_dict()
    design["name"] = args.name
    text = json.dumps(design, indent=2) + "\n"
    load(json.loads(text))  # the new name is checked as any design's is, before anything is written
    if args.output is None:
        sys.stdout.write(text)
        return 0
    if Path(args.output).exists() and not args.force:
        raise TensorcadError("--output", f"{shown(args.output)} exists; pass --force to replace it")
    write_output(args.output, text, "--output")
    print(f"{args.output}: {args.name}, a copy of {args.source}; edit it, then: tensorcad validate {args.output}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from . import answers
    from .analysis.report import analyze, render
    from .hf import load_design as load  # a Hugging Face config is a design too

    design = load(args.design)
    op = operating_point(args, design)
    if args.json or args.out is not None:
        report = answers.analysis(design, op)  # what the MCP analyze tool returns
        warnings = report.get("warnings", [])
    else:
        report = analyze(design, op)
        warnings = report.warnings
    for warning in warnings:  # on stderr, so --json stays machine-readable
        sys.stderr.write(f"tensorcad: warning: {warning}\n")
    if args.json or args.out is not None:
        _emit(report, args)
    else:
        _console().print(render(report))
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from . import answers
    from .hf import load_design as load  # a Hugging Face config is a design too
    from .rules import check, render

    design = load(args.design)
    op = operating_point(args, design)
    if args.json:
        diagnostics = answers.diagnostics(design, op)  # what the MCP rules tool returns
        _emit(diagnostics, args)
        return EXIT_FAILED if any(d["severity"] == "error" for d in diagnostics) else 0
    diagnostics = check(design, op)
    _console().print(render(diagnostics))
    return EXIT_FAILED if any(d.severity == "error" for d in diagnostics) else 0


def cmd_codegen(args: argparse.Namespace) -> int:
    from . import answers
    from .hf import load_design as load  # a Hugging Face config is a design too

    generated = answers.codegen(load(args.design), args.scale, "--scale")
    if args.json:
        _emit(generated, args)
        return 0
    source = generated["source"]
    if args.output is not None:
        write_output(args.output, source, "--output")
    else:
        sys.stdout.write(source)
    return 0


def cmd_import_hf(args: argparse.Namespace) -> int:
    from .design import load
    from .hf import import_hf

    design = import_hf(args.config, documents=args.documents, positions=args.positions, name=args.name)
    load(design)  # the design it writes resolves, or the import is refused here
    text = json.dumps(design, indent=2) + "\n"
    if args.output:
        write_output(args.output, text, "--output")
    else:
        sys.stdout.write(text)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from .mcp import main as serve
    except ModuleNotFoundError as e:
        raise TensorcadError("", f"the MCP server needs the mcp package ({e.name} is missing): "
                                 "pip install 'tensorcad[mcp]'") from None
    serve()
    return 0


def cmd_editor(args: argparse.Namespace) -> int:
    from .editor import serve

    if args.design is not None:
        from .design import load

        load(args.design)  # refuse a bad design here, in one line, before any server starts
    serve(design=args.design, port=args.port, open_browser=not args.no_browser)
    return 0


def cmd_lengths(args: argparse.Namespace) -> int:
    from .corpus.histogram import write_histogram
    from .corpus.reading import count_lengths, plot

    total = 0
    for file in args.corpus:
        try:
            total += Path(file).stat().st_size
        except OSError as e:
            raise TensorcadError(file, f"cannot read: {e.strerror}") from None
    options = dict(field=args.field, separator=args.separator.encode().decode("unicode_escape"),
                   by=args.by, tokenizer=args.tokenizer)
    if args.json or not sys.stderr.isatty():
        lengths, empty = count_lengths(args.corpus, **options)
    else:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(TextColumn("counting"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("counting", total=total)
            lengths, empty = count_lengths(args.corpus, progress=lambda n: bar.advance(task, n), **options)
    if args.out:
        write_histogram(lengths, args.out)
    from .answers import lengths_summary

    summary = {**lengths_summary(lengths), "empty": empty,
               "by": "tokenizer" if args.tokenizer else args.by, "histogram": args.out}
    if args.json:
        _emit(summary, argparse.Namespace(json=True))
        return 0
    console = _console()
    console.print(f"{lengths.documents:,} documents, {lengths.tokens:,} tokens ({summary['by']}), "
                  f"{empty:,} empty skipped")
    console.print(f"mean {lengths.mean:,.1f}, spread {lengths.spread:.3f}, p50 {summary['p50']:,}, "
                  f"p90 {summary['p90']:,}, p99 {summary['p99']:,}, max {summary['max']:,}")
    if not args.no_plot:
        sys.stdout.write(plot(lengths) + "\n")
    if args.out:
        console.print(f"histogram written to {args.out} (analyze ... --pack-lengths {args.out})")
    return 0


def _runtime_command(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from . import runtime_cli

        return getattr(runtime_cli, name)(args)

    return run


def _checks_epilog(command: str) -> str:
    """What each check of the command holds the design to: the runtime's registry, read lazily."""
    from .runtime.certification import CERTIFY, GOLDENS, REGISTRY, VERIFY  # no torch at import

    names = VERIFY if command == "verify" else tuple(n for n in CERTIFY if n not in GOLDENS)
    lines = ["checks, in order:"] + [f"  {n:<19} {REGISTRY[n].holds}" for n in names]
    if command == "certify":
        lines.append("  goldens (golden[analysis|rules|codegen]) run under pytest --tensorcad only")
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
    from . import __version__

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
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", metavar="FILE", type=filename, help="write the JSON report to FILE")

    p = command("rules", "Lint a design at an operating point; exit 1 on an error.", cmd_rules)
    p.add_argument("design")
    add_operating_point(p)
    p.add_argument("--json", action="store_true", help="print diagnostics as JSON")

    p = command("codegen", "Write the design's PyTorch module (needs only torch).", cmd_codegen)
    p.add_argument("design")
    p.add_argument("--scale", type=integer, metavar="PARAMS", help="shrink to about PARAMS parameters first")
    p.add_argument("-o", "--output", metavar="FILE", type=filename, help="write to FILE instead of stdout")
    p.add_argument("--json", action="store_true", help="print {name, scale, source} as JSON")
    add_view_commands(command)

    p = command("import-hf", "Write the design of a Hugging Face config.json or local model directory "
                "(Llama, Mistral, Qwen2, Qwen3, Phi-3, GPT-2); what it cannot say is refused, naming the field.",
                cmd_import_hf)
    p.add_argument("config", metavar="CONFIG_OR_DIR", help="a config.json, or a directory holding one (never the hub)")
    p.add_argument("--documents", action="store_true",
                   help="add a documents input and the document mask: packed documents never see each other")
    p.add_argument("--positions", action="store_true",
                   help="add a positions input (restarting per document, as HF's flattening collator gives them)")
    p.add_argument("--name", help="the design's name (default: the directory's)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = command("verify", "Build the scaled model and prove it: certify's checks (less goldens) plus "
                "forward, FLOPs, fused-equals-eager and kept scores.", _runtime_command("verify"),
                epilog=_checks_epilog("verify"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("design")
    add_certify_options(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON, without progress")

    p = command("certify", "Run the checks `pytest --tensorcad` runs on designs, without pytest; exit 1 "
                "on a failure.", _runtime_command("certify"), epilog=_checks_epilog("certify"),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("designs", nargs="+", metavar="DESIGN")
    add_certify_options(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON, without progress")

    p = command("smoke-train", "Train the scaled model a few hundred steps and report a falling loss.",
                _runtime_command("smoke_train"))
    p.add_argument("design")
    p.add_argument("--steps", type=integer, default=300)
    p.add_argument("--params", type=integer, default=2_000_000)
    p.add_argument("--seed", type=integer, default=0)
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
                epilog="CORPUS: .jsonl (the text under --field), .parquet (a text column, needs pyarrow), "
                       "or plain text split by --separator. Streams: memory stays flat.")
    p.add_argument("corpus", nargs="+", metavar="CORPUS")
    p.add_argument("--field", default="text", help="the JSONL field or Parquet column of the text (default text)")
    p.add_argument("--separator", default="\\n\\n",
                   help="what divides plain-text documents, backslash escapes allowed (default a blank line)")
    p.add_argument("--by", choices=("bytes", "whitespace"), default="whitespace",
                   help="count tokens as UTF-8 bytes or whitespace-separated words (default whitespace)")
    p.add_argument("--tokenizer", metavar="DIR", help="count with a local Hugging Face tokenizer (its tokenizer.json)")
    p.add_argument("-o", "--out", default="lengths.json", metavar="FILE",
                   help="where to write the histogram (default lengths.json; '' not to write)")
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


if __name__ == "__main__":
    sys.exit(main())
