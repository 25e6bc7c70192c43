"""Streaming one corpus file into a histogram of document lengths (``tensorcad lengths``).

A corpus file is JSONL (``.jsonl``, ``.ndjson``: one object a line), Parquet
(``.parquet``), Arrow (``.arrow``: the shards ``datasets``' ``save_to_disk``
writes) or plain text whose documents a ``separator`` divides; JSONL and text
may be compressed (``.gz``, or ``.zst`` with ``zstandard``). A document's length
is a column the file already holds (``token_count`` or ``length``, or the one
``Counting.column`` names), or its text's tokens: UTF-8 bytes, whitespace-
separated words, or a local Hugging Face tokenizer (its ``tokenizer.json``,
through ``tokenizers``, in batches). Only the histogram is kept, so memory stays
flat however large the file: it is read a line, a chunk or a record batch at a time.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorcad.design.formats import parse_json
from tensorcad.errors import TensorcadError, shown

from . import text as plain_text
from .histogram import MAX_LENGTH, Lengths
from .text import LongDocument, too_long

COUNTERS = ("bytes", "whitespace", "tokenizer")
# Columns that already hold each document's tokens, in the order they are looked for.
LENGTH_COLUMNS = ("token_count", "length")
DEFAULT_SEPARATOR = "\n\n"
BATCH = 256  # documents counted at once (a tokenizer encodes a batch in parallel)
ROWS = 65_536  # rows of a length column read at once
KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".arrow": "arrow", ".txt": "text"}
COMPRESSED = (".gz", ".zst")


@dataclass(frozen=True)
class Counting:
    """How a corpus's documents become lengths.

    ``by`` is ``bytes``, ``whitespace`` or ``tokenizer`` (a ``tokenizer``
    directory given means ``tokenizer``); None reads a length column where a
    file has one (``column``, else the first of ``LENGTH_COLUMNS``) and counts
    whitespace-separated words of ``field`` where it has none.
    """

    field: str = "text"
    separator: str = DEFAULT_SEPARATOR
    by: str | None = None
    tokenizer: str | None = None
    column: str | None = None

    def key(self, names: Iterable[str], where: str, noun: str = "column") -> tuple[str, bool]:
        """The column (or JSON field) to read of a file that has these, and whether it holds lengths."""
        names = list(names)
        if self.column is not None:
            if self.column not in names:
                raise TensorcadError(where, f"no length {noun} {shown(self.column)} ({noun}s: {shown(', '.join(names))})")
            return self.column, True
        if self.by is None and self.tokenizer is None:
            for name in LENGTH_COLUMNS:
                if name in names:
                    return name, True
        if self.field not in names:
            raise TensorcadError(where, f"no {noun} {shown(self.field)} ({noun}s: {shown(', '.join(names))}; "
                                        "choose one with --field)")
        return self.field, False


def kind_of(path: Path) -> str:
    """``jsonl``, ``parquet``, ``arrow`` or ``text``, by the suffix under any compression's."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes.pop()
    return KINDS.get(suffixes[-1] if suffixes else "", "text")


