"""Streaming a corpus into a histogram of document lengths (``tensorcad lengths``).

A corpus is JSONL (one object a line, the text under ``field``), Parquet (a
text column, when ``pyarrow`` is installed) or plain text whose documents a
``separator`` divides. Each document's tokens are counted by UTF-8 bytes, by
whitespace-separated words, or by a local Hugging Face tokenizer directory
(its ``tokenizer.json``, through the ``tokenizers`` package). Only the
histogram is kept, so memory stays flat however large the corpus: documents
are read a line or a chunk at a time and counted in batches.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tensorcad.errors import TensorcadError

from .histogram import MAX_LENGTH, Lengths

COUNTERS = ("bytes", "whitespace", "tokenizer")
DEFAULT_SEPARATOR = "\n\n"
BATCH = 256  # documents counted at once (a tokenizer encodes a batch in parallel)
CHUNK = 1 << 20  # bytes of plain text read at a time


def _jsonl(path: Path, field: str, seen: Callable[[int], None]) -> Iterator[str]:
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            seen(len(line))
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise TensorcadError(f"{path}:{number}", f"not a JSON line: {getattr(e, 'msg', e)}") from None
            if not isinstance(record, dict) or field not in record:
                raise TensorcadError(f"{path}:{number}", f"no field {field!r} (choose one with --field)")
            text = record[field]
            if not isinstance(text, str):
                raise TensorcadError(f"{path}:{number}", f"field {field!r} is {type(text).__name__}, not text")
            yield text


def _text(path: Path, separator: str, seen: Callable[[int], None]) -> Iterator[str]:
    if not separator:
        raise TensorcadError("--separator", "must not be empty")
    rest = ""
    with path.open("r", encoding="utf-8", errors="strict", newline="") as f:
        while True:
            try:
                chunk = f.read(CHUNK)
            except UnicodeDecodeError:
                raise TensorcadError(str(path), "is not UTF-8 text") from None
            if not chunk:
                break
            seen(len(chunk.encode("utf-8")))
            pieces = (rest + chunk).split(separator)
            rest = pieces.pop()
            yield from pieces
    yield rest


def _parquet(path: Path, field: str, seen: Callable[[int], None]) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise TensorcadError(str(path), "reading Parquet needs pyarrow: pip install 'tensorcad[corpus]'") from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own error types
        raise TensorcadError(str(path), f"not a Parquet file: {e}") from None
    if field not in table.schema_arrow.names:
        raise TensorcadError(str(path), f"no column {field!r} (columns: {', '.join(table.schema_arrow.names)})")
    per_row = path.stat().st_size / max(table.metadata.num_rows, 1)
    for batch in table.iter_batches(columns=[field], batch_size=BATCH):
        seen(int(per_row * batch.num_rows))
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield text


def documents(path: str | Path, field: str = "text", separator: str = DEFAULT_SEPARATOR,
              seen: Callable[[int], None] = lambda n: None) -> Iterator[str]:
    """The documents of one corpus file, by its suffix; ``seen(bytes)`` hears of progress."""
    path = Path(path)
    if not path.is_file():
        raise TensorcadError(str(path), "is not a file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl(path, field, seen)
    if suffix == ".parquet":
        return _parquet(path, field, seen)
    return _text(path, separator, seen)


def counter(by: str, tokenizer: str | Path | None = None) -> Callable[[list[str]], list[int]]:
    """How a batch of documents becomes token counts."""
    if tokenizer is not None:
        by = "tokenizer"
    if by not in COUNTERS:
        raise TensorcadError("--by", f"unknown count {by!r} ({', '.join(COUNTERS)})")
    if by == "bytes":
        return lambda batch: [len(text.encode("utf-8")) for text in batch]
    if by == "whitespace":
        return lambda batch: [len(text.split()) for text in batch]
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


def count_lengths(paths: Iterable[str | Path], *, field: str = "text", separator: str = DEFAULT_SEPARATOR,
                  by: str = "whitespace", tokenizer: str | Path | None = None,
                  progress: Callable[[int], None] | None = None) -> tuple[Lengths, int]:
    """The histogram of the corpus's document lengths, and how many empty documents were skipped."""
    count = counter(by, tokenizer)
    table: Counter[int] = Counter()
    empty = 0
    seen = progress or (lambda n: None)
    paths = [Path(p) for p in paths]
    for path in paths:
        batch: list[str] = []
        for text in documents(path, field, separator, seen):
            batch.append(text)
            if len(batch) == BATCH:
                empty += _add(table, count(batch))
                batch.clear()
        empty += _add(table, count(batch))
    if not table:
        raise TensorcadError(", ".join(map(str, paths)), "holds no non-empty documents")
    values = sorted(table)
    if values[-1] > MAX_LENGTH:
        raise TensorcadError(", ".join(map(str, paths)), f"a document of {values[-1]:,} tokens is longer "
                                                          f"than {MAX_LENGTH:,}")
    return Lengths(tuple(values), tuple(table[v] for v in values), ", ".join(map(str, paths))), empty


def _add(table: Counter, lengths: list[int]) -> int:
    empty = 0
    for n in lengths:
        if n > 0:
            table[n] += 1
        else:
            empty += 1
    return empty


def plot(lengths: Lengths, width: int = 72, height: int = 16) -> str:
    """A terminal bar chart of documents by length, in power-of-two bins (plotext)."""
    import numpy as np
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
