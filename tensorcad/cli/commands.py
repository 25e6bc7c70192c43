"""The engine's commands: each `cmd_*` takes the parsed arguments and returns an exit code.

`dispatch` builds the parser and calls these; the torch commands (verify,
certify, smoke-train, trace) are in `torch_commands`, loaded only when run.
Bad input raises TensorcadError, which `dispatch.main` prints as one line.
"""

from __future__ import annotations

import argparse
import json
import stat
import sys
from pathlib import Path
from typing import Any

from tensorcad.design.raw import check_name
from tensorcad.errors import TensorcadError, as_text, one_line, shown

from .operating_point import operating_point
from .options import EXIT_BAD_INPUT, EXIT_FAILED, console, design_option

PATH_SHOWN = 1024  # a path the user gave is quoted whole (a hostile one is still cut)


def writable(path: str, option: str, *, inputs=(), force: bool = True) -> None:
    """Refuse a file the user named to write: never one of ``inputs``, never an existing one unless ``force``.

    ``tensorcad lengths -o corpus.txt`` would have replaced the corpus with its
    histogram; a typo's ``-o`` would have replaced whatever was there.
    """
    target = Path(path)
    if not target.exists():
        return
    kind = _not_writable_kind(target)
    if kind is not None:
        # Opening a FIFO to write blocks until a reader comes (forever, for a typo); a directory or socket fails late.
        raise TensorcadError(option, f"{shown(path, PATH_SHOWN)} is {kind}, not a regular file: {option} names a file to write")
    for given in inputs:
        try:
            same = target.samefile(given)
        except OSError:
            same = False
        if same:
            raise TensorcadError(option, f"{shown(path, PATH_SHOWN)} is an input of this command; it is never written over")
    if not force:
        raise TensorcadError(option, f"{shown(path, PATH_SHOWN)} exists; pass --force to replace it, or -o another file")


def _not_writable_kind(target: Path) -> str | None:
    """What an existing output path is when it is none a command may write: a character device (``/dev/null``)
    takes the bytes without blocking, a FIFO waits for a reader, a directory or socket cannot be written."""
    mode = target.stat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode):
        return None
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a block device")


def write_output(path: str, text: str, option: str, *, inputs=(), force: bool = True) -> None:
    """Write a file the user named (checked by ``writable``), turning the OS's refusal into one line."""
    writable(path, option, inputs=inputs, force=force)
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


_console = console  # one console for every command (options)


# -- commands --------------------------------------------------------------------


def cmd_presets(args: argparse.Namespace) -> int:
    from tensorcad.views import answers

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
    from tensorcad.design.catalog import catalog_markdown
    from tensorcad.views import answers

    answers.check_kind(args.kind)
    if args.json:
        _emit(answers.catalog(args.kind), args)
        return 0
    sys.stdout.write(catalog_markdown() if args.markdown else answers.catalog(args.kind)["text"])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.views import answers

    shown_design = answers.show(load(args.design))
    if args.json:
        _emit(shown_design, args)
    else:
        sys.stdout.write(shown_design["text"])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from tensorcad.design import load
    from tensorcad.views.answers import validation

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
    from tensorcad.design import load

    check_name(args.name, "NAME")  # the rule every design name passes, naming what the user typed
    design = load(args.source).to_dict()
    design["name"] = args.name
    text = json.dumps(design, indent=2) + "\n"
    load(json.loads(text))  # the new name is checked as any design's is, before anything is written
    if args.output is None:
        sys.stdout.write(text)
        return 0
    if Path(args.output).exists() and not args.force:
        raise TensorcadError("--output", f"{shown(args.output, PATH_SHOWN)} exists; pass --force to replace it")
    write_output(args.output, text, "--output")
    print(one_line(f"{args.output}: {args.name}, a copy of {args.source}; edit it, then: "
                   f"tensorcad validate {args.output}"))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from tensorcad.analysis.report import analyze, render
    from tensorcad.views import answers

    design = design_option(args, args.design)
    if getattr(args, "pack_strategy", None) == "all":
        return _analyze_strategies(args, design)
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


def _analyze_strategies(args: argparse.Namespace, design) -> int:
    """``analyze --pack-strategy all``: one row a strategy (``views/strategies.py``)."""
    from tensorcad.views import strategies

    if args.pack is None and getattr(args, "pack_lengths", None) is None:
        raise TensorcadError("--pack-strategy", "all compares how packed rows are filled: give --pack or --pack-lengths")
    args.pack_strategy = "stream"  # the point itself; compare() swaps each strategy in
    rows = strategies.compare(design, operating_point(args, design))
    if args.json or args.out is not None:
        _emit({"strategies": rows}, args)
    else:
        _console().print(strategies.render(rows))
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from tensorcad.rules import check, render
    from tensorcad.views import answers

    design = design_option(args, args.design)
    op = operating_point(args, design)
    if args.json:
        diagnostics = answers.diagnostics(design, op)  # what the MCP rules tool returns
        _emit(diagnostics, args)
        return EXIT_FAILED if any(d["severity"] == "error" for d in diagnostics) else 0
    diagnostics = check(design, op)
    _console().print(render(diagnostics))
    return EXIT_FAILED if any(d.severity == "error" for d in diagnostics) else 0


