"""Plain-text corpora: documents a separator divides, read a chunk at a time in bounded memory.

A document is held while it is read and yielded as its text once its separator
(or the file's end) comes. One longer than ``FOLD_BYTES`` is never held whole
where only its bytes or words are wanted (``counted=True``: ``lengths --by bytes``
or ``whitespace``): it is counted chunk by chunk as it arrives, a word that
straddles two chunks counted once, and yielded as a ``LongDocument``, so a
300 MB document costs a few MiB however long it is. Where its text is wanted (a
tokenizer, ``documents``), a document past ``MAX_DOCUMENT_BYTES`` is refused:
holding it was the whole file in memory.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tensorcad.errors import TensorcadError

CHUNK = 1 << 20  # bytes of plain text read at a time
FOLD_BYTES = 1 << 23  # past this, a document only counted is counted as it comes instead of held
# One document past this is no document a tokenizer should see whole (a row holds at most 2**24 tokens): the
# corpus's separator or lines are wrong, and reading on would hold the whole file in memory.
MAX_DOCUMENT_BYTES = 1 << 28


class LongDocument:
    """A document too long to hold, counted as it was read: its UTF-8 bytes and whitespace-separated words."""

    __slots__ = ("_in_word", "bytes", "words")

    def __init__(self) -> None:
        self.bytes, self.words, self._in_word = 0, 0, False

    def add(self, text: str) -> None:
        """The document's next piece; a word the last piece ended inside and this one goes on is one word."""
        for start in range(0, len(text), CHUNK):  # a slice at a time: split's list of a short-worded piece is big
            self._add(text[start:start + CHUNK])

    def _add(self, text: str) -> None:
        self.bytes += len(text.encode("utf-8"))
        words = len(text.split())  # str.split and str.isspace agree on what whitespace is (Unicode's)
        if words and self._in_word and not text[0].isspace():
            words -= 1
        self.words += words
        self._in_word = not text[-1].isspace()


def too_long(where: str) -> TensorcadError:
    return TensorcadError(where, f"a document of more than {MAX_DOCUMENT_BYTES >> 20:,} MiB; no row could hold it "
                                 "(is --separator or the JSONL's line right? --by bytes or whitespace counts "
                                 "a longer one)")


def texts(path: Path, opener: Callable[[Path], BinaryIO], separator: str, seen: Callable[[int], None],
          counted: bool = False) -> Iterator[str | LongDocument]:
    """The documents of a text file (``opener``: its bytes), each its text or, if ``counted``, a ``LongDocument``."""
    if not separator:
        raise TensorcadError("--separator", "must not be empty")
    # The document being read is kept as chunks and joined once it ends: `rest + chunk` copied the whole
    # document again with each chunk, quadratic in its size (300 MB: over a minute).
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    held: list[str] = []
    # tail: the held text's last `keep` characters, where a separator's start may be (a chunk may be shorter)
    size, long, keep, tail = 0, None, len(separator) - 1, ""
    with opener(path) as f:
        while True:
            data = f.read(CHUNK)
            seen(len(data))
            try:
                chunk = decoder.decode(data, final=not data)
            except UnicodeDecodeError:
                raise TensorcadError(str(path), "is not UTF-8 text") from None
            if not data:
                break
            edge = tail + chunk[:keep]  # a separator may straddle the chunk before and this one
            if separator in chunk or separator in edge:
                pieces = ("".join(held) + chunk).split(separator)
                held = [pieces.pop()]
                size, tail = len(held[0]), _last(held[0], keep)
                if long is not None:
                    long.add(pieces[0])
                    pieces[0], long = long, None
                yield from pieces
            else:
                held.append(chunk)
                size, tail = size + len(chunk), _last(edge if len(chunk) < keep else chunk, keep)
            if size > (FOLD_BYTES if counted else MAX_DOCUMENT_BYTES):
                if not counted:
                    raise too_long(str(path))
                # Count all but the last `keep` characters, which a separator's start may be: held stays small.
                text = "".join(held)
                long = long or LongDocument()
                long.add(text[:len(text) - len(tail)])
                held, size = [tail], len(tail)
    text = "".join(held)
    if long is None:
        yield text
    else:
        long.add(text)
        yield long


def _last(text: str, keep: int) -> str:
    return text[max(len(text) - keep, 0):] if keep else ""
