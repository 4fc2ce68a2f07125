"""The page check `popvision sql` makes on the bytes DuckDB reads (format/pages.py), the views that
check values as DuckDB computes (values.sql_checked), and the reader's memory of what it checked."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py.sql import run_query
from popvision_py.format import open_profile
from popvision_py.format import schema as S
from popvision_py.format.memberfs import MemberFileSystem
from popvision_py.format.pages import PageError, check_chunk
from popvision_py.format.values import sql_checked

SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "mnist_inference" / "profile.pop"


def member(table: str, path: Path = SAMPLE) -> bytes:
    with open_profile(path) as profile:
        offset, size = profile.member_span(table)
        return profile.read_at(offset, size)


@pytest.fixture(scope="module")
def gpu_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile imported from a GPU trace (tests/importer/test_gpu_timeline.py's): its kernels table is filled."""
    from tests.importer.test_gpu_timeline import import_gpu_trace

    return import_gpu_trace(tmp_path_factory.mktemp("gpu"))


def chunks(data: bytes):
    """(first byte, metadata) of every column chunk of a Parquet file."""
    footer = pq.ParquetFile(io.BytesIO(data)).metadata
    for g in range(footer.num_row_groups):
        for c in range(footer.num_columns):
            meta = footer.row_group(g).column(c)
            yield (meta.dictionary_page_offset if meta.has_dictionary_page else meta.data_page_offset), meta


def largest(data: bytes):
    return max(chunks(data), key=lambda chunk: chunk[1].total_compressed_size)


@pytest.mark.parametrize("table", list(S.TABLES))
def test_every_chunk_the_writer_wrote_passes(table: str, gpu_profile: Path) -> None:
    # GIVEN each table of a profile the engine wrote (the sample's schema 4), or the import of a GPU trace for a
    # table of a later schema (kernels) WHEN each column chunk's pages are checked THEN all pass
    data = member(table) if S.TABLES[table].since <= 4 else member(table, gpu_profile)
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_rows > 0 or table in ("ops", "variables")
    for first, meta in chunks(data):
        check_chunk(data[first: first + meta.total_compressed_size], meta)


def test_a_flipped_byte_in_a_page_fails_its_checksum() -> None:
    # GIVEN the trace's largest chunk with one byte of its last page's data flipped
    data = member("trace")
    first, meta = largest(data)
    chunk = bytearray(data[first: first + meta.total_compressed_size])
    chunk[-1] ^= 0x10
    # WHEN it is checked THEN the page's CRC-32 does not match
    with pytest.raises(PageError, match="does not match its checksum"):
        check_chunk(bytes(chunk), meta)


def test_a_page_header_that_disagrees_with_the_footer_is_refused() -> None:
    # GIVEN a chunk whose first page header claims one more value than it holds, its CRC still right
    # (a header is not under the page's checksum)
    table = pa.table({"x": pa.array(range(1000), pa.int64())})
    sink = io.BytesIO()
    pq.write_table(table, sink, use_dictionary=False, compression="none", write_page_checksum=True)
    data = sink.getvalue()
    first, meta = next(chunks(data))
    chunk = bytearray(data[first: first + meta.total_compressed_size])
    # the header's fields in Thrift's compact protocol: type, sizes, crc, then the data page header,
    # whose first field (0x15: field 1, i32) is num_values, 1000 zigzagged: 0xd0 0x0f
    at = bytes(chunk).index(b"\x1c\x15\xd0\x0f") + 2  # 0x1c: field 5 (data page header, after the crc), a struct
    chunk[at] = 0xD2  # 1001 values
    assert zlib.crc32(bytes(chunk)) != zlib.crc32(data[first: first + meta.total_compressed_size])
    # WHEN it is checked THEN the count is refused against the footer's
    with pytest.raises(PageError, match="hold 1001 values, its footer says 1000"):
        check_chunk(bytes(chunk), meta)


def test_a_chunk_cut_short_is_refused() -> None:
    data = member("trace")
    first, meta = largest(data)
    with pytest.raises(PageError, match="its footer says"):
        check_chunk(data[first: first + meta.total_compressed_size - 1], meta)


def test_views_pass_allowed_values_and_stop_at_forbidden_ones() -> None:
    # GIVEN the trace's checked expressions over a table with one row ending before it starts
    with open_profile(SAMPLE) as profile:
        declared = profile.declared
        trace = profile.read_table("trace")
    names = trace.schema.names
    expressions = sql_checked(S.TABLES["trace"], names, declared)
    con = duckdb.connect()
    con.register("raw", trace)
    # WHEN the view is read THEN it gives every row as it is
    view = f"SELECT {', '.join(expressions)} FROM raw"
    assert con.execute(f"SELECT sum(end_cycle - start_cycle) FROM ({view})").fetchall()[0][0] == \
        pa.compute.sum(pa.compute.subtract(trace["end_cycle"], trace["start_cycle"])).as_py()
    bad = trace.set_column(names.index("end_cycle"), "end_cycle",
                           pa.compute.if_else(pa.compute.equal(pa.array(range(len(trace))), 3),
                                              pa.compute.subtract(trace["start_cycle"], 1), trace["end_cycle"]))
    con = duckdb.connect()
    con.register("raw", bad)
    # WHEN a column of the pair is read from the damaged table THEN DuckDB stops, naming the column
    with pytest.raises(duckdb.Error, match="popvision refuses column trace.start_cycle"):
        con.execute(f"SELECT max(start_cycle) FROM ({view})").fetchall()
    # AND a query not using the pair is answered
    assert con.execute(f"SELECT count(ipu) FROM ({view})").fetchall()[0][0] == len(trace)