def open_bytes(path: Path):
    """The file's bytes, decompressed by its suffix (``.gz``, ``.zst``)."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".zst":
        try:
            import zstandard
        except ModuleNotFoundError:
            raise TensorcadError(str(path), "reading .zst needs zstandard: pip install 'tensorcad[corpus]'") from None
        import io

        # Buffered: zstandard's reader reads, but does not iterate lines.
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True))
    return path.open("rb")


def _unreadable() -> tuple[type[BaseException], ...]:
    """What a damaged compressed stream raises: gzip's OSError and EOFError, zstandard's ZstdError."""
    try:
        from zstandard import ZstdError
    except ModuleNotFoundError:
        return OSError, EOFError
    return OSError, EOFError, ZstdError


def _records(path: Path, seen: Callable[[int], None]) -> Iterator[tuple[int, object]]:
    with open_bytes(path) as f:
        number = 0
        while line := f.readline(plain_text.MAX_DOCUMENT_BYTES + 1):  # a bounded read: one 900 MB line is no allocation
            number += 1
            seen(len(line))
            if len(line) > plain_text.MAX_DOCUMENT_BYTES:
                raise too_long(f"{path}:{number}")
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                raise TensorcadError(f"{path}:{number}", "not a JSON line: not UTF-8") from None
            yield number, parse_json(text, f"{path}:{number}")  # bounded: depth, digits, a key once


def records(path: str | Path) -> Iterator[object]:
    """Each JSON value of a JSONL corpus file (compressed or not), read a bounded line at a time."""
    path = _file(path)
    if kind_of(path) != "jsonl":
        raise TensorcadError(str(path), "expected a JSONL corpus (.jsonl or .ndjson, .gz or .zst): one document a line")
    for _, record in _records(path, lambda _: None):
        yield record


def _jsonl(path: Path, counting: Counting, seen: Callable[[int], None]) -> Iterator[tuple[bool, list]]:
    """Batches of one field's values, and whether they are lengths (the field chosen from the first record)."""
    key, lengths, batch = None, False, []
    for number, record in _records(path, seen):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise TensorcadError(where, f"no field {shown(key or counting.field)} (a line is one JSON object)")
        if key is None:
            key, lengths = counting.key(record, where, "field")
        if key not in record:
            raise TensorcadError(where, f"no field {shown(key)} (choose one with --field)")
        value = record[key]
        if lengths:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LENGTH:
                raise TensorcadError(where, f"{key} {shown(value)} is not a length (0..{MAX_LENGTH:,} tokens)")
        elif not isinstance(value, str):
            raise TensorcadError(where, f"field {shown(key)} is {type(value).__name__}, not text")
        batch.append(value)
        if len(batch) == BATCH:
            yield lengths, batch
            batch = []
    if batch:
        yield lengths, batch


