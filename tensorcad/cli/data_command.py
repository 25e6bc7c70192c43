"""`tensorcad certify-data CORPUS --loader pkg.module:factory`: the data checks on a corpus and the user's loader.

The corpus is a JSONL file (one document a line, each with its id); the
factory is called with the corpus's path and returns the user's loader (an
iterable of batches: the tokenizer, packer and DataLoader as they train), once,
or twice with ``--resume-at`` (one to save its ``state_dict()``, one to
restore it). The checks are the registry's ``data[coverage]`` and
``data[boundaries]``: the verdict `assert_data_coverage` gives under pytest.
Exit 0 when both pass, 1 when one fails, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from tensorcad.errors import TensorcadError

from .options import EXIT_FAILED, console as _console, integer


class _Corpus:
    """The corpus's documents, read afresh on every pass (counting, then naming a failure's first examples)."""

    def __init__(self, path: str):
        self.path = path
        if not Path(path).is_file():
            raise TensorcadError(path, "is not a file")

    def __iter__(self) -> Iterator[Any]:
        from tensorcad.packing.corpus.reading import records

        for number, record in enumerate(records(self.path), 1):
            if not isinstance(record, dict):
                raise TensorcadError(f"{self.path}:{number}", "a document is a JSON object with its id")
            yield record


def _loader(name: str, corpus: str):
    from tensorcad.runtime.certification import import_factory

    factory = import_factory(name, "--loader")
    return lambda: factory(corpus)


def rank_loader(name: str, corpus: str, rank: int, ranks: int) -> Any:
    """One rank's loader, made where it runs (a cluster's worker imports the factory itself): factory(corpus), or
    factory(corpus, rank, ranks) for one of several ranks."""
    from tensorcad.runtime.certification import import_factory

    factory = import_factory(name, "--loader")
    return factory(corpus) if ranks == 1 else factory(corpus, rank, ranks)


def _on_cluster(args: argparse.Namespace, checks: list[str]) -> list[Any]:
    """data[coverage] with each JSONL shard of CORPUS and each rank's loader a task on a Dask cluster."""
    from functools import partial

    from tensorcad.runtime.certification.data.at_scale import check_coverage_on_cluster
    from tensorcad.runtime.certification.outcome import failed, passed

    if "data[boundaries]" in checks and args.checks:
        raise TensorcadError("--checks", "data[boundaries] reads the first batches here, not on a cluster: "
                                         "drop --engine, or ask for data[coverage]")
    ranks = 1 if args.ranks is None else args.ranks
    if not 1 <= ranks <= 1024:
        raise TensorcadError("--ranks", f"expected 1..1,024 loaders, got {ranks}")
    if not Path(args.corpus).exists():
        raise TensorcadError(args.corpus, "is neither a JSONL file nor a folder of them")
    loaders = [partial(rank_loader, args.loader, args.corpus, rank, ranks) for rank in range(ranks)]
    result = check_coverage_on_cluster([args.corpus], loaders, pieces=args.pieces, policy=args.policy,
                                       max_length=args.max_length, resume_at=args.resume_at, id_key=args.id_field,
                                       length_of=args.length_field, scheduler=args.scheduler,
                                       workers=2 if args.workers is None else args.workers)
    cluster = {key: result.figures[key] for key in ("shards", "loaders", "workers")}
    return [(passed if result.passed else failed)("data[coverage]", result.message,
                                                  {**result.to_json(), "cluster": cluster})]


