"""The runtime's commands: `tensorcad verify | certify | smoke-train | trace`.

`cli.py` parses the options and dispatches here lazily, so torch loads only for
these commands. Each returns an exit code: 0 when every check passes, 1 when
one fails; bad input raises TensorcadError, which `cli.main` prints as one line
and turns into 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from tensorcad.errors import TensorcadError

from .options import EXIT_FAILED, console as _console, settings_option


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _status_text(status: str) -> str:
    return {"passed": "[green]passed[/]", "failed": "[bold red]FAILED[/]", "skipped": "[yellow]skipped[/]"}[status]


def _checks_table(title: str, rows: list[tuple[str, str, str, str]]):
    from rich.markup import escape
    from rich.table import Table

    # check names such as isolation[eager] are text, not rich markup
    table = Table("check", "status", "seconds", "what it showed", title=escape(title), box=None,
                  title_justify="left")
    for name, status, seconds, message in rows:
        table.add_row(escape(name), _status_text(status), seconds, escape(message))
    return table


def _with_progress(quiet: bool, total: int, work):
    """Run work(progress): a rich bar on a terminal, plain lines on stderr otherwise, nothing under --json.

    ``progress(name, done, count, note="")`` is what the runtime calls: the step it is
    on, how many there are, and a note such as the current loss.
    """
    if quiet:
        return work(None)
    if not sys.stderr.isatty():
        return work(_PlainProgress(sys.stderr))
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=total, note="")

        def progress(name: str, done: int, count: int, note: str = "") -> None:
            bar.update(task, description=name, completed=done, total=count, note=note)

        return work(progress)


class _PlainProgress:
    """Progress as plain lines, for logs and CI: a line when the stage changes and every tenth of it."""

    def __init__(self, out, every_seconds: float = 30.0):
        self.out, self.every = out, every_seconds
        self.stage, self.started, self.last, self.shown = None, 0.0, 0.0, -1

    def __call__(self, name: str, done: int, count: int, note: str = "") -> None:
        import time

        now = time.monotonic()
        if self.stage is None:
            self.started = now  # one clock for the run: stage names change at every check
        if name != self.stage:
            self.stage, self.last, self.shown = name, 0.0, -1
        tenth = done * 10 // max(count, 1)
        if tenth == self.shown and now - self.last < self.every:
            return
        self.shown, self.last = tenth, now
        elapsed = now - self.started
        eta = f", about {elapsed / done * (count - done):.0f} s left" if 0 < done < count else ""
        note = f", {note}" if note else ""
        self.out.write(f"tensorcad: {name} {done}/{count}{note}, {elapsed:.0f} s{eta}\n")
        self.out.flush()


# -- verify ----------------------------------------------------------------------------


def _settings_line(settings, design, params: int | None = None) -> str:
    """What a run certified at: the operating point and scale, printed above its table.

    ``params``: what the built model counted (verify), said once beside the size asked for."""
    seq = settings.for_design(design).seq
    pack = ("packing off" if settings.pack is None
            else f"documents averaging {settings.pack:g} tokens (spread {settings.spread:g})")
    scale = (f"scaled to about {settings.params:,} parameters" if params is None
             else f"scaled to {params:,} parameters (asked for about {settings.params:,})")
    return (f"at seq {seq}, {pack}, {scale}, seed {settings.seed}, "
            f"{settings.rows} rows; block counts over {settings.block_rows} engine rows")


def _print_failures(console, checks) -> None:
    from rich.markup import escape

    for c in checks:
        if c.status == "failed":
            console.print(f"[bold red]{escape(c.name)} failed:[/] {escape(c.message)}")


def verify(args: argparse.Namespace) -> int:
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.runtime.certification.verification import CHECKS, verify as run_verify

    design = load(args.design)
    settings = settings_option(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = _with_progress(args.json, len(CHECKS), lambda progress: run_verify(
            design, settings=settings, progress=progress))
    if args.json:
        _print_json(report.to_json())
    else:
        title = f"{report.design} {_settings_line(report.settings, design, report.params)}"
        console = _console()
        console.print(_checks_table(title, [(c.name, c.status, f"{c.seconds:.1f}", c.message)
                                            for c in report.checks]))
        _print_failures(console, report.checks)
    return 0 if report.passed else EXIT_FAILED


# -- certify ---------------------------------------------------------------------------


def certify(args: argparse.Namespace) -> int:
    """The checks `pytest --tensorcad` runs (the runtime's registry), without pytest.

    A design gets the design checks; a Hugging Face model directory (or ``--model``)
    gets the model certificates, run on transformers' model with the user's weights.
    """
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.hf import looks_like_config
    from tensorcad.runtime.certification.registry import MODEL_CHECKS, run_checks
    from tensorcad.views.answers import certify_checks, certify_subject

    if not args.designs and args.model is None:
        raise TensorcadError("certify", "name a design, a model directory or --model pkg.module:factory")
    settings = settings_option(args)
    imported = args.documents or args.positions  # the design tensorcad imports, not the user's model
    models = [name for name in args.designs if looks_like_config(name) and not imported]
    # every name checked before any runs
    designs = [load(name, documents=args.documents, positions=args.positions) for name in args.designs
               if name not in models]
    # bad input (a seq the scaled model cannot hold) is one line and exit 2, not a table of failures
    subjects = [certify_subject(design, settings) for design in designs]
    pretrained = [_model_subject(name, settings, args) for name in models]
    if args.model is not None:
        pretrained.append(_model_subject(args.model, settings, args, factory=True))
    runs = [(s, certify_checks(export=args.export), s.design.name) for s in subjects]
    runs += [(p.subject, MODEL_CHECKS, p.subject.name) for p in pretrained]
    results = []
    for subject, names, label in runs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            checks = _with_progress(args.json, len(names), lambda progress: run_checks(
                subject, names, _prefixed(label, progress)))
        results.append((subject, checks))
    failed = any(c.status == "failed" for _, checks in results for c in checks)
    if args.json:
        from tensorcad.views.answers import certificate

        _print_json([certificate(s, checks) for s, checks in results])
        return EXIT_FAILED if failed else 0
    console = _console()
    from rich.markup import escape

    for index, (subject, checks) in enumerate(results):
        model = index >= len(subjects)
        if model:
            title = _model_title(pretrained[index - len(subjects)])
        else:
            title = f"{subject.design.name} {_settings_line(subject.settings, subject.design)}"
        console.print(_checks_table(title, [(c.name, c.status, f"{c.seconds:.1f}", c.message) for c in checks]))
        _print_failures(console, checks)
        if model and any(c.status == "failed" for c in checks):
            from tensorcad.runtime.certification.subjects.pretrained import hints

            for line in hints(pretrained[index - len(subjects)]):
                console.print(f"[bold]what to change:[/] {escape(line)}")
    if subjects:
        console.print(escape("golden[analysis], golden[rules], golden[codegen] run under pytest only "
                             "(pytest --tensorcad DIR): goldens are snapshot files a test run owns"))
    return EXIT_FAILED if failed else 0


def _model_subject(name: str, settings, args: argparse.Namespace, factory: bool = False):
    """A model directory or ``pkg.module:factory`` as the model certificates' subject."""
    from tensorcad.runtime.certification.subjects.pretrained import factory_subject, made_by, pretrained_subject

    collator = made_by(args.collator, "--collator") if args.collator else None
    if factory:
        return factory_subject(name, settings, packing=args.packing, collator=collator)
    return pretrained_subject(name, settings, packing=args.packing, replica=args.replica, collator=collator)


def _model_title(pretrained) -> str:
    s = pretrained.subject.settings
    pack = ("packing off" if s.pack is None
            else f"documents averaging {s.pack:g} tokens (spread {s.spread:g})")
    packed = (f"packed by {pretrained.packing}" if pretrained.subject.collator is None
              else "packed by the collator")
    return (f"{pretrained.subject.name}: transformers' {type(pretrained.model).__name__}, {pretrained.weights}, "
            f"{packed}, called {pretrained.subject.call_line}; at seq {s.seq}, {pack}, seed {s.seed}, {s.rows} rows")


def _prefixed(name: str, progress):
    if progress is None:
        return None
    return lambda check, done, count: progress(f"{name}: {check}", done, count)


# -- smoke-train -----------------------------------------------------------------------


def smoke_train(args: argparse.Namespace) -> int:
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.runtime.training.smoke import smoke_train as run_training

    design = load(args.design)
    for option in ("rows", "seq"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            raise TensorcadError(f"--{option}", f"expected an integer >= 1, got {getattr(args, option)}")
    if getattr(args, "corpus", None) is not None:
        from tensorcad.runtime.training.corpus import train_on_corpus

        def run_training(design, **options):  # the same options, on the corpus's documents
            return train_on_corpus(design, args.corpus, tokenizer=args.tokenizer, field=args.field,
                                   strategy=args.pack_strategy or "stream", **options)
    elif getattr(args, "tokenizer", None) is not None or getattr(args, "pack_strategy", None) is not None:
        raise TensorcadError("--corpus", "--tokenizer and --pack-strategy need a corpus to read")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = _with_progress(args.json, args.steps, lambda progress: run_training(
            design, steps=args.steps, params=args.params, seed=args.seed, rows=args.rows, seq=args.seq,
            progress=progress))
    if args.json:
        _print_json(result.to_json())
    else:
        console = _console()
        console.print(result.summary(), markup=False)
    return 0 if result.passed else EXIT_FAILED


# -- trace -----------------------------------------------------------------------------


def trace(args: argparse.Namespace) -> int:
    from tensorcad.hf import load_design as load  # a Hugging Face config is a design too
    from tensorcad.runtime.training.tracing import render, trace as run_trace

    design = load(args.design)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_trace(design, seq=args.seq, params=args.params)
    if args.json:
        _print_json(result.to_json())
    else:
        _console().print(render(result))
    return 0 if result.passed else EXIT_FAILED
