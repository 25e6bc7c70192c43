"""Files of document lengths: read into a ``Lengths`` (``load_lengths``) and written (``write_histogram``).

A file is either a **histogram** (length -> count: a JSON object, or CSV
``length,count`` lines with an optional header) or a **list** of lengths (text,
one a line, or a 1-D integer ``.npy``); Parquet (``.parquet``, a column of
lengths) when ``pyarrow`` is installed. A bad file is one ``TensorcadError``
naming the file and the line (or element) of the bad value.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from tokenize import TokenError
from typing import BinaryIO

import numpy as np

from tensorcad.design.formats import parse_json
from tensorcad.errors import TensorcadError, shown

from .lengths import MAX_DOCUMENTS, MAX_LENGTH, QUANTILES, Lengths  # noqa: F401 (what its readers return)

# Files past this are a mistake for a list of lengths (a histogram is tiny).
MAX_FILE_BYTES = 1 << 30


_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only: '\u0663' (Arabic-Indic 3) is no length
_KEY = re.compile(r"-?[0-9]{1,30}")  # a JSON histogram's key (a sign only to say "not positive"): " 5 ", "+5", "1_0" (float() read 10), "1e3", "5.0" were read


def _int_at(text: str, where: str, what: str) -> int:
    text = text.strip()
    if not text.isascii():
        raise TensorcadError(where, f"{what} {shown(text, 40)} is not a number (ASCII digits only)")
    if not _INTEGER.fullmatch(text):
        try:
            number = float(text)
        except ValueError:
            raise TensorcadError(where, f"{what} {shown(text, 40)} is not a number") from None
        if not math.isfinite(number) or number != int(number):
            raise TensorcadError(where, f"{what} {shown(text, 40)} is not a whole number")
        return int(number)
    return int(text)


def _checked(length: int, count: int, where: str) -> None:
    if length <= 0:
        raise TensorcadError(where, f"length {length} is not positive (a document holds at least one token)")
    if length > MAX_LENGTH:
        raise TensorcadError(where, f"length {length:,} is longer than {MAX_LENGTH:,} tokens")
    if count < 0:
        raise TensorcadError(where, f"count {count} is negative")
    if count > MAX_DOCUMENTS:
        raise TensorcadError(where, f"count {count:,} is more than {MAX_DOCUMENTS:,} documents")


def _from_table(table: dict[int, int], name: str) -> Lengths:
    if not table:
        raise TensorcadError(name, "holds no lengths")
    if sum(table.values()) == 0:
        raise TensorcadError(name, "zero documents in total (every count is 0)")
    values = sorted(table)
    return Lengths(tuple(values), tuple(table[v] for v in values), name)


def _json_histogram(text: str, name: str) -> Lengths:
    try:  # the one bounded reader: depth, digits, a key twice; named as any bad lengths file (file:line)
        data = parse_json(text, name)
    except TensorcadError as e:
        line = re.search(r" at line (\d+), column", e.message)
        raise TensorcadError(f"{name}:{line.group(1)}" if line and e.path == name else
                             e.path if e.path.startswith(name) else f"{name}: {e.path}", e.message) from None
    if isinstance(data, list):  # a JSON list of lengths
        return _listed(((f"{name}: element {i}", v) for i, v in enumerate(data)), name)
    if not isinstance(data, dict):
        raise TensorcadError(name, "expected an object of length -> count, or a list of lengths")
    table: dict[int, int] = {}
    for key, count in data.items():
        try:
            if not _KEY.fullmatch(key):
                raise TensorcadError(name, f"length {shown(key, 40)} is not a number (ASCII digits only)")
            length = _int_at(key, name, "length")
            if isinstance(count, bool) or not isinstance(count, (int, float)):
                raise TensorcadError(name, f"count for length {shown(key, 40)} is not a number")
            count = _int_at(repr(count), name, "count")
            _checked(length, count, name)
        except TensorcadError as e:
            # The line is looked up only for the one bad key: once per key made reading quadratic (100k keys: 60 s).
            line = text.count("\n", 0, max(text.find(json.dumps(key)), 0)) + 1
            raise TensorcadError(f"{name}:{line}", e.message) from None
        table[length] = table.get(length, 0) + count
    return _from_table(table, name)


def _listed(items, name: str) -> Lengths:
    table: dict[int, int] = {}
    for where, value in items:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TensorcadError(where, f"{shown(value)} is not a length")
        length = _int_at(str(value), where, "length")
        _checked(length, 1, where)
        table[length] = table.get(length, 0) + 1
    return _from_table(table, name)


def _csv_histogram(lines, name: str) -> Lengths:
    table: dict[int, int] = {}
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if number == 1 and not any(ch.isdigit() for ch in parts[0]):
            continue  # a header such as "length,count"
        where = f"{name}:{number}"
        if len(parts) != 2:
            raise TensorcadError(where, f"expected 'length,count', got {line[:60]!r}")
        length, count = _int_at(parts[0], where, "length"), _int_at(parts[1], where, "count")
        _checked(length, count, where)
        table[length] = table.get(length, 0) + count
    return _from_table(table, name)


def _text_list(lines, name: str) -> Lengths:
    def items():
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield f"{name}:{number}", line.strip()

    return _listed(items(), name)


def _npy_promised_bytes(path: Path | BinaryIO) -> tuple[int, int]:
    """The bytes a .npy header says its data holds, and the bytes there are after the header."""
    from numpy.lib import format as npy

    fp = path.open("rb") if isinstance(path, Path) else path
    try:
        start = fp.tell()
        version = npy.read_magic(fp)
        width = 2 if version == (1, 0) else 4  # the header's length, checked before numpy reads that many bytes
        size = int.from_bytes(fp.read(width), "little")
        fp.seek(-width, 1)
        if size > 10_000:  # past numpy's own max_header_size
            raise ValueError(f"a header of {size:,} bytes")
        shape, _, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(fp)
        header_end = fp.tell()
        end = fp.seek(0, 2)
        fp.seek(start)
    finally:
        if isinstance(path, Path):
            fp.close()
    return math.prod(shape) * dtype.itemsize, end - header_end


def _npy_list(path: Path | BinaryIO, name: str) -> Lengths:
    try:
        promised, held = _npy_promised_bytes(path)
        if promised <= held:
            array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, SyntaxError, TokenError) as e:  # a header that is no Python literal: TokenError
        raise TensorcadError(name, f"not a .npy array: {shown(str(e), 120)}") from None
    if promised > held:  # numpy would allocate what the header promises before finding it missing
        raise TensorcadError(name, f"its header promises {promised:,} bytes of lengths; it holds {held:,}")
    # By kind, not issubdtype: numpy files timedelta64 under signedinteger, and a duration is no length.
    if array.ndim != 1 or array.dtype.kind not in "iuf":
        raise TensorcadError(name, f"expected a 1-D array of lengths, got {array.dtype} {array.shape}")
    if array.size == 0:
        raise TensorcadError(name, "holds no lengths")
    if np.issubdtype(array.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(array) | (array != np.floor(array)))
        if len(bad):
            raise TensorcadError(f"{name}: element {bad[0]}", f"{array[bad[0]]!r} is not a whole number")
    array = array.astype(np.int64)
    bad = np.flatnonzero((array <= 0) | (array > MAX_LENGTH))
    if len(bad):
        _checked(int(array[bad[0]]), 1, f"{name}: element {bad[0]}")
    return Lengths.of(array, name)


def _parquet_list(path: Path | BinaryIO, name: str, column: str | None) -> Lengths:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise TensorcadError(name, "reading Parquet needs pyarrow: pip install 'tensorcad[corpus]'") from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own types for a bad file
        raise TensorcadError(name, f"not a Parquet file: {e}") from None
    names = table.schema_arrow.names
    column = column or "length"
    if column not in names:
        raise TensorcadError(name, f"no column {column!r} (columns: {', '.join(names)})")
    parts, row = [], 0
    for batch in table.iter_batches(columns=[column]):
        array = batch.column(0).to_numpy(zero_copy_only=False)
        if array.dtype.kind not in "iu":  # by kind: a duration column (timedelta64) is no length either
            raise TensorcadError(f"{name}: row {row}", f"column {column!r} is {array.dtype}, not integer lengths")
        bad = np.flatnonzero((array <= 0) | (array > MAX_LENGTH))
        if len(bad):
            _checked(int(array[bad[0]]), 1, f"{name}: row {row + int(bad[0])}")
        values, counts = np.unique(array, return_counts=True)
        parts.append((values, counts))
        row += len(array)
    if not parts:
        raise TensorcadError(name, "holds no lengths")
    values = np.concatenate([v for v, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    unique, inverse = np.unique(values, return_inverse=True)
    return Lengths(tuple(unique.tolist()), tuple(np.bincount(inverse, weights=counts).astype(np.int64).tolist()), name)


def _column_fits(column: str | None, suffix: str, name: str) -> None:
    """A column is asked of a Parquet file only, and named: '' fell back to ``length``, and other files ignored it."""
    if column is not None and suffix != ".parquet":
        raise TensorcadError(name, f"a column ({shown(column, 40)}) is read from a .parquet file only, "
                                   f"not a {suffix or 'text'} file")
    if column == "":
        raise TensorcadError(name, "the column's name is empty (the default is 'length')")


def load_lengths(file: str | Path, column: str | None = None) -> Lengths:
    """The length distribution a file holds, by its suffix (``docs/packing.md``).

    ``.json`` a histogram object (or a list), ``.csv`` ``length,count``
    lines, ``.npy`` a list, ``.parquet`` a column (``column``, default
    ``length``); anything else a text file of one length a line.
    """
    path = Path(file)
    name = str(file)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TensorcadError(name, f"cannot read: {e.strerror}") from None
    if not path.is_file():
        raise TensorcadError(name, "is not a file")
    if size == 0:
        raise TensorcadError(name, "is empty")
    if size > MAX_FILE_BYTES:
        raise TensorcadError(name, f"is {size / 2**30:.1f} GiB; more than {MAX_FILE_BYTES >> 30} GiB of lengths "
                                   "is too large (write a histogram: tensorcad lengths)")
    suffix = path.suffix.lower()
    corpus = f"count a corpus's lengths first: tensorcad lengths {name} (then --pack-lengths lengths.json)"
    if suffix in (".jsonl", ".ndjson"):
        raise TensorcadError(name, f"is a corpus (JSON lines of text), not a file of lengths; {corpus}")
    _column_fits(column, suffix, name)
    if suffix == ".npy":
        return _npy_list(path, name)
    if suffix == ".parquet":
        return _parquet_list(path, name, column)
    try:
        if suffix == ".json":
            return _json_histogram(path.read_text(encoding="utf-8"), name)
        with path.open(encoding="utf-8") as lines:
            if suffix == ".csv":
                return _csv_histogram(lines, name)
            try:
                return _text_list(lines, name)
            except TensorcadError as error:  # text, not lengths: most likely the corpus itself
                if not error.message.endswith("is not a number"):
                    raise
                raise TensorcadError(error.path, f"{error.message}; {corpus}") from None
    except UnicodeDecodeError:
        raise TensorcadError(name, "is not UTF-8 text") from None
    except OSError as e:
        raise TensorcadError(name, f"cannot read: {e.strerror}") from None


def lengths_from_bytes(data: bytes, name: str, column: str | None = None) -> Lengths:
    """What ``load_lengths`` reads from a file named ``name``, from its bytes (the editor's upload).

    The same formats by the same suffixes, and the same errors, naming
    ``name`` and the line or element; nothing is written to disk.
    """
    import io

    if not data:
        raise TensorcadError(name, "is empty")
    suffix = Path(name).suffix.lower()
    _column_fits(column, suffix, name)
    if suffix == ".npy":
        return _npy_list(io.BytesIO(data), name)
    if suffix == ".parquet":
        return _parquet_list(io.BytesIO(data), name, column)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TensorcadError(name, "is not UTF-8 text") from None
    if suffix == ".json":
        return _json_histogram(text, name)
    lines = text.splitlines()
    return _csv_histogram(lines, name) if suffix == ".csv" else _text_list(lines, name)


def histogram_text(lengths: Lengths) -> str:
    """``lengths`` as a JSON histogram, one length a line (so errors can name lines)."""
    return "{\n" + ",\n".join(f'  "{v}": {c}' for v, c in zip(lengths.values, lengths.counts)) + "\n}\n"


def write_histogram(lengths: Lengths, file: str | Path) -> None:
    """Write ``lengths`` as a JSON histogram (``histogram_text``)."""
    try:
        Path(file).write_text(histogram_text(lengths))
    except OSError as e:
        raise TensorcadError(str(file), f"cannot write: {e.strerror}") from None
