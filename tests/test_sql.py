"""`popvision sql`: bad queries are one sentence, every table is there, and DuckDB scans the members lazily.

Issue 11, items 12 and 15. Results are checked against pyarrow reading the member straight out of
the ZIP (not through popvision_py's reader); the lazy scan is checked by the bytes the process
reads from the file (``rchar`` in /proc/self/io), against the column chunk sizes in the footer.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from popvision_py.sql import QueryError, run_query

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
TABLES = ["exchanges", "liveness", "ops", "programs", "tile_cycles", "tile_memory", "trace", "trace_levels",
          "variables"]


def popvision(*args: str | bytes) -> subprocess.CompletedProcess:
    """The real command in a subprocess; arguments may be bytes, as a shell hands them over."""
    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, cwd=ROOT,
                          timeout=120)


def raw_table(profile: Path, table: str) -> pa.Table:
    """A table decoded by pyarrow from the member's bytes, read with zipfile."""
    with zipfile.ZipFile(profile) as archive:
        return pq.read_table(io.BytesIO(archive.read(f"{table}.parquet")))


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """A 16M-row trace (2.8 MB: big enough that its column chunks dwarf the footers and the small tables),
    in 16 row groups, runs of 100 device iterations (benchmarks/make_large_profile.py)."""
    path = tmp_path_factory.mktemp("sql") / "large.pop"
    subprocess.run([sys.executable, "benchmarks/make_large_profile.py", str(path), "--rows", "16000000"],
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    return path


# -- item 12: bad queries are one sentence, SHOW TABLES lists the tables ---------------------------


@pytest.mark.parametrize("query", ["", "   \n\t "], ids=["empty", "blank"])
def test_an_empty_query_is_one_sentence_and_exit_2(query: str) -> None:
    # WHEN the query is empty or blank
    result = popvision("sql", str(MNIST), query)
    # THEN one line says so, with an example, and the command exits 2
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().splitlines() == [
        'Error: The query is empty; give a SQL statement, e.g. "SELECT count(*) FROM trace".']
    assert result.stdout == b""


def test_a_query_of_only_comments_is_one_sentence_and_exit_2() -> None:
    result = popvision("sql", str(MNIST), "/* nothing here */ ;")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        'Error: The query holds no statement; give one, e.g. "SELECT count(*) FROM trace".']


def test_a_query_holding_the_byte_0xff_is_one_sentence_and_exit_2() -> None:
    # GIVEN a query whose 8th byte is 0xff (not UTF-8), as a shell passes it: bytes
    # WHEN it is run
    result = popvision("sql", str(MNIST), b"SELECT \xff FROM trace")
    # THEN one line names the byte and where it is, and the command exits 2
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().splitlines() == [
        "Error: The query is not UTF-8 text: byte 0xff at byte 8 is not a character."]


def test_a_lone_surrogate_from_python_is_one_sentence() -> None:
    # GIVEN a str that no bytes could have made (a lone high surrogate), from the Python API
    with pytest.raises(QueryError) as raised:
        run_query(str(MNIST), "SELECT 'a\ud800'")
    # THEN the error names the character and where it is
    assert str(raised.value) == "The query is not text: character 10 is a lone surrogate (U+D800)."


def test_a_non_ascii_query_in_utf_8_still_runs() -> None:
    # 'é' is two bytes in UTF-8: text, not an error
    result = popvision("sql", str(MNIST), "SELECT 'é' AS letter", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"letter": "é"}]


