"""A Parquet footer (parquet.thrift's ``FileMetaData``) parsed in pure Python, for small footers.

`popvision sql` must start fast, and importing ``pyarrow.parquet`` alone costs about 47 ms of its
420 ms, far more than parsing a small footer here (this module imports in under 1 ms). A trace table
of 10M rows (150 column chunks, a 15 kB footer) parses in 1.9 ms, against 0.14 ms for
``pyarrow.parquet.read_metadata`` once pyarrow is imported; about 0.4 us a Thrift field, which is
what pure Python costs. A large footer is pyarrow's: the 1B-row trace's 14,210 chunks (1.35 MB)
take 210 ms here, 9 ms there.

``parse_footer`` reads the Thrift compact protocol over the footer's bytes and builds plain objects
with the attribute names and value semantics of pyarrow's ``FileMetaData`` for the subset the
project reads: row and row group counts, each leaf column's name, path and types, and each column
chunk's sizes, offsets, encodings, compression and statistics. Statistics are pyarrow's, rule for
rule: ``min_value``/``max_value`` where the footer declares a type-defined column order, else the
deprecated ``min``/``max`` only for a signed sort order, none at all where the writer is known to
have got them wrong (unsigned orders from parquet-mr before 1.10.0 and parquet-cpp before 1.3.0),
values typed as pyarrow types them. Fields it does not need (key-value metadata, page encoding
stats, bloom filter and size statistics...) are stepped over, not kept.

Any bytes either parse or raise ``FooterError`` with one sentence: every read stays inside the
footer and moves forward, a varint is at most ten bytes and 64 bits, a list declares no more items
than bytes are left, nesting stops at 16 levels, required fields must be there with their types, a
converted type must suit its physical type (a logical type that does not is read as undefined, as
pyarrow reads it), and the schema must match every row group's columns. The
tests compare every attribute with pyarrow's on the sample profiles and on files written with
varied options, and feed it truncated and mutated footers.
"""

from __future__ import annotations

from struct import unpack_from
from typing import Any

_ENDS = "the footer ends inside a field"
_DEEP = "the footer nests structs or lists deeper than Parquet's do"
_LONG_LIST = "a list in the footer declares more items than its bytes hold"
_LONG_INT = "the footer holds an integer longer than 64 bits"
_MISMATCH = "the footer's schema does not match its row groups' columns"
_MAX_DEPTH = 16  # Parquet's own footers nest 8 deep (a column chunk's page encoding stats); a schema's groups too

# The compact protocol's type codes (a boolean field's value is its type: 1 true, 2 false)
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# parquet.thrift's enums, named as pyarrow names them
_PHYSICAL = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")
_BOOLEAN, _INT32, _INT64, _INT96, _FLOAT, _DOUBLE_TYPE, _BYTE_ARRAY, _FIXED = range(8)
# pyarrow's names for Thrift's codecs: LZ4_RAW it names LZ4, and Thrift's LZ4 (Hadoop's framing) none
_CODECS = {0: "UNCOMPRESSED", 1: "SNAPPY", 2: "GZIP", 3: "LZO", 4: "BROTLI", 5: "UNKNOWN", 6: "ZSTD", 7: "LZ4"}
_ENCODINGS = {0: "PLAIN", 2: "PLAIN_DICTIONARY", 3: "RLE", 4: "BIT_PACKED", 5: "DELTA_BINARY_PACKED",
              6: "DELTA_LENGTH_BYTE_ARRAY", 7: "DELTA_BYTE_ARRAY", 8: "RLE_DICTIONARY", 9: "BYTE_STREAM_SPLIT"}


def _spec(fields: dict[int, tuple[int, Any]]) -> dict[int, Any]:
    """A struct's fields this module reads, {field id: (compact type, its items' or fields' spec)},
    keyed as ``_struct`` looks them up: field id and type in one int (a boolean under both its types)."""
    keys = {fid << 4 | kind: inner for fid, (kind, inner) in fields.items()}
    return keys | {fid << 4 | _FALSE: 0 for fid, (kind, _) in fields.items() if kind == _TRUE}