def _table(path: Path, kind: str):
    """A Parquet or Arrow file's schema names, rows (None: unknown) and ``batches(column, size)``."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise TensorcadError(str(path), f"reading {kind.title()} needs pyarrow: pip install 'tensorcad[corpus]'") from None
    try:
        if kind == "parquet":
            file = pq.ParquetFile(path)
            return (file.schema_arrow.names, file.metadata.num_rows,
                    lambda column, size: file.iter_batches(columns=[column], batch_size=size))
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))  # datasets writes Arrow streams
    except Exception as e:  # pyarrow raises its own types for a bad file
        raise TensorcadError(str(path), f"not a {kind.title()} file: {e}") from None

    def batches(column, size):
        index = reader.schema.names.index(column)
        for batch in reader:
            for start in range(0, batch.num_rows, size):
                yield batch.slice(start, size).select([index])

    return reader.schema.names, None, batches


def _columnar(path: Path, kind: str, counting: Counting, seen: Callable[[int], None]) -> Iterator[tuple[bool, list]]:
    names, rows, batches = _table(path, kind)
    key, lengths = counting.key(names, str(path))
    per_row, row = path.stat().st_size / max(rows or 1, 1), 0
    for batch in batches(key, ROWS if lengths else BATCH):
        column = batch.column(0)
        seen(int(per_row * batch.num_rows) if rows else column.nbytes)
        if lengths:
            yield True, _length_column(column, f"{path}: row", row, key)
        elif not _is_text(column.type):  # ints, lists, structs, bytes: no text to count
            raise TensorcadError(str(path), f"column {shown(key)} is {shown(str(column.type), 40)}, not text "
                                            "(a string column)")
        else:
            yield False, ["" if text is None else text for text in column.to_pylist()]  # null: an empty document
        row += batch.num_rows


def _is_text(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)


def _length_column(column, where: str, first_row: int, key: str) -> np.ndarray:
    """An Arrow column of lengths as numpy, checked: no nulls, whole numbers, each 0..MAX_LENGTH."""
    if column.null_count:
        raise TensorcadError(f"{where} {first_row + column.is_null().to_numpy(zero_copy_only=False).argmax()}",
                             f"{key} is null")
    return checked_lengths(column.to_numpy(zero_copy_only=False), where, first_row, key)


def checked_lengths(array: np.ndarray, where: str, first_row: int, key: str) -> np.ndarray:
    """A numpy column of lengths, checked; a bad one names ``{where} {row}``."""
    if array.dtype.kind not in "iu":  # by kind: numpy files timedelta64 under integer, and a duration is no length
        raise TensorcadError(f"{where} {first_row}", f"column {shown(key)} is {array.dtype}, not whole numbers of "
                                                      "tokens")
    bad = np.flatnonzero((array < 0) | (array > MAX_LENGTH))
    if len(bad):
        raise TensorcadError(f"{where} {first_row + int(bad[0])}",
                             f"{key} {int(array[bad[0]]):,} is not a length (0..{MAX_LENGTH:,} tokens)")
    return array


def _batches(path: Path, counting: Counting, seen: Callable[[int], None],
             whole: bool = False) -> Iterator[tuple[bool, list]]:
    """A file's documents in batches: (True, lengths) from a length column, (False, texts) to count.

    A text file's document too long to hold comes as a ``LongDocument`` (counted as read) unless its text is
    wanted ``whole`` or by a tokenizer."""
    kind = kind_of(path)
    if kind == "jsonl":
        return _jsonl(path, counting, seen)
    if kind in ("parquet", "arrow"):
        return _columnar(path, kind, counting, seen)
    counted = not whole and counting.tokenizer is None and counting.by in (None, "bytes", "whitespace")
    texts = plain_text.texts(path, open_bytes, counting.separator, seen, counted)
    return ((False, batch) for batch in iter(lambda: [t for _, t in zip(range(BATCH), texts)], []))


def documents(path: str | Path, field: str = "text", separator: str = DEFAULT_SEPARATOR,
              seen: Callable[[int], None] = lambda n: None) -> Iterator[str]:
    """The texts of one corpus file's documents, by its suffix; ``seen(bytes)`` hears of progress."""
    path = _file(path)
    counting = Counting(field=field, separator=separator, by="whitespace")  # the text, never a length column
    return (text for _, batch in _batches(path, counting, seen, whole=True) for text in batch)


def counter(by: str, tokenizer: str | Path | None = None) -> Callable[[list[str]], list[int]]:
    """How a batch of documents becomes token counts."""
    if tokenizer is not None:
        by = "tokenizer"
    if by not in COUNTERS:
        raise TensorcadError("--by", f"unknown count {by!r} ({', '.join(COUNTERS)})")
    if by == "bytes":
        return lambda batch: [text.bytes if isinstance(text, LongDocument) else len(text.encode("utf-8"))
                              for text in batch]
    if by == "whitespace":
        return lambda batch: [text.words if isinstance(text, LongDocument) else len(text.split()) for text in batch]
    if tokenizer is None:
        raise TensorcadError("--tokenizer", "counting by tokenizer needs a tokenizer directory")
    file = Path(tokenizer) / "tokenizer.json" if Path(tokenizer).is_dir() else Path(tokenizer)
    if not file.is_file():
        raise TensorcadError("--tokenizer", f"{tokenizer}: no tokenizer.json (a local Hugging Face tokenizer directory)")
    try:
        from tokenizers import Tokenizer
    except ModuleNotFoundError:
        raise TensorcadError("--tokenizer", "needs the tokenizers package: pip install tokenizers") from None
    try:
        encoder = Tokenizer.from_file(str(file))
    except Exception as e:  # tokenizers raises its own Exception type for a bad file
        raise TensorcadError("--tokenizer", f"{file}: not a tokenizer: {e}") from None
    return lambda batch: [len(e.ids) for e in encoder.encode_batch(batch, add_special_tokens=False)]


