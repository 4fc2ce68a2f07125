"""`popvision sql tune.parquet "SELECT ... FROM tune"`: a tune result is one table, under sql's lock-down.

The rows come from ``tests.tunefiles`` (mnist candidates emulated for real); results are checked
against pyarrow reading the file itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.tunefiles import write_mnist_tune

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tune_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqltune") / "tune.parquet"
    write_mnist_tune(path)
    return path


def popvision(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "popvision_py.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_the_candidates_are_the_table_tune(tune_file: Path) -> None:
    # GIVEN a tune result; WHEN the Pareto front is asked for in SQL
    result = popvision("sql", str(tune_file),
                       "SELECT key, ipus, samples_per_second FROM tune WHERE pareto ORDER BY ipus",
                       "--format", "json")
    # THEN it is the rows the file marks as on the front, with the file's figures
    assert result.returncode == 0, result.stderr
    table = pq.read_table(tune_file).to_pylist()
    front = sorted((r for r in table if r["pareto"]), key=lambda r: r["ipus"])
    assert json.loads(result.stdout) == [
        {"key": r["key"], "ipus": r["ipus"], "samples_per_second": r["samples_per_second"]} for r in front]
    assert front  # the file has a front to find


def test_counts_by_status_match_the_file(tune_file: Path) -> None:
    result = popvision("sql", str(tune_file), "SELECT status, count(*) AS n FROM tune GROUP BY status ORDER BY status",
                       "--format", "csv")
    assert result.returncode == 0, result.stderr
    statuses = [r["status"] for r in pq.read_table(tune_file).to_pylist()]
    expected = "".join(f"{s},{statuses.count(s)}\n" for s in sorted(set(statuses)))
    assert result.stdout == "status,n\n" + expected
    assert "oom" in statuses and "rejected" in statuses  # the file holds more than one kind


@pytest.mark.parametrize("query, sentence", [
    ("SELECT count(*) FROM trace", "There is no table trace: the tables are tune."),
    (" ", 'The query is empty; give a SQL statement, e.g. "SELECT count(*) FROM tune".'),
    ("SET memory_limit = '10GB'", "The query was refused: settings are fixed (memory_limit); "
                                   "give --memory-limit or --timeout on the command line instead."),
], ids=["no-profile-tables", "empty", "set"])
def test_bad_queries_on_a_tune_result_are_one_sentence(tune_file: Path, query: str, sentence: str) -> None:
    result = popvision("sql", str(tune_file), query)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith(f"Error: {sentence}")
    assert "Traceback" not in result.stderr


def test_a_tune_result_cannot_reach_other_files(tune_file: Path) -> None:
    # GIVEN the tune result's own path, read again through DuckDB's file reader: refused like any file
    result = popvision("sql", str(tune_file), f"SELECT * FROM read_parquet('{tune_file}')")
    assert result.returncode == 2
    assert result.stderr.startswith("Error: The query was refused: popvision sql reads the profile's tables and "
                                    "touches no other file")


def test_parquet_that_is_not_a_tune_result_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa

    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), path)
    result = popvision("sql", str(path), "SELECT * FROM tune")
    assert (result.returncode, result.stderr) == (
        2, f"Error: {path} is a Parquet file but not a tune result (no popvision.tune metadata).\n")
