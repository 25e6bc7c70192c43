"""Which (document, token span) pieces a batch holds: read from the ids a loader carries, never guessed.

A loader of whole examples carries each example's id (``Examples``: a column
such as ``"id"``); a tokenizer -> packer pipeline carries, for every token, the
document it came from and its offset in it (``Tokens``: the two columns
``provenance`` adds to each tokenised example before the user's own packer
runs, so that TRL's ``pack_dataset``, a torchtitan-style concatenation or a
plain collator packs them beside ``input_ids`` exactly as it packs the ids).
A run of one document's consecutive offsets is one piece; a negative document
id is padding. Batches may hold numpy arrays, torch tensors or lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.digest import hash_ids

DOC_KEY = "tensorcad_doc"  # the column of each token's document id (an integer; -1 on padding)
OFFSET_KEY = "tensorcad_offset"  # the column of each token's offset in its document
PAD_DOC = -1


def provenance(doc: int, length: int) -> dict[str, list[int]]:
    """The two columns to add to a tokenised example of ``length`` tokens, so the packer carries where each came from."""
    if isinstance(doc, bool) or not isinstance(doc, (int, np.integer)) or doc < 0:
        raise TensorcadError("doc", f"a document's provenance id is a non-negative integer, got {doc!r}")
    return {DOC_KEY: [int(doc)] * int(length), OFFSET_KEY: list(range(int(length)))}


def _array(batch: Mapping, key: str, path: str) -> np.ndarray:
    if not isinstance(batch, Mapping):
        raise TensorcadError(path, f"a batch is a mapping of columns, got {type(batch).__name__}")
    if key not in batch:
        raise TensorcadError(f"{path}.{key}", f"the batch has no {key!r} column (it has {sorted(map(str, batch))})")
    value = batch[key]
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


@dataclass(frozen=True)
class Pieces:
    """A batch's pieces: each document id's key and its span ``[starts, ends)``."""

    keys: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


@dataclass(frozen=True)
class Examples:
    """Each example of a batch is one whole document, named by its ``key`` column: the unit is the example."""

    key: str = "id"
    unit: str = "example"

    def __call__(self, batch: Any, path: str = "batch") -> Pieces:
        ids = _array(batch, self.key, path).ravel()
        n = len(ids)
        return Pieces(hash_ids(ids, f"{path}.{self.key}"),  # integers by splitmix64, strings by BLAKE2b
                      np.zeros(n, np.int64), np.ones(n, np.int64))


@dataclass(frozen=True)
class Tokens:
    """Each token names its document (``doc_key``) and offset (``offset_key``); a run of consecutive offsets is a piece."""

    doc_key: str = DOC_KEY
    offset_key: str = OFFSET_KEY
    unit: str = "token"

    def __call__(self, batch: Any, path: str = "batch") -> Pieces:
        docs = _array(batch, self.doc_key, path)
        offsets = _array(batch, self.offset_key, path)
        if docs.shape != offsets.shape:
            raise TensorcadError(f"{path}.{self.offset_key}", f"shape {offsets.shape} differs from "
                                                              f"{self.doc_key}'s {docs.shape}")
        if docs.dtype.kind not in "iu" or offsets.dtype.kind not in "iu":
            raise TensorcadError(f"{path}.{self.doc_key}", f"document ids and offsets are integers, got "
                                                           f"{docs.dtype} and {offsets.dtype}")
        grid = docs.reshape(-1, docs.shape[-1]) if docs.ndim else docs.reshape(1, 1)
        off = offsets.reshape(grid.shape).astype(np.int64)
        grid = grid.astype(np.int64)
        valid = grid >= 0
        begins = valid.copy()
        begins[:, 1:] &= ~valid[:, :-1] | (grid[:, 1:] != grid[:, :-1]) | (off[:, 1:] != off[:, :-1] + 1)
        lasts = valid.copy()
        lasts[:, :-1] &= ~valid[:, 1:] | begins[:, 1:]
        flat_b, flat_l = begins.ravel(), lasts.ravel()
        return Pieces(hash_ids(grid.ravel()[flat_b], f"{path}.{self.doc_key}"),
                      off.ravel()[flat_b], off.ravel()[flat_l] + 1)


Reader = Callable[[Any], Pieces]


def reader_of(pieces: Any) -> Reader:
    """``"examples"`` / ``"tokens"`` (the default columns) or a reader (``Examples(key)``, ``Tokens(...)``, a callable)."""
    if pieces == "examples":
        return Examples()
    if pieces == "tokens":
        return Tokens()
    if callable(pieces):
        return pieces
    raise TensorcadError("pieces", f"expected 'examples', 'tokens' or a reader of a batch, got {pieces!r}")


__all__ = ["DOC_KEY", "OFFSET_KEY", "PAD_DOC", "Examples", "Pieces", "Reader", "Tokens", "provenance", "reader_of"]