_INT = _spec({1: (_BYTE, 0), 2: (_TRUE, 0)})
_TIME = _spec({1: (_TRUE, 0), 2: (_STRUCT, _spec({i: (_STRUCT, {}) for i in (1, 2, 3)}))})
_LOGICAL = _spec({i: (_STRUCT, {}) for i in range(1, 19)} | {
    5: (_STRUCT, _spec({1: (_I32, 0), 2: (_I32, 0)})), 7: (_STRUCT, _TIME), 8: (_STRUCT, _TIME), 10: (_STRUCT, _INT)})
_SCHEMA_ELEMENT = _spec({1: (_I32, 0), 2: (_I32, 0), 3: (_I32, 0), 4: (_BINARY, 0), 5: (_I32, 0), 6: (_I32, 0),
                         7: (_I32, 0), 8: (_I32, 0), 10: (_STRUCT, _LOGICAL)})
_STATISTICS = _spec({1: (_BINARY, 0), 2: (_BINARY, 0), 3: (_I64, 0), 5: (_BINARY, 0), 6: (_BINARY, 0)})
_COLUMN_META = _spec({1: (_I32, 0), 2: (_LIST, (_I32, 0)), 3: (_LIST, (_BINARY, 0)), 4: (_I32, 0), 5: (_I64, 0),
                      6: (_I64, 0), 7: (_I64, 0), 9: (_I64, 0), 11: (_I64, 0), 12: (_STRUCT, _STATISTICS)})
_ROW_GROUP = _spec({1: (_LIST, (_STRUCT, _spec({3: (_STRUCT, _COLUMN_META)}))), 2: (_I64, 0), 3: (_I64, 0)})
_FILE = _spec({1: (_I32, 0), 2: (_LIST, (_STRUCT, _SCHEMA_ELEMENT)), 3: (_I64, 0), 4: (_LIST, (_STRUCT, _ROW_GROUP)),
               6: (_BINARY, 0), 7: (_LIST, (_STRUCT, _spec({1: (_STRUCT, {})})))})


