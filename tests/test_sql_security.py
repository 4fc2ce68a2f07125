"""`popvision sql` is locked down: the profile's tables and nothing else, within bounds.

Issue 13, item 8. Every case runs the real command in a subprocess. A refused query is one line on
stderr and exit 2, and whatever it tried to write is not there afterwards; an allowed query still
gives the figure pyarrow computes from the member read straight out of the ZIP.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py.sql import QueryError, run_query
from popvision_py.format import schema as S

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
COUNT = "SELECT count(*) AS n FROM trace"
# a trillion rows: runs until something stops it
ENDLESS = "SELECT sum(a.range * b.range) AS total FROM range(1000000) a, range(1000000) b"
# four million distinct keys: a hash table of tens of MB, more than 16 MB
WIDE_GROUP = "SELECT count(*) AS groups FROM (SELECT range AS k, count(*) FROM range(4000000) GROUP BY k)"


def popvision(*args: str) -> subprocess.CompletedProcess:
    """The real command in a subprocess (the timeout only guards against a hang)."""
    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, cwd=ROOT,
                          timeout=120, text=True)


def raw_table(table: str) -> pa.Table:
    """A table of MNIST decoded by pyarrow from the member's bytes, read with zipfile."""
    with zipfile.ZipFile(MNIST) as archive:
        return pq.read_table(io.BytesIO(archive.read(f"{table}.parquet")))


