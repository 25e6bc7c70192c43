"""The mask preview drawn: a grayscale PNG of the kept fractions, and a small text rendering of them.

Both draw the JSON of ``answers.mask_preview`` (queries down, keys across):
white where the mask keeps every score of a cell, black where it keeps none.
The PNG is written with the standard library alone (zlib, a PNG's one
compression; no imaging package in the engine); its format is the PNG
specification's (ISO/IEC 15948): signature, IHDR, one IDAT, IEND, each chunk
closed by its CRC-32.
"""

from __future__ import annotations

import struct
import zlib

SHADES = " .:-=+*#%@"  # a text cell's kept fraction, from none to all
TEXT_CELLS = 32  # columns of the text drawing: a sample of the preview, not its every cell
PIXELS_PER_CELL = 2


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(fractions: list[list[float]], pixels: int = PIXELS_PER_CELL) -> bytes:
    """An 8-bit grayscale PNG, ``pixels`` x ``pixels`` a cell, of fractions in [0, 1]."""
    n = len(fractions)
    rows = []
    for line in fractions:
        row = bytes(min(255, max(0, round(f * 255))) for f in line for _ in range(pixels))
        rows.extend([b"\x00" + row] * pixels)  # filter type 0 (None) before each scanline
    width = height = n * pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8 bits, grayscale, deflate, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + _chunk(b"IEND", b""))


def drawing(preview: dict, width: int = TEXT_CELLS) -> str:
    """The preview's kept fractions as ``width`` x ``width`` characters, each the mean of the cells it covers."""
    fractions = preview["fractions"]
    n = len(fractions)
    width = max(1, min(width, n))
    lines = []
    for i in range(width):
        rows = range(i * n // width, (i + 1) * n // width)
        line = []
        for j in range(width):
            cols = range(j * n // width, (j + 1) * n // width)
            mean = sum(fractions[r][c] for r in rows for c in cols) / (len(rows) * len(cols))
            line.append(SHADES[min(len(SHADES) - 1, round(mean * (len(SHADES) - 1)))])
        lines.append("".join(line).rstrip())
    documents = preview["documents"]
    head = (f"{preview['path']} over {preview['seq']:,} tokens, a sample: {preview['sample']} "
            f"({documents:,} document{'s' if documents != 1 else ''}); queries down, keys across; "
            f"'{SHADES[-1]}' all kept, ' ' none{'' if preview['exact'] else '; the fractions are an estimate'}")
    return head + "\n" + "\n".join(lines) + "\n"