class FooterError(ValueError):
    """A Parquet footer that cannot be parsed; the sentence says what is wrong with it."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it (past the end: IndexError, which
    ``parse_footer`` turns into a FooterError)."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:
                raise FooterError(_LONG_INT)
            return value, pos
        shift += 7
        if shift > 63:
            raise FooterError(_LONG_INT)


def _list_head(data: bytes, pos: int) -> tuple[int, int, int]:
    """(item type, item count, position of the first item) of the list or set at ``pos``."""
    head = data[pos]
    size, pos = (head >> 4, pos + 1) if head < 0xF0 else _varint(data, pos + 1)
    if size > len(data) - pos:  # every item takes a byte at least
        raise FooterError(_LONG_LIST)
    return head & 0x0F, size, pos


def _skip(data: bytes, pos: int, kind: int, depth: int) -> int:
    """The position after the value of compact type ``kind`` at ``pos``, ``depth`` levels down."""
    if kind == _TRUE or kind == _FALSE:
        return pos
    if kind == _I16 or kind == _I32 or kind == _I64:
        return _varint(data, pos)[1]
    if kind == _BYTE or kind == _DOUBLE or kind == _BINARY:
        size, pos = _varint(data, pos) if kind == _BINARY else (1 if kind == _BYTE else 8, pos)
        if pos + size > len(data):
            raise FooterError(_ENDS)
        return pos + size
    if depth > _MAX_DEPTH:
        raise FooterError(_DEEP)
    if kind == _LIST or kind == _SET:
        item, size, pos = _list_head(data, pos)
        item = _BYTE if item == _TRUE or item == _FALSE else item  # a boolean item is a byte
        for _ in range(size):
            pos = _skip(data, pos, item, depth + 1)
        return pos
    if kind == _MAP:
        size, pos = _varint(data, pos)
        if size:
            if 2 * size > len(data) - pos:
                raise FooterError(_LONG_LIST)
            types, pos = data[pos], pos + 1
            key, value = (_BYTE if t == _TRUE or t == _FALSE else t for t in (types >> 4, types & 0x0F))
            for _ in range(size):
                pos = _skip(data, _skip(data, pos, key, depth + 1), value, depth + 1)
        return pos
    if kind == _STRUCT:
        return _struct(data, pos, {}, depth)[1]
    raise FooterError(f"the footer holds a value of unknown type {kind}")


def _struct(data: bytes, pos: int, spec: dict[int, Any], depth: int) -> tuple[dict[int, Any], int]:
    """The fields of ``spec`` (made by ``_spec``) that the struct at ``pos`` holds with their spec's
    type, by field id (any other is skipped, as Thrift's own readers skip it), and the position after it."""
    if depth > _MAX_DEPTH:
        raise FooterError(_DEEP)
    fields: dict[int, Any] = {}
    wanted = spec.get
    fid = 0
    while True:
        head = data[pos]
        pos += 1
        kind = head & 0x0F
        if not kind:
            return fields, pos
        if head > 0x0F:
            fid += head >> 4
        else:
            raw, pos = _varint(data, pos)
            fid = (raw >> 1) ^ -(raw & 1)
        want = wanted(fid << 4 | kind)
        if want is None:
            if _I16 <= kind <= _I64:  # most skipped fields: inline, as a call costs more than the skip
                start = pos
                while data[pos] > 0x7F:
                    pos += 1
                pos += 1
                if pos - start > 9 and (pos - start > 10 or data[pos - 1] > 1):
                    raise FooterError(_LONG_INT)
            elif kind > _FALSE:
                pos = _skip(data, pos, kind, depth + 1)
        elif kind == _I64 or kind == _I32:
            raw = data[pos]
            pos += 1
            if raw > 0x7F:
                raw, pos = _varint(data, pos - 1)
            fields[fid] = (raw >> 1) ^ -(raw & 1)
        elif kind == _BINARY:
            size = data[pos]
            pos += 1
            if size > 0x7F:
                size, pos = _varint(data, pos - 1)
            if pos + size > len(data):
                raise FooterError(_ENDS)
            fields[fid] = data[pos: pos + size]
            pos += size
        elif kind == _STRUCT:
            fields[fid], pos = _struct(data, pos, want, depth + 1)
        elif kind == _LIST:
            items, pos = _list(data, pos, want, depth + 1)
            if items is not None:
                fields[fid] = items
        elif kind == _BYTE:
            fields[fid] = data[pos] - (data[pos] & 0x80) * 2
            pos += 1
        else:  # a boolean
            fields[fid] = kind == _TRUE


def _list(data: bytes, pos: int, spec: tuple[int, Any], depth: int) -> tuple[list[Any] | None, int]:
    """The items of the list at ``pos`` (None if they are not of ``spec``'s type) and the position after it."""
    if depth > _MAX_DEPTH:
        raise FooterError(_DEEP)
    kind, size, pos = _list_head(data, pos)
    items: list[Any] = []
    if size and kind != spec[0]:  # items of another type: the field is skipped, as Thrift skips it
        kind = _BYTE if kind == _TRUE or kind == _FALSE else kind
        for _ in range(size):
            pos = _skip(data, pos, kind, depth + 1)
        return None, pos
    if kind == _STRUCT:
        for _ in range(size):
            item, pos = _struct(data, pos, spec[1], depth + 1)
            items.append(item)
    elif kind == _I32:
        for _ in range(size):
            raw = data[pos]
            raw, pos = (raw, pos + 1) if raw < 0x80 else _varint(data, pos)
            items.append((raw >> 1) ^ -(raw & 1))
    else:  # binary
        for _ in range(size):
            length = data[pos]
            length, pos = (length, pos + 1) if length < 0x80 else _varint(data, pos)
            if pos + length > len(data):
                raise FooterError(_ENDS)
            items.append(data[pos: pos + length])
            pos += length
    return items, pos


# Sort orders, as parquet-cpp derives them from a column's types: which statistics it believes
_SIGNED, _UNSIGNED, _UNKNOWN = range(3)
_OLD, _OLDEST = 1, 2  # writers whose unsigned-order statistics are wrong; and whose byte arrays' are too

# A legacy converted type -> the logical type it stands for (a DECIMAL's precision and scale are the element's)
_CONVERTED = {0: ("STRING",), 1: ("MAP",), 2: ("MAP",), 3: ("LIST",), 4: ("ENUM",), 5: ("DECIMAL",), 6: ("DATE",),
              7: ("TIME", "ms", True), 8: ("TIME", "us", True), 9: ("TIMESTAMP", "ms", True),
              10: ("TIMESTAMP", "us", True), 19: ("JSON",), 20: ("BSON",), 21: ("INTERVAL",)}
_CONVERTED |= {11 + i: ("INT", 8 << i, False) for i in range(4)} | {15 + i: ("INT", 8 << i, True) for i in range(4)}
_LOGICAL_NAMES = {1: "STRING", 2: "MAP", 3: "LIST", 4: "ENUM", 5: "DECIMAL", 6: "DATE", 7: "TIME", 8: "TIMESTAMP",
                  10: "INT", 11: "NULL", 12: "JSON", 13: "BSON", 14: "UUID", 15: "FLOAT16", 16: "VARIANT",
                  17: "GEOMETRY", 18: "GEOGRAPHY"}
_UNITS = {1: "ms", 2: "us", 3: "ns"}
_WIDTHS = (1, 4, 8, 12, 4, 8, 0, 0)  # bytes a plain value takes, by physical type (a fixed one: its length)
# What pyarrow infers from a physical type alone, and the physical types each logical type can annotate
_PLAIN_ARROW = ("bool", "int32", "int64", "timestamp[ns]", "float", "double", "binary", "fixed_size_binary")
_BYTES_ONLY = {"STRING", "ENUM", "JSON", "BSON", "GEOMETRY", "GEOGRAPHY"}


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise FooterError(f"{what} in the footer is not UTF-8") from None


def _logical(element: dict[int, Any], kind: int, length: int) -> tuple[Any, ...]:
    """The column's logical type as (name, its parameters...), as parquet-cpp reads it: from
    ``logicalType`` (one it does not know, or one its physical type cannot hold, is "UNDEFINED"),
    else from the legacy converted type (one its physical type cannot hold is an error), else "NONE"."""
    declared = element.get(10)
    if declared is None:
        converted = element.get(6)
        if converted is None:
            return ("NONE",)
        if converted not in _CONVERTED:
            raise FooterError(f"a column in the footer has an unknown converted type {converted}")
        logical = ("DECIMAL", element.get(8, 0), element.get(7, 0)) if converted == 5 else _CONVERTED[converted]
        if not _fits(logical, kind, length):
            raise FooterError(f"a column in the footer has a converted type {converted} that its physical type "
                              f"{_PHYSICAL[kind]} cannot hold")
        return logical
    name = _LOGICAL_NAMES.get(min(declared, default=0))
    params = declared.get(min(declared, default=0))
    try:
        if name == "INT":
            logical = (name, params[1], params[2])
            if logical[1] not in (8, 16, 32, 64):
                raise FooterError(f"a column's integer type in the footer is {logical[1]} bits wide")
        elif name == "DECIMAL":
            logical = (name, params[2], params[1])
        elif name == "TIME" or name == "TIMESTAMP":
            logical = (name, _UNITS[min(params[2], default=0)], params[1])
        else:
            logical = (name,)
    except KeyError:
        raise FooterError(f"a column's {name} logical type in the footer lacks a parameter") from None
    return logical if name is not None and _fits(logical, kind, length) else ("UNDEFINED",)


def _fits(logical: tuple[Any, ...], kind: int, length: int) -> bool:
    """Whether a column of physical type ``kind`` can hold the logical type (as parquet-cpp requires)."""
    name = logical[0]
    if name == "NULL":
        return True
    if name in _BYTES_ONLY:
        return kind == _BYTE_ARRAY
    if name == "INT":
        return (kind, logical[1]) in ((_INT32, 8), (_INT32, 16), (_INT32, 32), (_INT64, 64))
    if name == "DECIMAL":
        return kind in (_INT32, _INT64, _BYTE_ARRAY, _FIXED) and 0 < logical[1] and 0 <= logical[2] <= logical[1]
    if name == "TIME":
        return kind == (_INT32 if logical[1] == "ms" else _INT64)
    sizes = {"DATE": (_INT32, 0), "TIMESTAMP": (_INT64, 0), "UUID": (_FIXED, 16), "FLOAT16": (_FIXED, 2),
             "INTERVAL": (_FIXED, 12)}
    return sizes.get(name) == (kind, length if kind == _FIXED else 0)  # MAP, LIST, VARIANT annotate groups


def _sort_order(logical: tuple[Any, ...], kind: int) -> int:
    name = logical[0]
    if name == "NONE":
        return _UNKNOWN if kind == _INT96 else _UNSIGNED if kind >= _BYTE_ARRAY else _SIGNED
    if name == "INT":
        return _SIGNED if logical[2] else _UNSIGNED
    if name in ("STRING", "ENUM", "JSON", "BSON", "UUID"):
        return _UNSIGNED
    return _SIGNED if name in ("DECIMAL", "DATE", "TIME", "TIMESTAMP", "FLOAT16") else _UNKNOWN


def _arrow_type(logical: tuple[Any, ...], kind: int, length: int) -> str:
    """``str()`` of the Arrow type pyarrow infers for a top-level column from its Parquet types alone."""
    name = logical[0]
    if name in ("NONE", "UNDEFINED", "INTERVAL", "UUID"):
        return _PLAIN_ARROW[kind] + (f"[{length}]" if kind == _FIXED else "")
    if name == "INT":
        return f"{'' if logical[2] else 'u'}int{logical[1]}"
    if name == "DECIMAL":
        return f"decimal{128 if logical[1] <= 38 else 256}({logical[1]}, {logical[2]})"
    if name == "TIME":
        return f"time{32 if logical[1] == 'ms' else 64}[{logical[1]}]"
    if name == "TIMESTAMP":
        return f"timestamp[{logical[1]}{', tz=UTC' if logical[2] else ''}]"
    plain = {"STRING": "string", "JSON": "string", "ENUM": "binary", "BSON": "binary", "DATE": "date32[day]",
             "FLOAT16": "halffloat", "NULL": "null", "GEOMETRY": "binary", "GEOGRAPHY": "binary"}
    return plain.get(name, name.lower())


class LeafColumn:
    """A leaf column of the footer's schema, as pyarrow's ``ColumnSchema``: its ``name``, its dotted
    ``path``, its ``physical_type`` and ``length`` (a fixed-length column's bytes a value, else 0)."""

    __slots__ = ("name", "path", "physical_type", "length", "_kind", "_names", "_logical", "_sort", "_arrow",
                 "_type_order")

    def __init__(self, element: dict[int, Any], names: list[bytes], path: list[str], top_level: bool) -> None:
        kind = element[1]
        if not 0 <= kind < len(_PHYSICAL):
            raise FooterError(f"a column in the footer has an unknown physical type {kind}")
        length = element.get(2, 0)
        if kind == _FIXED and not 0 < length < 1 << 31:
            raise FooterError("a fixed-length column in the footer has no valid length")
        logical = _logical(element, kind, length)
        self.name, self.path, self.physical_type, self.length = path[-1], ".".join(path), _PHYSICAL[kind], length
        self._kind, self._names, self._logical, self._sort = kind, names, logical, _sort_order(logical, kind)
        self._type_order = False  # whether the footer declares the type-defined order (set by _schema)
        arrow = _arrow_type(logical, kind, length)
        if not top_level:
            arrow = f"nested in {path[0]}"  # a struct's or list's leaf: not a column of its own
        elif element.get(3) == 2:
            arrow = f"list<{self.name}: {arrow} not null>"
        self._arrow = arrow


class FooterSchema:
    """The footer's schema, as pyarrow's ``ParquetSchema``: ``column(i)`` (a leaf), ``len()`` (the
    leaf count), ``names`` (the top-level fields') and ``arrow_type(i)``."""

    __slots__ = ("names", "_leaves")

    def __init__(self, names: list[str], leaves: list[LeafColumn]) -> None:
        self.names, self._leaves = names, leaves

    def __len__(self) -> int:
        return len(self._leaves)

    def column(self, i: int) -> LeafColumn:
        if not 0 <= i < len(self._leaves):
            raise IndexError(f"{i} out of bounds")
        return self._leaves[i]

    def arrow_type(self, i: int) -> str:
        """``str()`` of the Arrow type pyarrow infers for leaf ``i`` from the Parquet types alone
        (without the ARROW:schema metadata); a leaf of a struct or list says it is nested instead."""
        return self.column(i)._arrow


class ChunkStatistics:
    """A column chunk's statistics, as pyarrow's ``Statistics``: ``has_min_max``, ``min``, ``max``
    (None without min and max), ``has_null_count`` and ``null_count`` (None without one)."""

    __slots__ = ("has_min_max", "has_null_count", "null_count", "_low", "_high", "_column")

    def __init__(self, raw: dict[int, Any], column: LeafColumn) -> None:
        # the deprecated min and max hold only for a signed order: their writers compared signed bytes
        low, high = (raw.get(6), raw.get(5)) if column._type_order else (raw.get(2), raw.get(1))
        usable = column._sort != _UNKNOWN if column._type_order else column._sort == _SIGNED
        self.has_min_max = usable and low is not None and high is not None
        self.null_count = raw.get(3)
        self.has_null_count = self.null_count is not None
        self._low, self._high, self._column = low, high, column

    @property
    def min(self) -> Any:
        return _typed(self._column, self._low) if self.has_min_max else None

    @property
    def max(self) -> Any:
        return _typed(self._column, self._high) if self.has_min_max else None


def _typed(column: LeafColumn, raw: bytes) -> Any:
    """A statistic's plain-encoded value, typed as pyarrow types it (a logical type pyarrow makes a
    date, time, timestamp or decimal of is left its physical value here)."""
    kind = column._kind
    width = column.length if kind == _FIXED else _WIDTHS[kind]
    if len(raw) < width:
        raise FooterError("a statistic in the footer is shorter than its column's values")
    if kind == _INT32 or kind == _INT64:
        # an integer type narrower than its physical one wraps, as pyarrow casts the value to it
        bits, signed = column._logical[1:] if column._logical[0] == "INT" else (8 * width, True)
        value = int.from_bytes(raw[:width], "little") & ((1 << bits) - 1)
        return value - (1 << bits) if signed and value >> (bits - 1) else value
    if kind == _BYTE_ARRAY:
        return _text(raw, "a string statistic") if column._logical[0] == "STRING" else raw
    if kind == _BOOLEAN:
        return bool(raw[0] & 1)
    if kind == _FLOAT or kind == _DOUBLE_TYPE:
        return unpack_from("<f" if kind == _FLOAT else "<d", raw)[0]
    return raw[:width]


def _believed(stats: ChunkStatistics, column: LeafColumn, age: int) -> bool:
    """Whether pyarrow shows the statistics at all of a chunk written by a writer of ``age``."""
    if not age:
        return True
    width = column.length if column._kind == _FIXED else _WIDTHS[column._kind]
    same = stats.has_min_max and (stats._low[:width or None] == stats._high[:width or None])
    if column._sort != _SIGNED and not same:
        return False
    return column._kind < _BYTE_ARRAY or age != _OLDEST


def _writer_age(created_by: str) -> int:
    """_OLD for parquet-mr before 1.10.0 and parquet-cpp before 1.3.0, _OLDEST for parquet-mr before 1.8.0."""
    application, _, version = created_by.partition(" version ")
    application = application.strip()
    if application not in ("parquet-mr", "parquet-cpp"):
        return 0
    numbers = []
    for part in version.strip().split(".")[:3]:
        digits = len(part) - len(part.lstrip("0123456789"))
        numbers.append(int(part[:digits]) if digits else 0)
        if digits < len(part):
            break
    release = tuple(numbers + [0] * (3 - len(numbers)))
    if application == "parquet-cpp":
        return _OLD if release < (1, 3, 0) else 0
    return _OLDEST if release < (1, 8, 0) else _OLD if release < (1, 10, 0) else 0


class ColumnChunk:
    """One column chunk of a row group, as pyarrow's ``ColumnChunkMetaData`` (``type_length`` is its
    leaf column's ``length``, which pyarrow keeps on the schema only)."""

    __slots__ = ("path_in_schema", "physical_type", "num_values", "total_compressed_size", "total_uncompressed_size",
                 "data_page_offset", "dictionary_page_offset", "has_dictionary_page", "encodings", "compression",
                 "type_length", "statistics")

    def __init__(self, meta: dict[int, Any], column: LeafColumn, encodings: tuple[str, ...], age: int) -> None:
        codec = meta[4]
        if codec not in _CODECS:  # pyarrow aborts the process on one
            raise FooterError(f"a column chunk in the footer names an unknown compression codec {codec}")
        self.path_in_schema, self.physical_type, self.type_length = column.path, column.physical_type, column.length
        self.num_values, self.total_uncompressed_size, self.total_compressed_size = meta[5], meta[6], meta[7]
        self.data_page_offset, self.dictionary_page_offset = meta[9], meta.get(11)
        self.has_dictionary_page = self.dictionary_page_offset is not None
        self.encodings = encodings
        self.compression = _CODECS[codec]
        stats = meta.get(12)
        if stats is not None:
            stats = ChunkStatistics(stats, column)
            if not _believed(stats, column, age):
                stats = None
        self.statistics = stats


class FooterRowGroup:
    """One row group, as pyarrow's ``RowGroupMetaData``: ``num_rows``, ``num_columns``,
    ``total_byte_size`` and ``column(i)``, a ColumnChunk."""

    __slots__ = ("num_rows", "num_columns", "total_byte_size", "_chunks")

    def __init__(self, num_rows: int, total_byte_size: int, chunks: list[ColumnChunk]) -> None:
        self.num_rows, self.total_byte_size = num_rows, total_byte_size
        self.num_columns, self._chunks = len(chunks), chunks

    def column(self, i: int) -> ColumnChunk:
        if not 0 <= i < len(self._chunks):
            raise IndexError(f"{i} out of bounds")
        return self._chunks[i]


class Footer:
    """A parsed footer, as pyarrow's ``FileMetaData``: ``num_rows``, ``num_row_groups``,
    ``num_columns`` (leaves), ``serialized_size``, ``created_by``, ``schema`` and ``row_group(i)``."""

    __slots__ = ("num_rows", "num_row_groups", "num_columns", "serialized_size", "created_by", "schema", "_groups")

    def __init__(self, num_rows: int, size: int, created_by: str, schema: FooterSchema,
                 groups: list[FooterRowGroup]) -> None:
        self.num_rows, self.serialized_size, self.created_by, self.schema = num_rows, size, created_by, schema
        self.num_row_groups, self.num_columns, self._groups = len(groups), len(schema), groups

    def row_group(self, i: int) -> FooterRowGroup:
        if not 0 <= i < len(self._groups):
            raise IndexError(f"{i} out of bounds")
        return self._groups[i]


def parse_footer(data: bytes | memoryview) -> Footer:
    """The footer ``data`` holds: a Parquet file's serialized ``FileMetaData``, the bytes between its
    column chunks and the footer's length and magic. FooterError if it cannot be parsed; bytes after
    the ``FileMetaData`` are ignored, as pyarrow ignores them (``serialized_size`` counts those read)."""
    data = bytes(data)
    try:
        fields, size = _struct(data, 0, _FILE, 0)
    except IndexError:
        raise FooterError(_ENDS) from None
    if not {1, 2, 3, 4} <= fields.keys():
        raise FooterError("the footer lacks its version, schema, row count or row groups")
    schema = _schema(fields[2], fields.get(7))
    created_by = _text(fields.get(6, b""), "the writer's name")
    age = _writer_age(created_by)
    leaves, groups, encodings = schema._leaves, [], {}
    for group in fields[4]:
        if not {1, 2, 3} <= group.keys():
            raise FooterError("a row group in the footer lacks its columns, size or row count")
        if len(group[1]) != len(leaves):
            raise FooterError(_MISMATCH)
        chunks = []
        try:
            for chunk, column in zip(group[1], leaves):
                meta = chunk[3]
                if meta[1] != column._kind or meta[3] != column._names:
                    raise FooterError(_MISMATCH)
                codes = tuple(meta[2])
                names = encodings.get(codes)
                if names is None:
                    names = encodings[codes] = tuple(_ENCODINGS.get(code, "UNKNOWN") for code in codes)
                chunks.append(ColumnChunk(meta, column, names, age))
        except KeyError:
            raise FooterError("a column chunk in the footer lacks a field Parquet requires (encrypted "
                              "columns lack all)") from None
        groups.append(FooterRowGroup(group[3], group[2], chunks))
    return Footer(fields[3], size, created_by, schema, groups)


def _schema(elements: list[dict[int, Any]], orders: list[dict[int, Any]] | None) -> FooterSchema:
    """The schema the footer's flattened tree of elements describes (the first is the root)."""
    if not elements:
        raise FooterError("the footer's schema is empty")
    count = elements[0].get(5, 0)
    if count < 0 or (not count and len(elements) > 1):
        raise FooterError("the footer's schema root declares no valid number of columns")
    names: list[str] = []
    leaves: list[LeafColumn] = []
    groups: list[list[Any]] = [[count, [], []]]  # each open group: children left, raw names, names
    pos = 1
    while groups:
        group = groups[-1]
        if not group[0]:
            groups.pop()
            continue
        group[0] -= 1
        if pos == len(elements):
            raise FooterError("the footer's schema declares more columns than it holds")
        element = elements[pos]
        pos += 1
        if 4 not in element:
            raise FooterError("a column in the footer's schema has no name")
        raw, name = element[4], _text(element[4], "a column's name")
        if len(groups) == 1:
            names.append(name)
        children = element.get(5, 0)
        if not children and 1 in element:
            leaves.append(LeafColumn(element, group[1] + [raw], group[2] + [name], len(groups) == 1))
        elif children < 0:
            raise FooterError("a group in the footer's schema declares a negative number of columns")
        elif len(groups) > _MAX_DEPTH:  # each level copies its path: a deep one would take quadratic time
            raise FooterError("the footer's schema nests groups deeper than Parquet's do")
        else:
            groups.append([children, group[1] + [raw], group[2] + [name]])
    if pos != len(elements):
        raise FooterError("the footer's schema holds more elements than its root's columns take")
    if orders is not None and len(orders) != len(leaves):
        raise FooterError("the footer's column orders do not match its columns")
    for i, column in enumerate(leaves):
        column._type_order = orders is not None and 1 in orders[i]
    return FooterSchema(names, leaves)