def one_line_error(result: subprocess.CompletedProcess, starts: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {starts}"), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


# -- nothing but the profile's tables ---------------------------------------------------------------


# A value no temporary path holds (the refusal quotes the query, whose path may contain any digits).
SECRET = "s3cr3t-value"


@pytest.fixture()
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the profile holding a readable Parquet file and a CSV file."""
    pq.write_table(pa.table({"secret": [SECRET]}), tmp_path / "other.parquet")
    (tmp_path / "other.csv").write_text(f"secret\n{SECRET}\n")
    return tmp_path


READS = {
    "read_csv /etc/passwd": "SELECT * FROM read_csv('/etc/passwd')",
    "read_text /etc/passwd": "SELECT * FROM read_text('/etc/passwd')",
    "read_blob /etc/passwd": "SELECT * FROM read_blob('/etc/passwd')",
    "a CSV by its name": "SELECT * FROM '{dir}/other.csv'",
    "read_parquet of another file": "SELECT * FROM read_parquet('{dir}/other.parquet')",
    "read_parquet of the profile.pop": f"SELECT * FROM read_parquet('{MNIST}')",
    "glob": "SELECT * FROM glob('/etc/*')",
    "a URL": "SELECT * FROM read_csv('https://example.com/data.csv')",
    "INSTALL": "INSTALL httpfs",
    "LOAD": "LOAD httpfs",
}
WRITES = {
    "COPY TO": ("COPY (SELECT * FROM trace) TO '{dir}/stolen.csv'", "stolen.csv"),
    "COPY TO parquet": ("COPY trace TO '{dir}/stolen.parquet' (FORMAT parquet)", "stolen.parquet"),
    "ATTACH": ("ATTACH '{dir}/new.db' AS db", "new.db"),
    "EXPORT DATABASE": ("EXPORT DATABASE '{dir}/exported'", "exported"),
}
SETTINGS = {
    "SET memory_limit": "SET memory_limit = '100GB'",
    "SET external access back on": "SET enable_external_access = true",
    "unlock": "SET lock_configuration = false",
    "RESET": "RESET memory_limit",
    "SET GLOBAL threads": "SET GLOBAL threads = 64",
    "PRAGMA": "PRAGMA enable_profiling",
}


@pytest.mark.parametrize("query", READS.values(), ids=READS.keys())
def test_reading_anything_but_the_tables_is_refused(query: str, elsewhere: Path) -> None:
    # WHEN a query reaches for a file, a URL or an extension
    result = popvision("sql", str(MNIST), query.format(dir=elsewhere))
    # THEN it is refused in one sentence that says what popvision sql reads, and nothing is printed
    line = one_line_error(result, "The query was refused: popvision sql reads the profile's tables")
    assert SECRET not in line and "root:" not in line


@pytest.mark.parametrize("query, made", WRITES.values(), ids=WRITES.keys())
def test_writing_anywhere_is_refused_and_nothing_is_written(query: str, made: str, elsewhere: Path) -> None:
    before = sorted(p.name for p in elsewhere.iterdir())
    # WHEN a query tries to write a file or attach a database
    result = popvision("sql", str(MNIST), query.format(dir=elsewhere))
    # THEN it is refused in one sentence, and the folder holds what it held
    one_line_error(result, "The query was refused: popvision sql reads the profile's tables")
    assert not (elsewhere / made).exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == before


@pytest.mark.parametrize("query", SETTINGS.values(), ids=SETTINGS.keys())
def test_settings_are_locked(query: str) -> None:
    result = popvision("sql", str(MNIST), query)
    one_line_error(result, "The query was refused: settings are fixed (")


def test_a_pragma_that_reads_is_answered() -> None:
    # WHEN a query asks for a table's columns with a PRAGMA (only a PRAGMA that sets something is refused)
    result = popvision("sql", str(MNIST), "PRAGMA table_info('trace')", "--format", "json")
    # THEN they are the trace's columns, in the schema's order
    assert result.returncode == 0, result.stderr
    assert [row["name"] for row in json.loads(result.stdout)] == [c.name for c in S.TABLES["trace"].columns]


def test_duckdb_is_asked_about_pragmas_only_for_a_query_holding_one() -> None:
    # GIVEN a process that has not asked DuckDB whether its lock holds PRAGMAs (asking opens a database)
    from popvision_py import sql

    sql._pragmas_pass_the_lock.cache_clear()
    # WHEN it runs a SELECT THEN it does not ask
    assert len(run_query(str(MNIST), "SELECT count(*) AS n FROM ops")["n"]) == 1
    assert sql._pragmas_pass_the_lock.cache_info().currsize == 0
    # AND a query holding a PRAGMA that sets something is asked about, and refused
    with pytest.raises(QueryError, match="settings are fixed"):
        run_query(str(MNIST), "SELECT 1; PRAGMA enable_profiling")
    assert sql._pragmas_pass_the_lock.cache_info().currsize == 1


def test_the_lock_down_is_visible_in_duckdbs_own_settings() -> None:
    # GIVEN the settings DuckDB reports from inside a query
    query = ("SELECT current_setting('enable_external_access') AS external, "
             "current_setting('lock_configuration') AS locked, current_setting('temp_directory') AS spill")
    result = popvision("sql", str(MNIST), query, "--format", "json")
    # THEN external access is off, the configuration locked, and nothing spills to disk
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"external": False, "locked": True, "spill": ""}]


def test_the_python_api_refuses_too() -> None:
    with pytest.raises(QueryError, match=r'^The query was refused: .*cannot access file "/etc/passwd"'):
        run_query(str(MNIST), "SELECT * FROM read_csv('/etc/passwd')")


# -- the tables themselves still answer -------------------------------------------------------------


def test_a_normal_query_gives_the_figure_pyarrow_computes() -> None:
    # GIVEN per IPU the bytes of always-live memory, summed by pyarrow from the raw member
    memory = raw_table("tile_memory")
    live = memory.filter(memory["always_live"])
    grouped = live.group_by("ipu").aggregate([("bytes", "sum")]).sort_by("ipu")
    expected = [{"ipu": ipu, "bytes": total} for ipu, total in
                zip(grouped["ipu"].to_pylist(), grouped["bytes_sum"].to_pylist(), strict=True)]
    assert len(expected) == 4 and all(row["bytes"] > 0 for row in expected)
    # WHEN the same is asked in SQL of the locked-down DuckDB
    result = popvision("sql", str(MNIST), "SELECT ipu, sum(bytes)::BIGINT AS bytes FROM tile_memory "
                       "WHERE always_live GROUP BY ipu ORDER BY ipu", "--format", "json")
    # THEN the figures are the same
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected


def test_the_members_themselves_may_be_named() -> None:
    # the views read popvision://<table>.parquet: naming a member directly is reading the table
    result = popvision("sql", str(MNIST), "SELECT count(*) AS n FROM read_parquet('popvision://trace.parquet')",
                       "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": raw_table("trace").num_rows}]


# -- -o ---------------------------------------------------------------------------------------------


def test_dash_o_dash_writes_to_stdout() -> None:
    result = popvision("sql", str(MNIST), COUNT, "--format", "csv", "-o", "-")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"n\n{raw_table('trace').num_rows}\n"


def test_dash_o_writes_a_regular_file_replacing_an_earlier_one(tmp_path: Path) -> None:
    out = tmp_path / "count.csv"
    out.write_text("earlier\n")
    result = popvision("sql", str(MNIST), COUNT, "--format", "csv", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == f"Wrote {out}\n"
    assert out.read_text() == f"n\n{raw_table('trace').num_rows}\n"


@pytest.mark.parametrize("target_exists", [True, False], ids=["to a file", "dangling"])
def test_dash_o_refuses_a_symlink_and_leaves_it_and_its_target_alone(tmp_path: Path, target_exists: bool) -> None:
    # GIVEN a symbolic link, to a file or to nothing
    target = tmp_path / "target.txt"
    if target_exists:
        target.write_text("keep me\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    # WHEN the result is to be written there
    result = popvision("sql", str(MNIST), COUNT, "--format", "csv", "-o", str(link))
    # THEN one sentence refuses it; the link is still a link, and its target is as it was
    assert one_line_error(result, f"Cannot write {link}: it is a symbolic link to ")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target.read_text() == "keep me\n") if target_exists else not target.exists()


def test_dash_o_refuses_a_directory(tmp_path: Path) -> None:
    one_line_error(popvision("sql", str(MNIST), COUNT, "-o", str(tmp_path)),
                   f"Cannot write {tmp_path}: it is a directory; popvision writes only regular files, character "
                   f"devices and FIFOs.")
    # (a FIFO and a device are written into, as by every command: tests/test_output_targets.py)


# -- memory and time ---------------------------------------------------------------------------------


def test_a_query_over_the_memory_limit_is_one_sentence() -> None:
    # WHEN a query needing tens of MB of hash table runs under 16 MB
    result = popvision("sql", str(MNIST), WIDE_GROUP, "--memory-limit", "16MB")
    # THEN it is refused, naming the limit and the flag that lifts it
    line = one_line_error(result, "The query needs more than the memory limit of 16MB")
    assert line.endswith("raise it with --memory-limit.")


def test_the_same_query_runs_under_the_default_limit() -> None:
    result = popvision("sql", str(MNIST), WIDE_GROUP, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"groups": 4_000_000}]


@pytest.mark.parametrize("limit, says", [
    ("lots", "is not a size"), ("-1GB", "is not a size"), ("2XB", "is not a size"),
    ("512KB", "is below 1 MiB"), ("0", "is below 1 MiB"), ("9999999TiB", "is above 1 EiB"),
])
def test_a_bad_memory_limit_is_one_sentence(limit: str, says: str) -> None:
    line = one_line_error(popvision("sql", str(MNIST), COUNT, "--memory-limit", limit), f"--memory-limit {limit!r}")
    assert says in line


def test_a_query_past_its_timeout_is_interrupted_in_one_sentence() -> None:
    result = popvision("sql", str(MNIST), ENDLESS, "--timeout", "0.5")
    one_line_error(result, "The query ran past --timeout 0.5 s and was interrupted.")


def test_a_query_within_its_timeout_answers() -> None:
    result = popvision("sql", str(MNIST), COUNT, "--timeout", "60", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": raw_table("trace").num_rows}]


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_one_sentence(seconds: str) -> None:
    one_line_error(popvision("sql", str(MNIST), COUNT, "--timeout", seconds), f"--timeout {float(seconds):g} is not")


def holds_open(pid: int, path: Path) -> bool:
    """Process ``pid`` has ``path`` open (it is past start-up and into the profile)."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # an fd closed while we looked
        return False


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux's /proc/<pid>/fd")
def test_ctrl_c_during_a_query_is_interrupted_exit_130() -> None:
    # GIVEN a query that never ends on its own, running once the process has the profile open
    process = subprocess.Popen([sys.executable, "-m", "popvision_py.cli", "sql", str(MNIST), ENDLESS], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not holds_open(process.pid, MNIST) and process.poll() is None:
            time.sleep(0.05)
        # WHEN Ctrl-C reaches it
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    # THEN it says so in one line and exits 130, DuckDB's own interrupt notwithstanding
    assert (process.returncode, err, out) == (130, "Interrupted.\n", "")


def test_an_unknown_table_names_the_tables_and_the_closest() -> None:
    line = one_line_error(popvision("sql", str(MNIST), "SELECT count(*) FROM traces"), "There is no table traces")
    tables = ", ".join(["ops", "programs", "tile_cycles", "tile_memory", "variables", "liveness", "trace",
                        "trace_levels", "exchanges"])
    assert line == f"Error: There is no table traces: the tables are {tables} (did you mean trace?)."
    line = one_line_error(popvision("sql", str(MNIST), "SELECT 1 FROM nothing_like_it"), "There is no table")
    assert line.endswith(f"the tables are {tables}.")