def certify_data(args: argparse.Namespace) -> int:
    from tensorcad.runtime.certification import DATA_CHECKS, DataSubject, check_names, run_checks

    checks = check_names(args.checks.split(",") if args.checks else None, DATA_CHECKS, "--checks")
    stray = [name for name in checks if name not in DATA_CHECKS]
    if stray:
        raise TensorcadError("--checks", f"{stray[0]!r} is not a data check ({', '.join(DATA_CHECKS)})")
    for option in ("scheduler", "workers", "ranks"):
        if getattr(args, option) is not None and not args.engine:
            raise TensorcadError(f"--{option}", "needs --engine dask")
    if args.engine:
        results = _on_cluster(args, checks)
    else:
        corpus = _Corpus(args.corpus)
        subject = DataSubject(corpus, _loader(args.loader, args.corpus), pieces=args.pieces, policy=args.policy,
                              max_length=args.max_length, resume_at=args.resume_at, id_key=args.id_field,
                              length_of=args.length_field, eos_id=args.eos_id)
        results = run_checks(subject, checks)
    failed = any(c.status == "failed" for c in results)
    if args.json:
        sys.stdout.write(json.dumps({"corpus": args.corpus, "loader": args.loader,
                                     "checks": [c.to_json() for c in results]}, indent=2) + "\n")
        return EXIT_FAILED if failed else 0
    from rich.markup import escape

    console = _console()
    for check in results:
        mark = {"passed": "[green]passed[/]", "failed": "[bold red]FAILED[/]"}.get(check.status, "[yellow]skipped[/]")
        console.print(f"{escape(check.name)} {mark} ({check.seconds:.1f} s): {escape(check.message)}")
    return EXIT_FAILED if failed else 0


def add_certify_data(command) -> None:
    p = command("certify-data", "Certify the data path: every document of CORPUS comes out of the loader once "
                "(across its workers, shuffling and a save and resume), and the boundaries its batches give the "
                "model are the packer's; exit 1 on a failure.", _run,
                epilog="CORPUS: a JSONL file, one document a line with its id. --loader names a function "
                       "factory(corpus_path) returning the loader as you train with it (an iterable of batches; "
                       "with --resume-at it must have state_dict and load_state_dict, as torchdata's "
                       "StatefulDataLoader). docs/data.md says what each check holds.")
    p.add_argument("corpus", metavar="CORPUS", help="a JSONL file, one document a line (with --engine, or a folder "
                                                    "of them)")
    p.add_argument("--loader", required=True, metavar="PKG.MODULE:FACTORY",
                   help="factory(corpus_path) -> the loader of batches")
    p.add_argument("--pieces", choices=("examples", "tokens"), default="examples",
                   help="what a batch names: each example's id (examples, default) or each token's document "
                        "and offset (tokens: the tensorcad_doc and tensorcad_offset columns provenance adds)")
    p.add_argument("--policy", choices=("whole", "split", "truncate"), default="whole",
                   help="whole: each document once, in one piece (default); split: pieces that add up; "
                        "truncate: cut to --max-length, the rest counted as dropped")
    p.add_argument("--max-length", type=integer, metavar="N", help="the truncation --policy truncate declares")
    p.add_argument("--resume-at", type=integer, metavar="STEPS",
                   help="save the loader's state_dict() after STEPS batches and resume a fresh one from it")
    p.add_argument("--id-field", default="id", help="the documents' id field (default id)")
    p.add_argument("--length-field", metavar="FIELD",
                   help="with --pieces tokens: the field whose length is the document's tokens (default input_ids)")
    p.add_argument("--eos-id", type=integer, metavar="ID", help="also read the boundaries an EOS token makes")
    p.add_argument("--checks", metavar="NAMES", help="comma-separated: data[coverage], data[boundaries] (default both)")
    p.add_argument("--engine", choices=("dask",),
                   help="count data[coverage] on a Dask cluster, as lengths --engine dask counts: each JSONL shard "
                        "of CORPUS (a file or a folder) and each rank's loader a task, their digests merged there")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --engine dask: the cluster's scheduler (tcp://HOST:8786); default a local cluster")
    p.add_argument("--workers", type=integer, metavar="N", help="with --engine dask: the local cluster's workers "
                                                                "(default 2)")
    p.add_argument("--ranks", type=integer, metavar="N",
                   help="with --engine dask: N loaders, factory(corpus, rank, N) each, whose batches together are "
                        "the epoch (default 1: factory(corpus))")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


def _run(args: argparse.Namespace) -> int:
    return certify_data(args)


__all__ = ["add_certify_data", "certify_data"]
