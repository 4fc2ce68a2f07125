"""A Parquet column chunk's pages checked from their raw bytes, without decoding a value.

DuckDB's Parquet reader skips page checksums. Decoding each chunk DuckDB reads a second time with
pyarrow to have them checked costs as much as the query itself, so ``check_chunk`` checks the
bytes DuckDB is handed instead: it walks the chunk's page headers (Thrift's compact protocol) and
refuses the chunk unless

- each page's CRC-32, where the writer stored one, matches the page's bytes;
- the pages tile the chunk exactly: headers plus compressed sizes add up to the footer's
  ``total_compressed_size``, headers plus uncompressed sizes to its ``total_uncompressed_size``
  (a page header is not under the page's checksum; this catches a damaged size);
- the data pages' value counts add up to the footer's ``num_values`` (a damaged count would end
  the column early or read past it), at most one dictionary page comes first, a dictionary of
  fixed-width values is as long as its count says, and every encoding a page names is one the
  footer lists for the chunk.

The footer itself was checked against the manifest's checksum when the profile was opened, so
what the pages are held to is the writer's word. Values are checked against the schema by the
query itself (``values.sql_checked``).
"""

from __future__ import annotations

import zlib
from typing import Any

# parquet.thrift's enums, as the compact protocol writes them
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_ENCODINGS = {"PLAIN": 0, "PLAIN_DICTIONARY": 2, "RLE": 3, "BIT_PACKED": 4, "DELTA_BINARY_PACKED": 5,
              "DELTA_LENGTH_BYTE_ARRAY": 6, "DELTA_BYTE_ARRAY": 7, "RLE_DICTIONARY": 8, "BYTE_STREAM_SPLIT": 9}
_WIDTHS = {"INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}  # bytes a plain value takes
_MAX_DEPTH = 8  # structs nested in a page header (Parquet's: 3)
_MAX_HEADER = 1 << 20  # bytes one page header may take (its statistics hold at most a min and a max)


class PageError(ValueError):
    """A column chunk's pages disagree with their checksums or with the footer; the sentence says how."""


_PAST = "a page header runs past the end of its column chunk"


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, the position after it). Every read moves forward, and
    running past ``end`` is a PageError (never a loop, never a read outside the chunk)."""
    value, shift = 0, 0
    while True:
        if pos >= end:
            raise PageError(_PAST)
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise PageError("a page header holds an integer longer than 64 bits")


def _skip(data: memoryview, pos: int, end: int, kind: int, depth: int) -> int:
    """The position after a value of Thrift compact type ``kind`` at ``pos``."""
    if kind in (1, 2):  # booleans live in the field header
        return pos
    if kind == 3:
        pos += 1
    elif kind in (4, 5, 6):
        pos = _varint(data, pos, end)[1]
    elif kind == 7:
        pos += 8
    elif kind == 8:
        size, pos = _varint(data, pos, end)
        pos += size
    elif kind in (9, 10):
        if pos >= end:
            raise PageError(_PAST)
        head = data[pos]
        size, pos = (head >> 4, pos + 1) if head >> 4 != 15 else _varint(data, pos + 1, end)
        item = head & 0x0F if head & 0x0F not in (1, 2) else 3  # booleans in a list are bytes
        for _ in range(size):
            pos = _skip(data, pos, end, item, depth + 1)
    elif kind == 11:
        size, pos = _varint(data, pos, end)
        if size:
            if pos >= end:
                raise PageError(_PAST)
            types, pos = data[pos], pos + 1
            for _ in range(size):
                pos = _skip(data, pos, end, types >> 4, depth + 1)
                pos = _skip(data, pos, end, types & 0x0F, depth + 1)
    elif kind == 12:
        pos = _struct(data, pos, end, depth + 1)[1]
    else:
        raise PageError(f"a page header holds a field of unknown type {kind}")
    if pos > end:
        raise PageError(_PAST)
    return pos


def _struct(data: memoryview, pos: int, end: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    """A struct of Thrift's compact protocol at ``pos``: its 32-bit integer fields and nested structs
    by field id (a field of another type than it had is left out, as Thrift's own readers skip it;
    everything else is skipped), and the position after it."""
    if depth > _MAX_DEPTH:
        raise PageError("a page header nests deeper than Parquet's do")
    fields: dict[int, Any] = {}
    last = 0
    while True:
        if pos >= end:
            raise PageError(_PAST)
        head = data[pos]
        pos += 1
        kind = head & 0x0F
        if kind == 0:
            return fields, pos
        if head >> 4:
            last += head >> 4
        else:
            value, pos = _varint(data, pos, end)
            last = (value >> 1) ^ -(value & 1)
        if kind == 5:
            value, pos = _varint(data, pos, end)
            fields[last] = (value >> 1) ^ -(value & 1)
        elif kind == 12:
            fields[last], pos = _struct(data, pos, end, depth + 1)
        else:
            pos = _skip(data, pos, end, kind, depth)


def check_chunk(data: bytes | memoryview, meta: Any) -> None:
    """PageError unless ``data``, the bytes of one column chunk (``meta``: its
    ``pq.ColumnChunkMetaData``, from a checked footer), holds pages that agree with their
    checksums and with the footer (see the module's docstring)."""
    view = memoryview(data)
    end = len(view)
    if end != meta.total_compressed_size:
        raise PageError(f"the chunk is {end} bytes, its footer says {meta.total_compressed_size}")
    allowed = {_ENCODINGS.get(name, -1) for name in meta.encodings}
    pos, values, uncompressed, pages = 0, 0, 0, 0
    while pos < end:
        header, body = _struct(view, pos, min(end, pos + _MAX_HEADER))
        kind, size, compressed = header.get(1), header.get(2), header.get(3)
        if not isinstance(size, int) or not isinstance(compressed, int) or size < 0 or compressed < 0:
            raise PageError(f"page {pages} has no valid sizes in its header")
        if body + compressed > end:
            raise PageError(f"page {pages} runs past the end of its column chunk")
        crc = header.get(4)
        if crc is not None and zlib.crc32(view[body: body + compressed]) != crc & 0xFFFFFFFF:
            raise PageError(f"page {pages} does not match its checksum")
        inner = header.get({_DATA_PAGE: 5, _DICTIONARY_PAGE: 7, _DATA_PAGE_V2: 8}.get(kind, -1))
        if not isinstance(inner, dict) or not isinstance(inner.get(1), int) or inner[1] < 0:
            raise PageError(f"page {pages} is of a kind ({kind}) or shape this reader does not check")
        encoding = inner.get(4 if kind == _DATA_PAGE_V2 else 2)
        if encoding not in allowed:
            raise PageError(f"page {pages} names an encoding ({encoding}) its footer does not list")
        if kind == _DICTIONARY_PAGE:
            if pages:
                raise PageError(f"page {pages} is a dictionary page after the first")
            width = _WIDTHS.get(meta.physical_type)
            if width is not None and inner[1] * width != size:
                raise PageError(f"its dictionary page holds {inner[1]} values in {size} bytes")
        else:
            values += inner[1]
        uncompressed += body - pos + size
        pos = body + compressed
        pages += 1
    if values != meta.num_values:
        raise PageError(f"its pages hold {values} values, its footer says {meta.num_values}")
    if uncompressed != meta.total_uncompressed_size:
        raise PageError(f"its pages decompress to {uncompressed} bytes with their headers, its footer says "
                        f"{meta.total_uncompressed_size}")
