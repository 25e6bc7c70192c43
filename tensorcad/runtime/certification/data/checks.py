"""The data path as registry checks: a ``DataSubject`` (a corpus and the user's loader) and what each check runs.

``data[coverage]`` runs one epoch (saved and resumed where asked) through
``check_coverage``; ``data[boundaries]`` holds the loader's first batches to
the packer's own lengths, read from each batch (the provenance column, or TRL's
``seq_lengths``) unless the subject says how. The registry, the CLI
(``tensorcad certify-data``) and the harness run these, so they give one verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Iterable, Mapping

from tensorcad.errors import TensorcadError

from ..outcome import Check, Skipped, failed, passed
from .boundaries import check_data_boundaries, provenance_lengths
from .coverage import check_coverage, raised_line
from .pieces import DOC_KEY

DATA_CHECKS = ("data[coverage]", "data[boundaries]")
FIRST_BATCHES = 4  # batches data[boundaries] reads: a packer's fault shows in its first rows


@dataclass(frozen=True)
class DataSubject:
    """What the data checks read: the corpus, the user's loader and how to read its batches."""

    documents: Iterable[Any]
    loader: Any  # an iterable of batches, or a function making one (a resume needs the function)
    pieces: Any = "examples"
    policy: str = "whole"
    max_length: int | None = None
    resume_at: int | None = None
    id_key: str = "id"
    length_of: Callable[[Any], int] | str | None = None
    eos_id: int | None = None
    lengths_of: Callable[[Any], list[list[int]]] | None = None  # the packer's lengths of a batch
    first_batches: int = FIRST_BATCHES


def _lengths(subject: DataSubject, batch: Any) -> list[list[int]]:
    if subject.lengths_of is not None:
        return subject.lengths_of(batch)
    if isinstance(batch, Mapping) and DOC_KEY in batch:
        return provenance_lengths(batch[DOC_KEY])
    if isinstance(batch, Mapping) and "seq_lengths" in batch:
        return [list(row) for row in batch["seq_lengths"]]
    raise Skipped(f"the batches carry no packer's lengths ({DOC_KEY!r} or 'seq_lengths'): give lengths_of")


def coverage_check(subject: DataSubject) -> Check:
    result = check_coverage(subject.documents, subject.loader, pieces=subject.pieces, policy=subject.policy,
                            max_length=subject.max_length, resume_at=subject.resume_at, id_key=subject.id_key,
                            length_of=subject.length_of)
    return (passed if result.passed else failed)("data[coverage]", result.message, result.to_json())


def data_boundaries_check(subject: DataSubject) -> Check:
    loader = subject.loader() if callable(subject.loader) else subject.loader
    try:
        batches = list(islice(iter(loader), subject.first_batches))
    except TensorcadError:
        raise
    except Exception as raised:  # the loader's own failure, contained as one line
        return failed("data[boundaries]", f"the loader raised: {raised_line(raised)}")
    if not batches:
        raise Skipped("the loader gave no batch")
    results = [check_data_boundaries(b, _lengths(subject, b), eos_id=subject.eos_id) for b in batches]
    bad = [(i, r) for i, r in enumerate(results) if not r.passed]
    figures = {"batches": [r.to_json() for r in results]}
    if bad:
        i, first = bad[0]
        return failed("data[boundaries]", f"batch {i} of the first {len(batches)}: {first.message}", figures)
    forms = sorted({f for r in results for f in r.forms})
    documents = sum(r.documents for r in results)
    return passed("data[boundaries]", f"the first {len(batches)} batches' {', '.join(forms)} hold the packer's "
                                      f"{documents:,} documents", figures)


__all__ = ["DATA_CHECKS", "FIRST_BATCHES", "DataSubject", "coverage_check", "data_boundaries_check"]