def test_show_tables_lists_the_nine_tables() -> None:
    result = popvision("sql", str(MNIST), "SHOW TABLES", "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["name", *TABLES]


def test_every_table_answers_with_its_row_count() -> None:
    # GIVEN each table's row count, from pyarrow reading the raw member
    counts = {name: raw_table(MNIST, name).num_rows for name in TABLES}
    # WHEN one query counts them all
    query = " UNION ALL ".join(f"SELECT '{name}' AS name, count(*) AS n FROM {name}" for name in TABLES)
    result = popvision("sql", str(MNIST), query, "--format", "json")
    # THEN every table is there with every row
    assert result.returncode == 0, result.stderr
    assert {row["name"]: row["n"] for row in json.loads(result.stdout)} == counts


# -- item 15: the right answer, from a lazy scan ---------------------------------------------------


def compute_cycles_by_ipu(trace: pa.Table, iteration: int) -> list[dict]:
    """Per IPU: the compute steps of one iteration and their cycles, from pyarrow by hand."""
    rows = trace.filter(pc.and_(pc.equal(trace["phase"].cast(pa.string()), "compute"),
                                pc.equal(trace["iteration"], iteration)))
    cycles = pc.subtract(rows["end_cycle"], rows["start_cycle"])
    grouped = pa.table({"ipu": rows["ipu"], "cycles": cycles}).group_by("ipu").aggregate(
        [("cycles", "count"), ("cycles", "sum")]).sort_by("ipu")
    return [{"ipu": ipu, "steps": n, "cycles": total} for ipu, n, total in
            zip(grouped["ipu"].to_pylist(), grouped["cycles_count"].to_pylist(), grouped["cycles_sum"].to_pylist(),
                strict=True)]


FILTERED = ("SELECT ipu, count(*) AS steps, sum(end_cycle - start_cycle)::BIGINT AS cycles FROM trace "
            "WHERE phase = 'compute' AND iteration = {iteration} GROUP BY ipu ORDER BY ipu")


@pytest.mark.parametrize("profile, iteration", [(MNIST, 1), ("large", 50)], ids=["mnist", "3.1M rows"])
def test_a_filtered_query_equals_pyarrow_on_the_raw_table(profile, iteration, request) -> None:
    path = request.getfixturevalue("large") if profile == "large" else profile
    # GIVEN the figures computed by pyarrow from the raw trace
    expected = compute_cycles_by_ipu(raw_table(path, "trace"), iteration)
    assert len(expected) == 4 and all(row["steps"] > 0 for row in expected)
    # WHEN the same question is asked in SQL
    result = popvision("sql", str(path), FILTERED.format(iteration=iteration), "--format", "json")
    # THEN the answers are the same, row for row
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected


def bytes_read() -> int:
    """Bytes this process has read through read/pread system calls so far."""
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


def chunk_bytes(profile: Path, column: str, row_groups: list[int] | None = None) -> int:
    """Bytes of a trace column's chunks in the file, from the member's footer."""
    with zipfile.ZipFile(profile) as archive:
        footer = pq.ParquetFile(io.BytesIO(archive.read("trace.parquet"))).metadata
    index = footer.schema.names.index(column)
    groups = range(footer.num_row_groups) if row_groups is None else row_groups
    return sum(footer.row_group(g).column(index).total_compressed_size for g in groups)


def read_for(profile: Path, query: str) -> tuple[object, int]:
    run_query(str(profile), "SELECT 1")  # imports and first-use costs out of the way
    before = bytes_read()
    frame = run_query(str(profile), query)
    return frame, bytes_read() - before


def chunk_reads(profile: Path, query: str) -> tuple[object, int]:
    """What ``query`` reads beyond what a query naming no table reads (the footers, and the chunks
    their reads touch): DuckDB's reads, plus the reader's second read (with pread, counted in rchar)
    of each column chunk DuckDB reads, to check its page checksums and its values, decoding the
    columns ordered with it (``start_cycle`` with ``end_cycle``) too."""
    frame, read = read_for(profile, query)
    return frame, read - read_for(profile, "SELECT 42")[1]


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_a_query_on_one_column_reads_that_column_only(large: Path) -> None:
    # GIVEN the trace's start_cycle and end_cycle chunks, about the same size each
    start, end = chunk_bytes(large, "start_cycle"), chunk_bytes(large, "end_cycle")
    assert start > 1_000_000 and end > 1_000_000
    # WHEN a query sums start_cycle
    frame, read = chunk_reads(large, "SELECT sum(start_cycle)::BIGINT AS total FROM trace")
    # THEN its answer is right, and the process read start_cycle's chunks once (DuckDB's read is the one
    # the page checks verify) and end_cycle's once (the view checks that no row ends before it starts),
    # and none of the trace's other columns
    assert int(frame["total"][0]) == pc.sum(raw_table(large, "trace")["start_cycle"]).as_py()
    with zipfile.ZipFile(large) as archive:
        others = archive.getinfo("trace.parquet").file_size - start - end
    # (DuckDB's reads of the two chunks overrun them by up to a few hundred KB here: less than one more column)
    assert start + end <= read < start + end + min(start, end) // 4, (read, start, end, others)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_a_filtered_query_reads_each_chunk_once(large: Path) -> None:
    # GIVEN the row groups whose footer statistics of `run` can hold run 0, and those that cannot
    with zipfile.ZipFile(large) as archive:
        footer = pq.ParquetFile(io.BytesIO(archive.read("trace.parquet"))).metadata
        trace_bytes = archive.getinfo("trace.parquet").file_size
    run = footer.schema.names.index("run")
    stats = [footer.row_group(g).column(run).statistics for g in range(footer.num_row_groups)]
    admitted = [g for g, st in enumerate(stats) if st.min <= 0 <= st.max]
    ruled_out = [g for g, st in enumerate(stats) if not st.min <= 0 <= st.max]
    assert admitted and ruled_out and stats[0].max == 0
    # WHEN a query sums start_cycle over run 0 only
    frame, read = chunk_reads(large, "SELECT sum(start_cycle)::BIGINT AS total FROM trace WHERE run = 0")
    # THEN the answer is right; the admitted row groups' start_cycle was read, and no chunk twice: the page
    # checks check the bytes DuckDB read (DuckDB reads a row group whole where the columns it needs are most
    # of it, and the views' checked columns keep it from skipping row groups by their statistics)
    trace = raw_table(large, "trace")
    assert int(frame["total"][0]) == pc.sum(trace.filter(pc.equal(trace["run"], 0))["start_cycle"]).as_py()
    assert chunk_bytes(large, "start_cycle", admitted) <= read < trace_bytes * 11 // 10, (read, trace_bytes)


def test_no_table_is_read_when_the_query_names_none(large: Path) -> None:
    # the footers, and the few column chunks their reads touch (read twice: by DuckDB, and by the
    # reader checking their page checksums and values, with the columns ordered with them), are all a
    # query that names no table costs: well under half of the trace member
    _, read = read_for(large, "SELECT 42 AS answer")
    with zipfile.ZipFile(large) as archive:
        trace_bytes = archive.getinfo("trace.parquet").file_size
    assert read < trace_bytes * 2 // 5, (read, trace_bytes)


def _parquet_reads(node: dict) -> list[set[str]]:
    """The columns each Parquet scan of a JSON query plan (``EXPLAIN (FORMAT json)``) reads."""
    found = []
    if node.get("extra_info", {}).get("Function") == "READ_PARQUET":
        projected = node["extra_info"].get("Projections", [])
        found.append(set(projected.split() if isinstance(projected, str) else projected))
    for child in node.get("children", []):
        found += _parquet_reads(child)
    return found


def _duckdb_major() -> int:
    import duckdb

    return int(duckdb.__version__.split(".")[0])


@pytest.mark.skipif(_duckdb_major() < 2, reason="DuckDB 1.x plans a category column's check (an IN list) as a join "
                                                "that projection pushdown keeps: a query also reads those columns")
@pytest.mark.parametrize("table", [t for t in TABLES if t != "trace_levels"])
def test_a_query_on_one_column_plans_to_read_it_and_its_ordered_partner_only(table: str) -> None:
    # GIVEN the sample's checked views (each column's values checked as the query computes)
    from popvision_py.format import schema as S
    from popvision_py.format.memberfs import MemberFileSystem
    from popvision_py.format import open_profile_file
    from popvision_py.sql import _locked_connection

    spec = S.TABLES[table]
    with open_profile_file(MNIST) as profile, MemberFileSystem(profile) as members:
        con = _locked_connection(members, "1GB")
        try:
            for column in profile.metadata(table).schema.names:
                # WHEN a query takes one column's largest value (a count of a 64-bit column is answered from
                # the row count: its check tells DuckDB it holds no null)
                plan = json.loads(con.execute(f'EXPLAIN (FORMAT json) SELECT max("{column}") FROM {table}')
                                  .fetchall()[0][1])
                # THEN DuckDB plans one scan of the member, of that column and the one it is ordered with (the
                # view checks them together), and of no other: a check of another column never makes it read
                partners = {b if a == column else a for a, b in spec.ordered if column in (a, b)}
                assert [cols for node in plan for cols in _parquet_reads(node)] == [{column, *partners}], column
        finally:
            con.close()