def _row_set(table: pa.Table, column: str, row: int, value) -> pa.Table:
    """``table`` with ``column``'s value at ``row`` replaced (None: a null)."""
    values = table[column].to_pylist()
    values[row] = value
    return table.set_column(table.schema.names.index(column), column, pa.array(values, table.schema.field(column).type))


def _reader_refuses(table: pa.Table, spec: S.TableSchema, declared) -> bool:
    from popvision_py.errors import ValueRangeError
    from popvision_py.format.arrays import check_values

    try:
        check_values(spec, table, declared, "the test")
    except ValueRangeError:
        return True
    return False


@pytest.mark.parametrize("table_name, column, value", [
    ("trace", "start_cycle", -1), ("trace", "start_cycle", None), ("trace", "start_cycle", 2**53),
    ("trace", "end_cycle", 2**53), ("trace", "end_cycle", None), ("trace", "end_cycle", 0),
    ("trace", "ipu", 99), ("trace", "ipu", -1), ("trace", "ipu", None), ("trace", "phase", "warp"),
    ("trace", "phase", None), ("variables", "live_from_step", 10**6), ("variables", "live_to_step", -1),
    ("variables", "live_to_step", None), ("variables", "name", None), ("variables", "always_live", None),
])
def test_a_view_stops_a_query_exactly_where_the_reader_refuses_its_columns(table_name, column, value) -> None:
    # GIVEN a table of the sample with one value changed, and its checked view (each test made once)
    with open_profile(SAMPLE) as profile:
        declared, raw = profile.declared, profile.read_table(table_name)
    spec = S.TABLES[table_name]
    bad = _row_set(raw, column, 3, value)
    view = f"SELECT {', '.join(sql_checked(spec, bad.schema.names, declared))} FROM raw"
    con = duckdb.connect()
    con.register("raw", bad)
    assert _reader_refuses(bad, spec, declared)
    for name in bad.schema.names:
        # WHEN a query reads one column THEN DuckDB stops it exactly when the reader refuses that
        # column with its ordered partner, as the reader reads them
        partners = [b if a == name else a for a, b in spec.ordered if name in (a, b)]
        refused = _reader_refuses(bad.select([name, *partners]), spec, declared)
        query = f"SELECT count(*), min({name}::VARCHAR) FROM ({view})"
        if refused:
            with pytest.raises(duckdb.Error, match=f"popvision refuses column {table_name}.{name}"):
                con.execute(query).fetchall()
        else:
            assert con.execute(query).fetchall()[0][0] == len(bad)


def test_sql_checks_the_chunks_the_query_reads_once_each() -> None:
    # GIVEN the sample, WHEN a query sums the trace's durations twice in one connection
    run_query(str(SAMPLE), "SELECT sum(end_cycle - start_cycle) FROM trace")
    with open_profile(SAMPLE) as profile, MemberFileSystem(profile) as members:
        from popvision_py.sql import _locked_connection

        con = _locked_connection(members, "1GB")
        con.execute("SELECT sum(end_cycle - start_cycle) FROM trace").fetchall()
        first = set(members._checked)
        con.execute("SELECT sum(end_cycle - start_cycle) FROM trace").fetchall()
        con.close()
        # THEN the second query checks nothing again (DuckDB may read a small row group's columns in
        # one merged range, so more chunks than the query's own can be among those checked)
        assert set(members._checked) == first
        # AND the chunks of start_cycle and end_cycle of every row group are among them
        starts, stops, found = members._chunks(S.TABLES["trace"].member)
        checked = [found[index][1] for member, index in first if member == "trace.parquet"]
        groups = profile.metadata("trace").num_row_groups
        assert checked.count("start_cycle") == groups and checked.count("end_cycle") == groups


def test_the_reader_checks_a_chunk_once_per_process() -> None:
    # GIVEN an open profile WHEN the trace is read twice THEN the second pass gives the same rows,
    # and every chunk the first pass read is remembered as checked
    with open_profile(SAMPLE) as profile:
        first = pa.Table.from_batches(list(profile.iter_batches("trace", ["ipu", "start_cycle"])))
        groups = profile.metadata("trace").num_row_groups
        assert {(t, g, c) for t, g, c in profile._checked if t == "trace"} == \
            {("trace", g, c) for g in range(groups) for c in ("ipu", "start_cycle")}
        second = pa.Table.from_batches(list(profile.iter_batches("trace", ["ipu", "start_cycle"])))
        assert second.equals(first)


def test_a_read_checks_exactly_the_column_chunks_it_touches() -> None:
    # GIVEN a table of three row groups (bert-large's tile_cycles: 15 column chunks), its chunks' byte ranges
    # read from its footer by pyarrow
    sample = SAMPLE.parent.parent / "bert_large_out_of_memory" / "profile.pop"
    with open_profile(sample) as profile:
        offset, size = profile.member_span("tile_cycles")
        data = profile.read_at(offset, size)
    spans = [(first, first + meta.total_compressed_size) for first, meta in chunks(data)]
    assert len(spans) == 15
    edges = sorted({point for a, b in spans for point in (a, a + 1, b - 1, b)})
    # WHEN DuckDB's file reads the bytes from each edge of a chunk to each later one (a fresh file system each
    # time, so nothing was checked before)
    for first in edges:
        for stop in (e for e in edges if e > first):
            with open_profile(sample) as profile, MemberFileSystem(profile) as fs, fs.open("tile_cycles.parquet") as f:
                f.seek(first)
                assert f.read(stop - first) == data[first:stop]
                # THEN the chunks checked are those the bytes overlap, no more and no fewer
                checked = {index for name, index in fs._checked if name == "tile_cycles.parquet"}
            assert checked == {i for i, (a, b) in enumerate(spans) if a < stop and b > first}, (first, stop)