def cmd_codegen(args: argparse.Namespace) -> int:
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.views import answers

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
    from tensorcad.design import load
    from tensorcad.hf import import_hf

    if args.name is not None:
        check_name(args.name, "--name")
    design = import_hf(args.config, documents=args.documents, positions=args.positions, name=args.name)
    load(design)  # the design it writes resolves, or the import is refused here
    text = json.dumps(design, indent=2) + "\n"
    if args.output is not None:
        write_output(args.output, text, "--output", inputs=(args.config,))
        print(one_line(f"{args.output}: {design['name']}, imported from {args.config}; "
                       f"next: tensorcad analyze {args.output}"))
    else:
        sys.stdout.write(text)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from tensorcad.mcp import main as serve
    except ModuleNotFoundError as e:
        raise TensorcadError("", f"the MCP server needs the mcp package ({e.name} is missing): "
                                 "pip install 'tensorcad[mcp]'") from None
    serve()
    return 0


def cmd_editor(args: argparse.Namespace) -> int:
    from tensorcad.editor import serve

    if args.design is not None:
        from tensorcad.design import load

        load(args.design)  # refuse a bad design here, in one line, before any server starts
    serve(design=args.design, port=args.port, open_browser=not args.no_browser)
    return 0


def cmd_lengths(args: argparse.Namespace) -> int:
    from tensorcad.packing.corpus.histogram import histogram_text
    from tensorcad.packing.corpus.reading import plot
    from tensorcad.views.answers import lengths_summary

    inputs = _inputs(args)
    if args.out:  # refused before the corpus is read, not after minutes of counting
        writable(args.out, "--out", inputs=inputs, force=args.force)
    counted = _merged(args) if args.merge else _counted(args)
    how = ("merged" if args.merge else "tokenizer" if args.tokenizer else args.by
           or (f"column {args.length_column}" if args.length_column else
               "token_count or length where a shard has one, else whitespace"))
    lengths = counted.lengths
    if args.out:
        write_output(args.out, histogram_text(lengths), "--out", inputs=inputs, force=args.force)
    summary = {**lengths_summary(lengths), "empty": counted.empty, "by": how, "shards": counted.shards,
               "workers": counted.workers, "engine": args.engine, "histogram": args.out}
    if args.json:
        _emit(summary, argparse.Namespace(json=True))
        return 0
    console = _console()
    if args.merge:
        console.print(f"{lengths.documents:,} documents, {lengths.tokens:,} tokens: {counted.shards:,} histograms merged")
    else:
        where = f"{counted.shards:,} shard{'s' if counted.shards > 1 else ''}" + (
            f", {counted.workers} workers" if counted.workers > 1 else "") + (f" on {args.engine}" if args.engine else "")
        console.print(as_text(f"{lengths.documents:,} documents, {lengths.tokens:,} tokens ({how}), "
                              f"{counted.empty:,} empty skipped; {where}"))
    console.print(f"mean {lengths.mean:,.1f}, spread {lengths.spread:.3f}, p50 {summary['p50']:,}, "
                  f"p90 {summary['p90']:,}, p99 {summary['p99']:,}, max {summary['max']:,}")
    if not args.no_plot:
        sys.stdout.write(plot(lengths) + "\n")
    if args.out:
        console.print(as_text(f"histogram written to {args.out} (analyze ... --pack-lengths {args.out})"))
    return 0


def _inputs(args: argparse.Namespace) -> list:
    """What the command reads: the arguments, and the shards they name (a glob's, a folder's), never written over."""
    from tensorcad.packing.corpus.shards import shards_of

    if args.merge:
        return list(args.corpus)
    try:
        return [*args.corpus, *shards_of(args.corpus)]
    except TensorcadError:
        return list(args.corpus)  # counting words what is wrong with them


def _merged(args: argparse.Namespace):
    """``--merge``: the histograms CORPUS names, added up."""
    from tensorcad.packing.corpus.histogram import load_lengths
    from tensorcad.packing.corpus.shards import Counted

    for option in ("engine", "workers", "tokenizer", "by", "length_column", "scheduler", "field", "separator"):
        if getattr(args, option) is not None:
            raise TensorcadError(f"--{option.replace('_', '-')}", "--merge adds histograms up; it counts nothing")
    histograms = [load_lengths(file) for file in args.corpus]
    return Counted(histograms[0].merge(*histograms[1:]), 0, len(histograms), 1)


def _counted(args: argparse.Namespace):
    """The corpus's shards counted: here, in --workers processes, or on --engine's cluster."""
    from tensorcad.packing.corpus.reading import Counting
    from tensorcad.packing.corpus.shards import count_shards, shards_of

    counting = Counting("text" if args.field is None else args.field, "\n\n" if args.separator is None else args.separator,
                        args.by, args.tokenizer, args.length_column)
    if args.scheduler and not args.engine:
        raise TensorcadError("--scheduler", "needs --engine dask")
    if args.engine:
        from tensorcad.packing.corpus.engines import count_on_cluster

        return count_on_cluster(args.corpus, counting, workers=2 if args.workers is None else args.workers,
                                scheduler=args.scheduler)
    workers = 1 if args.workers is None else args.workers
    if args.json or not sys.stderr.isatty():
        return count_shards(args.corpus, counting, workers)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    total = sum(shard.stat().st_size for shard in shards_of(args.corpus))
    with Progress(TextColumn("counting"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("counting", total=total)
        return count_shards(args.corpus, counting, workers, progress=lambda n: bar.advance(task, n))
