"""format/footer.py against pyarrow: every attribute it mirrors, on the sample profiles' tables, on
files pyarrow writes with varied options and on footers written here byte by byte (legacy types,
deprecated statistics, old writers); and damaged footers, which parse or raise FooterError."""

from __future__ import annotations

import io
import itertools
import random
import struct as st
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py.format.footer import FooterError, parse_footer

# The hand-built footers below (a lone min_value, a legacy type on the wrong physical type: no writer makes
# them) follow the pyarrow the suite installs; the oldest pyarrow declared (15) read some of them otherwise.
HAND_BUILT = pytest.mark.skipif(int(pa.__version__.split(".")[0]) < 26,
                                reason="edge-case footers are compared with pyarrow 26's reading of them")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_profiles"


def footer_of(parquet: bytes) -> bytes:
    """The serialized FileMetaData of a Parquet file: before its 4-byte length and "PAR1"."""
    size = int.from_bytes(parquet[-8:-4], "little")
    return parquet[-8 - size: -8]


def written(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def differences(parquet: bytes) -> list[tuple[str, Any, Any]]:
    """(attribute, ours, pyarrow's) for every attribute footer.py mirrors that differs from pyarrow's."""
    ours, theirs = parse_footer(footer_of(parquet)), pq.ParquetFile(pa.BufferReader(parquet)).metadata
    found = []

    def same(what: str, a: Any, b: Any) -> None:
        if (a != b or type(a) is not type(b)) and not (a != a and b != b):  # NaN is NaN
            found.append((what, a, b))

    for name in ("num_rows", "num_row_groups", "num_columns", "serialized_size", "created_by"):
        same(name, getattr(ours, name), getattr(theirs, name))
    same("len(schema)", len(ours.schema), len(theirs.schema))
    for i in range(theirs.num_columns):
        for name in ("name", "path", "physical_type", "length"):
            same(f"column {i} {name}", getattr(ours.schema.column(i), name), getattr(theirs.schema.column(i), name))
    for g in range(theirs.num_row_groups):
        group, expected = ours.row_group(g), theirs.row_group(g)
        for name in ("num_rows", "num_columns", "total_byte_size"):
            same(f"row group {g} {name}", getattr(group, name), getattr(expected, name))
        for c in range(expected.num_columns):
            chunk, meta = group.column(c), expected.column(c)
            for name in ("path_in_schema", "physical_type", "num_values", "total_compressed_size",
                         "total_uncompressed_size", "data_page_offset", "dictionary_page_offset",
                         "has_dictionary_page", "encodings", "compression"):
                same(f"chunk {g}.{c} {name}", getattr(chunk, name), getattr(meta, name))
            same(f"chunk {g}.{c} type_length", chunk.type_length, theirs.schema.column(c).length)
            stats, expected_stats = chunk.statistics, meta.statistics
            same(f"chunk {g}.{c} statistics is None", stats is None, expected_stats is None)
            if stats is not None and expected_stats is not None:
                # a date, time, timestamp or decimal pyarrow boxes is left its physical value (min_raw)
                boxed = str(expected_stats.logical_type).split("(")[0] in ("Date", "Time", "Timestamp", "Decimal")
                for name in ("has_min_max", "has_null_count", "null_count", "min", "max"):
                    same(f"chunk {g}.{c} statistics {name}", getattr(stats, name),
                         getattr(expected_stats, name + ("_raw" if boxed and name in ("min", "max") else "")))
    return found


# GIVEN every table of every sample profile (stored ZIP members) WHEN its footer is parsed
# THEN every attribute is pyarrow's, row group by row group, column by column
@pytest.mark.parametrize("profile", sorted(SAMPLES.glob("*/**/*.pop")), ids=lambda path: path.parent.name)
def test_every_table_of_the_sample_profiles_reads_as_pyarrow_reads_it(profile: Path) -> None:
    with zipfile.ZipFile(profile) as container:
        members = [name for name in container.namelist() if name.endswith(".parquet")]
        assert members
        for name in members:
            assert differences(container.read(name)) == [], name


def every_type(rows: int) -> pa.Table:
    """A table of each type the brief names, with nulls and each type's extremes (its signedness shows)."""
    def column(values: list[Any], kind: pa.DataType) -> pa.Array:
        return pa.array([values[i % len(values)] if i % 7 else None for i in range(rows)], kind)

    table = {"string": column(["b", "a", "zé"], pa.string()), "binary": column([b"\xff", b"\x00z"], pa.binary()),
             "bool": column([True, False], pa.bool_()), "float": column([1.5, -2.25], pa.float32()),
             "double": column([1e300, -0.5], pa.float64())}
    for bits in (8, 16, 32, 64):
        table[f"int{bits}"] = column([-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, 0], getattr(pa, f"int{bits}")())
        table[f"uint{bits}"] = column([0, 2 ** bits - 1, 1], getattr(pa, f"uint{bits}")())
    return pa.table(table)


OPTIONS = {
    "defaults": {},
    "no statistics": {"write_statistics": False},
    "some statistics": {"write_statistics": ["string", "uint32"]},
    "no dictionary": {"use_dictionary": False},
    "uncompressed": {"compression": "none"},
    "snappy": {"compression": "snappy"},
    "zstd": {"compression": "zstd"},
    "lz4, gzip and brotli": {"compression": {"int8": "lz4", "int16": "gzip", "int32": "brotli"}},
    "data page v2": {"data_page_version": "2.0"},
    "format 1.0": {"version": "1.0"},
    "delta and byte-stream-split encodings": {"use_dictionary": False, "column_encoding": {
        "int64": "DELTA_BINARY_PACKED", "binary": "DELTA_LENGTH_BYTE_ARRAY", "string": "DELTA_BYTE_ARRAY",
        "double": "BYTE_STREAM_SPLIT"}},
    "page index and checksums": {"write_page_index": True, "write_page_checksum": True},
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_files_written_with_varied_options_read_as_pyarrow_reads_them(options: dict[str, Any]) -> None:
    # GIVEN every type in three row groups, written with the options WHEN parsed THEN all is pyarrow's
    parquet = written(every_type(100), row_group_size=40, **options)
    assert pq.ParquetFile(pa.BufferReader(parquet)).metadata.num_row_groups == 3
    assert differences(parquet) == []


def test_the_figures_of_a_written_file_are_those_pyarrow_reads() -> None:
    # GIVEN 100 rows of every type, uncompressed, with statistics WHEN parsed THEN a person's figures hold
    footer = parse_footer(footer_of(written(every_type(100), row_group_size=40, compression="none")))
    assert (footer.num_rows, footer.num_row_groups, footer.num_columns) == (100, 3, 13)
    assert footer.schema.names == list(every_type(1).column_names)
    assert [footer.row_group(g).num_rows for g in range(3)] == [40, 40, 20]
    uint64 = footer.row_group(0).column(footer.schema.names.index("uint64"))
    assert (uint64.path_in_schema, uint64.physical_type, uint64.compression) == ("uint64", "INT64", "UNCOMPRESSED")
    assert (uint64.statistics.min, uint64.statistics.max, uint64.statistics.null_count) == (0, 2 ** 64 - 1, 6)
    int8 = footer.row_group(2).column(footer.schema.names.index("int8")).statistics
    assert (int8.min, int8.max) == (-128, 127)
    string = footer.row_group(0).column(0).statistics
    assert (string.min, string.max) == ("a", "zé")


def test_an_empty_table_has_no_row_groups_as_pyarrow_reads_it() -> None:
    # GIVEN a writer closed before any row WHEN its footer is parsed THEN it has columns and no row group
    sink = io.BytesIO()
    pq.ParquetWriter(sink, every_type(0).schema).close()
    footer = parse_footer(footer_of(sink.getvalue()))
    assert (footer.num_rows, footer.num_row_groups, footer.num_columns) == (0, 0, 13)
    assert differences(sink.getvalue()) == []
    with pytest.raises(IndexError):
        footer.row_group(0)


def test_nested_columns_read_as_pyarrow_reads_them() -> None:
    # GIVEN a struct, a list and a map beside a flat column WHEN parsed THEN the leaves are pyarrow's,
    # names holds the top-level fields, and a nested leaf's Arrow type says it is nested
    table = pa.table({"a": [1, 2], "s": [{"x": 1, "y": "u"}, {"x": 2, "y": "v"}], "l": [[1, 2], [3]],
                      "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))})
    parquet = written(table)
    assert differences(parquet) == []
    schema = parse_footer(footer_of(parquet)).schema
    assert schema.names == ["a", "s", "l", "m"]
    assert [schema.column(i).path for i in range(len(schema))] == [
        "a", "s.x", "s.y", "l.list.element", "m.key_value.key", "m.key_value.value"]
    assert [schema.arrow_type(i) for i in range(2)] == ["int64", "nested in s"]


def test_arrow_types_are_those_pyarrow_infers_without_the_stored_schema() -> None:
    # GIVEN every type and then some, written without the ARROW:schema metadata
    more = {"ms": pa.timestamp("ms"), "us_utc": pa.timestamp("us", "UTC"), "ns": pa.timestamp("ns"),
            "date": pa.date32(), "time_ms": pa.time32("ms"), "time_us": pa.time64("us"),
            "decimal": pa.decimal128(12, 3), "fixed": pa.binary(16), "large_string": pa.large_string()}
    table = every_type(3)
    for name, kind in more.items():
        table = table.append_column(name, pa.nulls(3, kind))
    parquet = written(table, store_schema=False)
    # WHEN parsed THEN each column's Arrow type is the one pyarrow reads back
    schema, inferred = parse_footer(footer_of(parquet)).schema, pq.ParquetFile(pa.BufferReader(parquet)).schema_arrow
    assert [schema.arrow_type(i) for i in range(len(schema))] == [str(field.type) for field in inferred]
    assert schema.arrow_type(schema.names.index("uint16")) == "uint16"


# The Thrift compact protocol, written here to make footers pyarrow's writer never makes
BOOL, BYTE, I32, I64, BINARY, LIST, STRUCT = 1, 3, 5, 6, 8, 9, 12


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def value(kind: int, item: Any) -> bytes:
    if kind in (I32, I64):
        return varint((item << 1) ^ (item >> 63))
    if kind == BYTE:
        return bytes([item & 0xFF])
    if kind == BINARY:
        item = item.encode() if isinstance(item, str) else item
        return varint(len(item)) + item
    if kind == LIST:
        items_kind, items = item
        size = len(items)
        head = bytes([size << 4 | items_kind]) if size < 15 else bytes([0xF0 | items_kind]) + varint(size)
        return head + b"".join(value(items_kind, x) for x in items)
    return item  # a struct, already written


def struct(*fields: tuple[int, int, Any]) -> bytes:
    """A struct of (field id, type, value) fields; a field whose value is None is left out."""
    out, last = bytearray(), 0
    for fid, kind, item in fields:
        if item is None:
            continue
        code = (1 if item else 2) if kind == BOOL else kind
        out += bytes([(fid - last) << 4 | code]) if 0 < fid - last < 16 else bytes([code]) + varint(fid << 1)
        out += b"" if kind == BOOL else value(kind, item)
        last = fid
    return bytes(out + b"\x00")


def logical(member: int, *fields: tuple[int, int, Any]) -> bytes:
    return struct((member, STRUCT, struct(*fields)))


def chunk(kind: int, codec: int = 0, stats: bytes | None = None) -> bytes:
    """A column chunk of column "x": 3 values in 40 bytes at offset 4."""
    meta = struct((1, I32, kind), (2, LIST, (I32, [0, 3])), (3, LIST, (BINARY, ["x"])), (4, I32, codec),
                  (5, I64, 3), (6, I64, 40), (7, I64, 40), (9, I64, 4), (12, STRUCT, stats))
    return struct((2, I64, 4), (3, STRUCT, meta))


def file_footer(column: bytes, chunks: list[bytes], created_by: str | None = "parquet-cpp-arrow version 26.0.1",
                type_order: bool = True) -> bytes:
    """The footer of a file of one column (its schema element) and one row group of ``chunks``."""
    schema = [struct((4, BINARY, "schema"), (5, I32, 1)), column]
    group = struct((1, LIST, (STRUCT, chunks)), (2, I64, 40), (3, I64, 3))
    orders = (STRUCT, [struct((1, STRUCT, struct()))]) if type_order else None
    return struct((1, I32, 2), (2, LIST, (STRUCT, schema)), (3, I64, 3), (4, LIST, (STRUCT, [group])),
                  (6, BINARY, created_by), (7, LIST, orders))


def one_column_footer(kind: int, length: int | None = None, converted: int | None = None,
                      annotation: bytes | None = None, created_by: str | None = "parquet-cpp-arrow version 26.0.1",
                      type_order: bool = True, precision: int | None = None, codec: int = 0,
                      **statistics: Any) -> bytes:
    """The footer of a file of one column "x" and one row group holding one chunk of 3 values."""
    column = struct((1, I32, kind), (2, I32, length), (3, I32, 1), (4, BINARY, "x"), (6, I32, converted),
                    (7, I32, 2 if precision else None), (8, I32, precision), (10, STRUCT, annotation))
    names = ("max", "min", "null_count", "distinct_count", "max_value", "min_value")
    stats = struct(*((i + 1, I64 if i in (2, 3) else BINARY, statistics.get(name)) for i, name in enumerate(names)))
    return file_footer(column, [chunk(kind, codec, stats if statistics else None)], created_by, type_order)


def as_file(footer: bytes) -> bytes:
    return b"PAR1" + footer + st.pack("<I", len(footer)) + b"PAR1"


INT = 10  # LogicalType's members used below
# name: (physical type, length, converted type, logical type, a low and a high plain-encoded value)
TYPES = {
    "bool": (0, None, None, None, b"\x00", b"\x01"),
    "int32": (1, None, None, None, st.pack("<i", -1), st.pack("<i", 5)),
    "int64": (2, None, None, None, st.pack("<q", -1), st.pack("<q", 5)),
    "int96": (3, None, None, None, b"\x01" * 12, b"\x02" * 12),
    "float": (4, None, None, None, st.pack("<f", -1.5), st.pack("<f", 2.0)),
    "double": (5, None, None, None, st.pack("<d", -1.5), st.pack("<d", 2.0)),
    "binary": (6, None, None, None, b"a", b"\xffz"),
    "fixed": (7, 4, None, None, b"abcd", b"\xffbcd"),
    "string": (6, None, 0, logical(1), b"a", b"z"),
    "utf8 (converted only)": (6, None, 0, None, b"a", b"z"),
    "uint32": (1, None, 13, logical(INT, (1, BYTE, 32), (2, BOOL, False)), st.pack("<i", 1), st.pack("<i", -1)),
    "uint64 (converted only)": (2, None, 14, None, st.pack("<q", 1), st.pack("<q", -1)),
    "int8 (converted only)": (1, None, 15, None, st.pack("<i", -1), st.pack("<i", 200)),
    "uint8": (1, None, 11, logical(INT, (1, BYTE, 8), (2, BOOL, False)), st.pack("<i", 1), st.pack("<i", 300)),
    "int16 on int64 (undefined)": (2, None, None, logical(INT, (1, BYTE, 16), (2, BOOL, True)), b"\x01" * 8,
                                   b"\x02" * 8),
    "decimal": (6, None, 5, logical(5, (1, I32, 2), (2, I32, 5)), b"\x01", b"\x02"),
    "interval": (7, 12, 21, None, b"\x01" * 12, b"\x02" * 12),
    "date": (1, None, 6, logical(6), st.pack("<i", 1), st.pack("<i", 2)),
    "timestamp (converted only)": (2, None, 9, None, st.pack("<q", 1), st.pack("<q", 2)),
    "enum": (6, None, 4, logical(4), b"a", b"b"),
    "json": (6, None, 19, logical(12), b"a", b"b"),
    "uuid": (7, 16, None, logical(14), b"\x01" * 16, b"\x02" * 16),
    "float16": (7, 2, None, logical(15), b"\x00\x3c", b"\x00\x40"),
    "null": (1, None, None, logical(11), st.pack("<i", 1), st.pack("<i", 2)),
}
WRITERS = ("parquet-cpp-arrow version 26.0.1", None, "parquet-mr version 1.9.0 (build x)",
           "parquet-mr version 1.7.0 (build x)", "parquet-cpp version 1.2.0", "parquet-mr version 1.11.0 (build x)",
           "parquet-cpp version 1.5.0", "impala version 1.0 (build x)")


@HAND_BUILT
@pytest.mark.parametrize("name", TYPES)
def test_statistics_are_pyarrows_for_every_column_order_old_writer_and_min_max_field(name: str) -> None:
    # GIVEN one column of the type, its statistics in the deprecated min/max, in min_value/max_value,
    # in both, equal or not, or only a null count; the footer declaring a type-defined column order
    # or not, written by each writer (parquet-mr before 1.10.0 and parquet-cpp before 1.3.0 wrote wrong
    # statistics for unsigned orders, parquet-mr before 1.8.0 for byte arrays)
    kind, length, converted, annotation, low, high = TYPES[name]
    variants = {"new": {"min_value": low, "max_value": high}, "new, equal": {"min_value": low, "max_value": low},
                "only min_value": {"min_value": low, "null_count": 0}, "deprecated": {"min": low, "max": high},
                "deprecated, equal": {"min": low, "max": low}, "null count": {"null_count": 2},
                "both": {"min": low, "max": high, "min_value": high, "max_value": high, "null_count": 1}}
    for writer, type_order, variant in itertools.product(WRITERS, (True, False), variants):
        footer = one_column_footer(kind, length, converted, annotation, writer, type_order,
                                   precision=5 if converted == 5 else None, **variants[variant])
        # WHEN parsed THEN the chunk's statistics are pyarrow's, or both are None
        assert differences(as_file(footer)) == [], (writer, type_order, variant)


@HAND_BUILT
def test_legacy_converted_types_and_undefined_logical_types_infer_pyarrows_arrow_types() -> None:
    # GIVEN each type above (legacy converted types alone, logical types pyarrow reads as undefined)
    for name, (kind, length, converted, annotation, _, _) in TYPES.items():
        footer = one_column_footer(kind, length, converted, annotation, precision=5 if converted == 5 else None)
        inferred = pq.ParquetFile(pa.BufferReader(as_file(footer))).metadata.schema.to_arrow_schema()
        # WHEN parsed THEN its Arrow type is the one pyarrow infers
        assert parse_footer(footer).schema.arrow_type(0) == str(inferred.field(0).type), name


def test_codecs_are_named_as_pyarrow_names_them() -> None:
    # GIVEN a chunk of each codec of parquet.thrift WHEN parsed THEN pyarrow's name: LZ4_RAW is "LZ4",
    # and Thrift's LZ4 (Hadoop's framing) is "UNKNOWN"
    names = [parse_footer(one_column_footer(1, codec=codec)).row_group(0).column(0).compression for codec in range(8)]
    assert names == ["UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "UNKNOWN", "ZSTD", "LZ4"]
    assert differences(as_file(one_column_footer(1, codec=5))) == []


def test_footers_pyarrow_aborts_the_process_on_raise_footer_error_here() -> None:
    # GIVEN an unknown codec WHEN parsed THEN FooterError (pyarrow's C++ terminates the process)
    with pytest.raises(FooterError, match="^a column chunk in the footer names an unknown compression codec 8$"):
        parse_footer(one_column_footer(1, codec=8))
    # GIVEN an INT32 statistic of two bytes WHEN its min is read THEN FooterError (pyarrow: the same abort)
    footer = parse_footer(one_column_footer(1, min_value=b"\x01\x00", max_value=st.pack("<i", 5)))
    statistics = footer.row_group(0).column(0).statistics
    assert statistics.has_min_max and statistics.max == 5
    with pytest.raises(FooterError, match="^a statistic in the footer is shorter than its column's values$"):
        statistics.min


def test_a_footer_cut_anywhere_raises_footer_error() -> None:
    # GIVEN the smallest footer of the sample profiles WHEN each of its prefixes is parsed
    with zipfile.ZipFile(SAMPLES / "mnist_inference" / "profile.pop") as container:
        footer = min((footer_of(container.read(name)) for name in container.namelist() if name.endswith(".parquet")),
                     key=len)
    assert parse_footer(footer).num_columns > 0
    # THEN each raises FooterError (the whole footer's last byte ends its outermost struct)
    for size in range(len(footer)):
        with pytest.raises(FooterError):
            parse_footer(footer[:size])
    assert str(pytest.raises(FooterError, parse_footer, footer[:-1]).value) == "the footer ends inside a field"


def every_attribute(footer: Any) -> None:
    """Reads everything a footer offers (a statistic a mutation left too short may raise FooterError)."""
    for i in range(len(footer.schema)):
        footer.schema.column(i).path, footer.schema.arrow_type(i)
    for g in range(footer.num_row_groups):
        for c in range(footer.row_group(g).num_columns):
            stats = footer.row_group(g).column(c).statistics
            if stats is not None:
                try:
                    stats.min, stats.max
                except FooterError:
                    pass


def test_thousands_of_seeded_mutations_parse_or_raise_footer_error() -> None:
    # GIVEN the sample's trace footer with 1 to 4 bytes changed, inserted, deleted or bit-flipped at random
    with zipfile.ZipFile(SAMPLES / "mnist_inference" / "profile.pop") as container:
        footer = footer_of(container.read("trace.parquet"))
    rng, outcomes = random.Random(20240601), {"parsed": 0, "refused": 0}
    for _ in range(4000):
        damaged = bytearray(footer)
        for _ in range(rng.randint(1, 4)):
            at, how = rng.randrange(len(damaged)), rng.random()
            if how < 0.5:
                damaged[at] = rng.randrange(256)
            elif how < 0.7:
                damaged[at:at] = rng.randbytes(rng.randint(1, 3))
            elif how < 0.85:
                del damaged[at: at + rng.randint(1, 3)]
            else:
                damaged[at] ^= 1 << rng.randrange(8)
        # WHEN parsed and read THEN it parses or raises FooterError, nothing else
        try:
            every_attribute(parse_footer(bytes(damaged)))
            outcomes["parsed"] += 1
        except FooterError:
            outcomes["refused"] += 1
    assert outcomes["parsed"] > 100 and outcomes["refused"] > 100


def test_random_bytes_parse_or_raise_footer_error() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        try:
            every_attribute(parse_footer(rng.randbytes(rng.randint(0, 40))))
        except FooterError:
            pass


def test_a_struct_nested_deeper_than_parquets_raises_footer_error() -> None:
    # GIVEN a footer whose unknown field 20 nests 40 structs WHEN parsed THEN FooterError says so
    nested = struct()
    for _ in range(40):
        nested = struct((1, STRUCT, nested))
    with pytest.raises(FooterError, match="^the footer nests structs or lists deeper than Parquet's do$"):
        parse_footer(struct((20, STRUCT, nested)))
    # AND lists of lists the same
    lists = b"\x19" * 2000 + b"\x00" * 2000  # list<list> of one item, 2000 deep
    with pytest.raises(FooterError, match="^the footer nests structs or lists deeper than Parquet's do$"):
        parse_footer(bytes([0x09, 0x28]) + lists)


def test_a_list_longer_than_its_bytes_raises_footer_error() -> None:
    # GIVEN a schema list declaring 2**40 elements in a few bytes WHEN parsed THEN FooterError, no allocation
    with pytest.raises(FooterError, match="^a list in the footer declares more items than its bytes hold$"):
        parse_footer(bytes([0x15, 0x04, 0x19, 0xFC]) + varint(2 ** 40) + b"\x00" * 8)


def test_an_integer_longer_than_64_bits_raises_footer_error() -> None:
    # GIVEN a version of 11 varint bytes, or of 10 whose last holds bits past the 64th
    for version in (b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02", b"\x80" * 30 + b"\x00"):
        # WHEN parsed THEN FooterError says so
        with pytest.raises(FooterError, match="^the footer holds an integer longer than 64 bits$"):
            parse_footer(b"\x15" + version + b"\x00")
    # AND a skipped field's the same
    with pytest.raises(FooterError, match="^the footer holds an integer longer than 64 bits$"):
        parse_footer(b"\x06" + varint(40 << 1) + b"\xff" * 11 + b"\x01\x00")


def test_a_schema_that_does_not_match_the_row_groups_raises_footer_error() -> None:
    column = struct((1, I32, 1), (3, I32, 1), (4, BINARY, "x"))
    assert parse_footer(file_footer(column, [chunk(1)])).num_columns == 1
    # GIVEN a one-column schema over a row group of two chunks, or of a chunk of another physical type
    for chunks in ([chunk(1), chunk(1)], [chunk(2)], []):
        # WHEN parsed THEN FooterError says so
        with pytest.raises(FooterError, match="^the footer's schema does not match its row groups' columns$"):
            parse_footer(file_footer(column, chunks))


def test_bytes_after_the_footer_are_ignored_as_pyarrow_ignores_them() -> None:
    footer = one_column_footer(1)
    assert parse_footer(footer + b"junk").serialized_size == len(footer)
    assert parse_footer(memoryview(b"junk" + footer)[4:]).serialized_size == len(footer)
    assert differences(as_file(footer + b"junk")) == []
