"""A counting digest of (document, token span) pieces: ids hashed, never kept, digests merged exactly.

A piece ``[start, end)`` of document ``d`` is written as two events, ``+1`` at
``(d, start)`` and ``-1`` at ``(d, end)``. The running sum of a document's
events over its positions is how many times each of its tokens came out, so
two multisets of pieces cover every token equally exactly when their events,
summed key by key, are equal: the pieces may be cut anywhere (a packer that
splits a document) and the digest does not care in which order they came.
An epoch's pieces are added with one sign and the documents they should cover
with the other; what is left after the sum is only what differs.

Keys are a 64-bit hash of the document id (``hash_ids``: splitmix64 of an
integer id, BLAKE2b of a string, the same in every process, so digests built
on different machines or workers merge) and the position. The position
``PIECES`` (-1) counts pieces instead of tokens, for a policy that wants each
document whole. Memory is 24 bytes per outstanding event, however long the
documents are: the ids and tokens are never kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from tensorcad.errors import TensorcadError

PIECES = -1  # the position at which a document's count of pieces is kept
COMPACT_EVERY = 1 << 20  # pending events before a Tally sums them (about 24 MiB)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele et al.): a bijection of 64-bit integers that scatters neighbours."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _string_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def hash_ids(ids: Any, path: str = "ids") -> np.ndarray:
    """Each document id as a uint64 key: integers (Python, numpy or a tensor's) by splitmix64, strings by BLAKE2b.

    The same id gives the same key in every process (no ``hash()``, which is
    salted per process), so per-shard digests merge.
    """
    if hasattr(ids, "numpy") and not isinstance(ids, np.ndarray):
        ids = ids.detach().cpu().numpy() if hasattr(ids, "detach") else ids.numpy()
    array = np.asarray(ids) if not isinstance(ids, np.ndarray) else ids
    if array.dtype.kind in "iu":
        return _splitmix(array.astype(np.int64).reshape(-1))
    if array.dtype.kind == "b" or array.dtype.kind == "f":
        raise TensorcadError(path, f"document ids are integers or strings, got {array.dtype}")
    out = np.empty(array.size, dtype=np.uint64)
    for i, value in enumerate(array.reshape(-1).tolist()):
        if isinstance(value, str):
            out[i] = _string_key(value)
        elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            out[i] = _splitmix(np.asarray([value], dtype=np.int64))[0]
        else:
            raise TensorcadError(f"{path}[{i}]", f"a document id is an integer or a string, got {value!r}")
    return out


@dataclass(frozen=True)
class Digest:
    """Summed events, sorted by (document key, position), none zero: what one or more tallies counted."""

    keys: np.ndarray  # uint64, a document id's hash
    positions: np.ndarray  # int64, a token position, or PIECES
    counts: np.ndarray  # int64, the events' sum there

    @classmethod
    def empty(cls) -> "Digest":
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def zero(self) -> bool:
        """Every event cancelled: the pieces covered exactly what the documents hold."""
        return len(self.keys) == 0

    def merge(self, *others: "Digest") -> "Digest":
        """The digest of everything each digest counted (per-shard digests merged, in any order or grouping)."""
        return _summed([self.keys, *(o.keys for o in others)], [self.positions, *(o.positions for o in others)],
                       [self.counts, *(o.counts for o in others)])

    def negated(self) -> "Digest":
        return Digest(self.keys, self.positions, -self.counts)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"keys": self.keys, "positions": self.positions, "counts": self.counts}


def _summed(keys: list[np.ndarray], positions: list[np.ndarray], counts: list[np.ndarray]) -> Digest:
    k, p, c = np.concatenate(keys), np.concatenate(positions), np.concatenate(counts)
    if not len(k):
        return Digest.empty()
    order = np.lexsort((p, k))
    k, p, c = k[order], p[order], c[order]
    first = np.r_[True, (k[1:] != k[:-1]) | (p[1:] != p[:-1])]
    starts = np.flatnonzero(first)
    sums = np.add.reduceat(c, starts)
    keep = sums != 0
    return Digest(k[starts][keep], p[starts][keep], sums[keep])


class Tally:
    """Adds pieces as events, summing them every ``COMPACT_EVERY`` so memory holds what is outstanding."""

    def __init__(self, count_pieces: bool = False, compact_every: int = COMPACT_EVERY):
        self.count_pieces = count_pieces
        self.compact_every = compact_every
        self._digest = Digest.empty()
        self._keys: list[np.ndarray] = []
        self._positions: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._pending = 0
        self.pieces = 0  # pieces added with sign +1
        self.tokens = 0  # their tokens

    def add(self, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, sign: int = 1) -> None:
        """Pieces ``[starts, ends)`` of the documents hashed to ``keys``; ``sign`` -1 for what should come out."""
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        ends = np.asarray(ends, dtype=np.int64).reshape(-1)
        n = len(keys)
        ones = np.full(n, sign, dtype=np.int64)
        self._keys += [keys, keys]
        self._positions += [starts, ends]
        self._counts += [ones, -ones]
        if self.count_pieces:
            self._keys.append(keys)
            self._positions.append(np.full(n, PIECES, dtype=np.int64))
            self._counts.append(ones)
        if sign > 0:
            self.pieces += n
            self.tokens += int((ends - starts).sum())
        self._pending += 3 * n
        if self._pending >= self.compact_every:
            self._compact()

    def _compact(self) -> None:
        self._digest = _summed([self._digest.keys, *self._keys], [self._digest.positions, *self._positions],
                               [self._digest.counts, *self._counts])
        self._keys, self._positions, self._counts, self._pending = [], [], [], 0

    def digest(self) -> Digest:
        self._compact()
        return self._digest


@dataclass(frozen=True)
class Differences:
    """What a non-zero digest (pieces seen minus pieces due) says, per document key."""

    keys: np.ndarray  # uint64: each document whose tokens or pieces differ
    lost: np.ndarray  # int64: its tokens due and not seen
    duplicated: np.ndarray  # int64: its tokens seen more often than due
    copies: np.ndarray  # int64: the most times one of its tokens was seen over what was due, plus one
    extra_pieces: np.ndarray  # int64: pieces seen minus pieces due (counted only where pieces are)

    @property
    def lost_tokens(self) -> int:
        return int(self.lost.sum())

    @property
    def duplicated_tokens(self) -> int:
        return int(self.duplicated.sum())


def differences(digest: Digest) -> Differences:
    """Per document: tokens lost, tokens duplicated, the most copies, and the pieces over or under those due.

    The digest is sorted by (key, position); a document's running sum of
    events is the excess count of each token from one event to the next, so the
    tokens lost are the widths where it is negative, those duplicated where it
    is positive. Every piece adds +s and -s, so each document's events sum to
    zero: the running sum over the whole digest is back at 0 where a document
    starts and at its last event, and the width from there (to the next
    document) weighs nothing.
    """
    pieces = digest.positions == PIECES
    k, p, c = digest.keys[~pieces], digest.positions[~pieces], digest.counts[~pieces]
    all_keys = np.unique(digest.keys)
    lost = np.zeros(len(all_keys), np.int64)
    duplicated = np.zeros(len(all_keys), np.int64)
    copies = np.ones(len(all_keys), np.int64)
    extra = np.zeros(len(all_keys), np.int64)
    if len(k):
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        excess = np.cumsum(c)  # the count over what was due from this event's position to the next
        width = np.r_[np.diff(p), 0]
        where = np.searchsorted(all_keys, k[starts])
        lost[where] = np.add.reduceat(np.maximum(-excess, 0) * width, starts)
        duplicated[where] = np.add.reduceat(np.maximum(excess, 0) * width, starts)
        copies[where] = 1 + np.maximum.reduceat(np.where(width > 0, excess, 0), starts).clip(min=0)
    if pieces.any():
        extra[np.searchsorted(all_keys, digest.keys[pieces])] = digest.counts[pieces]
    return Differences(all_keys, lost, duplicated, copies, extra)


def first_named(ids: Iterable[Any], groups: list[np.ndarray], path: str = "ids",
                chunk: int = 4096) -> list[Any]:
    """For each group of keys, the first id in ``ids``'s order whose key is in it (None if none is).

    Names a failure's first example: reads ``ids`` once more in chunks, only
    hashing them as when they were counted, and stops once every group has one.
    """
    groups = [np.unique(np.asarray(g, dtype=np.uint64)) for g in groups]
    names: list[Any] = [None] * len(groups)
    found = [len(g) == 0 for g in groups]
    batch: list[Any] = []

    def look(batch: list[Any]) -> None:
        plain = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in batch)
        keys = hash_ids(np.asarray(batch, dtype=np.int64 if plain else object), path)
        for g, group in enumerate(groups):
            if not found[g]:
                hits = np.flatnonzero(np.isin(keys, group))
                if len(hits):
                    names[g], found[g] = batch[int(hits[0])], True

    for value in ids:
        batch.append(value)
        if len(batch) >= chunk:
            look(batch)
            batch = []
            if all(found):
                return names
    if batch:
        look(batch)
    return names

POLICIES = ("whole", "split", "truncate")


@dataclass(frozen=True)
class CoverageCount:
    """One side of a coverage count: a digest and what it counted (merged exactly, per shard or per rank)."""

    digest: Digest  # what was seen, less what was due
    units: int = 0  # the units (tokens or examples) seen
    due: int = 0  # the units due
    documents: int = 0
    dropped: int = 0  # units cut by a declared truncation
    batches: int = 0
    error: str | None = None  # a loader that raised: one line

    def merge(self, *others: "CoverageCount") -> "CoverageCount":
        parts = (self, *others)
        return CoverageCount(self.digest.merge(*(o.digest for o in others)), sum(p.units for p in parts),
                       sum(p.due for p in parts), sum(p.documents for p in parts), sum(p.dropped for p in parts),
                       sum(p.batches for p in parts), next((p.error for p in parts if p.error), None))


def merge_counted(*parts: CoverageCount) -> CoverageCount:
    """Counts added exactly (a Dask tree's merge task)."""
    return parts[0].merge(*parts[1:])


def _documents(documents: Iterable[Any], unit: str, id_key: str, length_of: Callable[[Any], int] | str | None,
               chunk: int = 4096):
    """(ids, lengths) of the corpus in chunks; an example is one unit long."""
    ids: list[Any] = []
    lengths: list[int] = []
    for i, doc in enumerate(documents):
        if isinstance(doc, Mapping):
            if id_key not in doc:
                raise TensorcadError(f"documents[{i}]", f"a document has no {id_key!r} field")
            ids.append(doc[id_key])
        else:
            ids.append(doc)
        if unit == "example":
            lengths.append(1)
        elif callable(length_of):
            lengths.append(int(length_of(doc)))
        elif isinstance(doc, Mapping) and (length_of or "input_ids") in doc:
            lengths.append(len(doc[length_of or "input_ids"]))
        else:
            raise TensorcadError(f"documents[{i}]", "counting tokens needs each document's length: give "
                                                    "length_of (a field or a function) or an 'input_ids' field")
        if len(ids) >= chunk:
            yield ids, lengths
            ids, lengths = [], []
    if ids:
        yield ids, lengths



def _hashed(ids: list[Any], path: str) -> np.ndarray:
    plain = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in ids)
    return hash_ids(np.asarray(ids, dtype=np.int64 if plain else object), path)


def due_of(documents: Iterable[Any], unit: str = "example", policy: str = "whole", max_length: int | None = None,
           id_key: str = "id", length_of: Callable[[Any], int] | str | None = None) -> CoverageCount:
    """What ``documents`` should give under ``policy``: each document ``[0, length)`` (cut to ``max_length``).

    CoverageCount with sign -1, so that merged with what a loader gave it leaves only what differs.
    A document is a mapping with ``id_key`` (or the id itself); its length is
    1 when the unit is the example, else ``length_of`` (a field whose length it
    is, or a function) or its ``input_ids``.
    """
    due = Tally(count_pieces=policy == "whole")
    n = dropped = 0
    for ids, lengths in _documents(documents, unit, id_key, length_of):
        array = np.asarray(lengths, dtype=np.int64)
        if policy == "truncate":
            cut = np.minimum(array, max_length)
            dropped += int((array - cut).sum())
            array = cut
        due.add(_hashed(ids, "documents"), np.zeros(len(ids), np.int64), array)
        n += len(ids)
    return CoverageCount(due.digest().negated(), due=due.tokens, documents=n, dropped=dropped)


__all__ = ["COMPACT_EVERY", "PIECES", "POLICIES", "CoverageCount", "Differences", "Digest", "Tally", "differences", "due_of",
           "first_named", "hash_ids", "merge_counted"]
