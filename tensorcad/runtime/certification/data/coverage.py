"""``data[coverage]``: every (document, token span) of an epoch comes out of the user's loader once.

Or as the declared policy says: ``whole`` (each document once, in one
piece), ``split`` (pieces of a document may land in different rows; they must
add up to it, each token once), ``truncate`` (a document is cut to
``max_length``; what is cut is counted as dropped, and nothing past the cut may
come out). With ``resume_at``, the loader's ``state_dict()`` is saved after that
many batches, a fresh loader restores it and runs to the end, and the two
parts together must still be the epoch (huggingface/datasets #7901: a shuffled
resume loses about a shuffle buffer).

The epoch is counted, not kept: each piece is two events in a
``packing.corpus.digest.Tally`` under its document id's 64-bit hash, the
documents due are subtracted, and only what differs is left. A failure counts
the tokens (or examples) lost and duplicated and names the first document of
each, in the corpus's order, by reading the corpus's ids once more.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from tensorcad.errors import TensorcadError, one_line
from tensorcad.packing.corpus.digest import POLICIES, CoverageCount, Tally, differences, due_of, first_named

from .pieces import reader_of



@dataclass(frozen=True)
class CoverageResult:
    """One epoch through the loader, held to the documents it should hold."""

    policy: str
    unit: str  # "token" or "example": what lost and duplicated count
    documents: int
    due: int  # units the epoch should hold under the policy
    seen: int  # units the loader gave
    lost: int
    duplicated: int
    documents_lost: int  # documents with a unit lost
    documents_duplicated: int  # documents with a unit seen more than once
    most_copies: int  # the most times one unit came out
    split_documents: int = 0  # under "whole": documents that came out in more than one piece
    dropped: int = 0  # under "truncate": units cut by the declared policy
    first_lost: Any = None
    first_duplicated: Any = None
    batches: int = 0
    resumed_at: int | None = None
    error: str | None = None  # the loader raised: one line naming the library
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.error is None and self.lost == 0 and self.duplicated == 0 and self.split_documents == 0

    @property
    def message(self) -> str:
        where = f" (saved after {self.resumed_at} batches and resumed)" if self.resumed_at is not None else ""
        if self.error is not None:
            return f"the loader raised{where}: {self.error}"
        units = f"{self.unit}s"
        if self.passed:
            drop = f"; {self.dropped:,} {units} dropped by the declared truncation" if self.policy == "truncate" else ""
            return (f"every {self.unit} of {self.documents:,} documents came out once ({self.seen:,} {units} in "
                    f"{self.batches:,} batches){where}{drop}")
        parts = []
        if self.lost:
            parts.append(f"{self.lost:,} {units} lost from {self.documents_lost:,} documents "
                         f"(first: {self.first_lost!r})")
        if self.duplicated:
            parts.append(f"{self.duplicated:,} {units} duplicated in {self.documents_duplicated:,} documents, "
                         f"up to {self.most_copies} copies (first: {self.first_duplicated!r})")
        if self.split_documents:
            parts.append(f"{self.split_documents:,} documents came out in pieces under the policy 'whole'")
        return f"of {self.due:,} {units} due from {self.documents:,} documents{where}: " + "; ".join(parts)

    def to_json(self) -> dict:
        return {"passed": self.passed, "message": self.message, "policy": self.policy, "unit": self.unit,
                "documents": self.documents, "due": self.due, "seen": self.seen, "lost": self.lost,
                "duplicated": self.duplicated, "documents_lost": self.documents_lost,
                "documents_duplicated": self.documents_duplicated, "most_copies": self.most_copies,
                "split_documents": self.split_documents, "dropped": self.dropped,
                "first_lost": _plain(self.first_lost), "first_duplicated": _plain(self.first_duplicated),
                "batches": self.batches, "resumed_at": self.resumed_at, "error": self.error,
                "seconds": round(self.seconds, 3)}


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def raised_line(error: BaseException) -> str:
    """One line for an exception a loader raised: its type, the library and frame it came from, its message.

    A DataLoader worker's exception arrives re-raised with the worker's
    traceback as text; the last frame of that text (or of the exception's own
    traceback) names the library.
    """
    text = str(error)
    frames = _FRAME.findall(text) or [(f.filename, str(f.lineno), f.name)
                                      for f in traceback.extract_tb(error.__traceback__)]
    last_line = text.strip().splitlines()[-1] if text.strip() else type(error).__name__
    message = last_line.split(": ", 1)[1] if last_line.startswith(type(error).__name__ + ":") else last_line
    where = ""
    if frames:
        filename, line, function = frames[-1]
        parts = filename.replace("\\", "/").split("/")
        package = parts.index("site-packages") + 1 if "site-packages" in parts else max(len(parts) - 2, 0)
        library = parts[package] if package < len(parts) - 1 else parts[-1]
        where = f" in {library} ({'/'.join(parts[package:])}:{line}, {function})"
    worker = re.search(r"in DataLoader worker process (\d+)", text)
    worker_note = f" in DataLoader worker {worker.group(1)}" if worker else ""
    return one_line(f"{type(error).__name__}{where}{worker_note}: {message}")


def _ids(documents: Iterable[Any], id_key: str):
    for doc in documents:
        yield doc[id_key] if isinstance(doc, Mapping) else doc


def _run(loader: Any, read, tally: Tally, resume_at: int | None) -> int:
    """Feeds every batch of the epoch (saving and resuming where asked) to the tally; returns the batches."""
    if resume_at is None:
        batches = 0
        for batch in (loader() if callable(loader) else loader):
            p = read(batch)
            tally.add(p.keys, p.starts, p.ends)
            batches += 1
        return batches
    first = loader()
    iterator = iter(first)
    for step in range(resume_at):
        try:
            batch = next(iterator)
        except StopIteration:
            raise TensorcadError("resume_at", f"the epoch ended after {step} batches, before the save at "
                                              f"{resume_at}") from None
        p = read(batch)
        tally.add(p.keys, p.starts, p.ends)
    state = first.state_dict()
    del iterator, first  # the first run's workers end here, as a killed job's would
    second = loader()
    second.load_state_dict(state)
    batches = resume_at
    for batch in second:
        p = read(batch)
        tally.add(p.keys, p.starts, p.ends)
        batches += 1
    return batches


def checked_settings(policy: str, max_length: int | None, resume_at: int | None, loader: Any) -> None:
    if policy not in POLICIES:
        raise TensorcadError("policy", f"expected one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "truncate" and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise TensorcadError("max_length", f"the policy 'truncate' needs a positive max_length, got {max_length!r}")
    if resume_at is not None and (isinstance(resume_at, bool) or not isinstance(resume_at, int) or resume_at < 0):
        raise TensorcadError("resume_at", f"expected a number of batches >= 0, got {resume_at!r}")
    if resume_at is not None and not callable(loader):
        raise TensorcadError("loader", "a resume needs a function making the loader (one to save, one to restore)")


def seen_of(loader: Any, pieces: Any = "examples", policy: str = "whole", resume_at: int | None = None) -> CoverageCount:
    """What one loader gave in an epoch (saved and resumed where asked), counted; a loader that raises, one line."""
    read = reader_of(pieces)
    seen = Tally(count_pieces=policy == "whole")
    error = None
    try:
        batches = _run(loader, read, seen, resume_at)
    except TensorcadError:
        raise
    except Exception as raised:  # the loader's own failure is the finding, contained as one line
        error, batches = raised_line(raised), 0
    return CoverageCount(seen.digest(), seen.tokens, batches=batches, error=error)


def unit_of(pieces: Any) -> str:
    return getattr(reader_of(pieces), "unit", "token")


def verdict(counted: CoverageCount, *, policy: str, unit: str, resume_at: int | None = None,
            name: Callable[[list[np.ndarray]], list[Any]] | None = None, seconds: float = 0.0) -> CoverageResult:
    """The result of what was seen merged with what was due (``CoverageCount.merge``, per shard or rank, in any order).

    ``name`` finds the first id, in the corpus's order, of each group of keys.
    """
    diff = differences(counted.digest)
    lost_keys, dup_keys = diff.keys[diff.lost > 0], diff.keys[diff.duplicated > 0]
    first_lost = first_dup = None
    if counted.error is None and name is not None and (len(lost_keys) or len(dup_keys)):
        first_lost, first_dup = name([lost_keys, dup_keys])
    split = int(((diff.extra_pieces > 0) & (diff.lost == 0) & (diff.duplicated == 0)).sum())
    return CoverageResult(
        policy=policy, unit=unit, documents=counted.documents, due=counted.due, seen=counted.units,
        lost=diff.lost_tokens, duplicated=diff.duplicated_tokens,
        documents_lost=len(lost_keys), documents_duplicated=len(dup_keys),
        most_copies=int(diff.copies.max(initial=1)), split_documents=split if policy == "whole" else 0,
        dropped=counted.dropped, first_lost=first_lost, first_duplicated=first_dup, batches=counted.batches,
        resumed_at=resume_at, error=counted.error, seconds=seconds,
        figures={"digest_events": len(counted.digest)})


def check_coverage(documents: Iterable[Any], loader: Any, *, pieces: Any = "examples", policy: str = "whole",
                   max_length: int | None = None, resume_at: int | None = None, id_key: str = "id",
                   length_of: Callable[[Any], int] | str | None = None) -> CoverageResult:
    """One epoch of ``loader`` held to ``documents``: each unit once, as ``policy`` says.

    ``documents``: the corpus (mappings with ``id_key``, or the ids
    themselves), read once to count and once more only to name a failure's
    first examples. ``loader``: an iterable of batches, or a function making
    one (needed for ``resume_at``: the loader must have ``state_dict`` and
    ``load_state_dict``, as torchdata's ``StatefulDataLoader``). ``pieces``:
    ``"examples"``, ``"tokens"`` or a reader (``Examples``, ``Tokens``).
    """
    checked_settings(policy, max_length, resume_at, loader)
    unit = unit_of(pieces)
    started = time.perf_counter()
    seen = seen_of(loader, pieces, policy, resume_at)
    due = due_of(documents, unit, policy, max_length, id_key, length_of)
    return verdict(seen.merge(due), policy=policy, unit=unit, resume_at=resume_at,
                   name=lambda groups: first_named(_ids(documents, id_key), groups, "documents"),
                   seconds=time.perf_counter() - started)


__all__ = ["CoverageResult", "POLICIES", "check_coverage", "raised_line", "seen_of", "unit_of", "verdict"]