class Tally:
    """Documents counted into a histogram: lengths as they come, texts through the counter (made on first need)."""

    def __init__(self, counting: Counting):
        self.counting, self.table, self.empty = counting, Counter(), 0
        self._count: Callable[[list[str]], list[int]] | None = None

    def add(self, lengths: bool, batch) -> None:
        if not lengths:
            if self._count is None:
                self._count = counter(self.counting.by or "whitespace", self.counting.tokenizer)
            batch = self._count(batch)
        values, counts = np.unique(np.asarray(batch, dtype=np.int64), return_counts=True)
        if len(values) and values[0] == 0:  # an empty document holds no token: counted, and skipped
            self.empty += int(counts[0])
            values, counts = values[1:], counts[1:]
        self.table.update(dict(zip(values.tolist(), counts.tolist())))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The histogram as (lengths, counts, empty documents): small, and cheap to send between processes."""
        values = np.array(sorted(self.table), dtype=np.int64)
        return values, np.array([self.table[v] for v in values.tolist()], dtype=np.int64), self.empty


def _file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise TensorcadError(str(path), "is not a file")
    return path


def count_file(path: str | Path, counting: Counting = Counting(),
               seen: Callable[[int], None] = lambda n: None) -> tuple[np.ndarray, np.ndarray, int]:
    """One file's histogram as (lengths, counts, empty documents): what a worker sends back."""
    tally = Tally(counting)
    path = _file(path)
    try:
        for lengths, batch in _batches(path, counting, seen):
            tally.add(lengths, batch)
    except _unreadable() as e:
        raise TensorcadError(str(path), f"cannot be read: {e or type(e).__name__}") from None
    return tally.arrays()


def lengths_of_counts(parts: Iterable[tuple[np.ndarray, np.ndarray, int]], name: str) -> tuple[Lengths, int]:
    """Histograms as (lengths, counts, empty) merged into ``Lengths``, exactly, and the empty documents."""
    table: Counter[int] = Counter()
    empty = 0
    for values, counts, skipped in parts:
        table.update(dict(zip(np.asarray(values).tolist(), np.asarray(counts).tolist())))
        empty += int(skipped)
    if not table:
        raise TensorcadError(name, "holds no non-empty documents")
    values = sorted(table)
    if values[-1] > MAX_LENGTH:
        raise TensorcadError(name, f"a document of {values[-1]:,} tokens is longer than {MAX_LENGTH:,}")
    return Lengths(tuple(values), tuple(table[v] for v in values), name), empty


def count_lengths(paths: Iterable[str | Path], *, field: str = "text", separator: str = DEFAULT_SEPARATOR,
                  by: str | None = None, tokenizer: str | Path | None = None, column: str | None = None,
                  progress: Callable[[int], None] | None = None) -> tuple[Lengths, int]:
    """The histogram of the files' document lengths, in this process, and how many empty documents were skipped."""
    counting = Counting(field, separator, by, None if tokenizer is None else str(tokenizer), column)
    paths = [Path(p) for p in paths]
    seen = progress or (lambda n: None)
    return lengths_of_counts((count_file(p, counting, seen) for p in paths), ", ".join(map(str, paths)))


def plot(lengths: Lengths, width: int = 72, height: int = 16) -> str:
    """A terminal bar chart of documents by length, in power-of-two bins (plotext)."""
    import plotext as plt

    values, counts = lengths.arrays
    bins = np.floor(np.log2(values)).astype(np.int64)
    per_bin = np.bincount(bins, weights=counts)
    first = int(bins.min())
    labels = [f"{1 << k:,}" for k in range(first, len(per_bin))]
    figure = plt.figure  # plotext 6: one figure object, built to a matrix of cells
    figure.clear()
    figure.draw(figure.bar(labels, per_bin[first:].tolist(), marker="#"))  # a character shows uncoloured
    figure.title("documents by length (tokens, power-of-two bins)")
    figure.plot_size(width, height)
    figure.theme("clear")
    return plt.uncolorize(figure.build().string()) if hasattr(plt, "uncolorize") else figure.build().string()
