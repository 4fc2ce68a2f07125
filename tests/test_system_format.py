"""System timeline files (popvision_py/format/system.py): what is written is what is read, in row groups,
published whole or not at all; a file that is not one is one sentence, and `popvision report` exits 2 with it;
where the reports look for a profile's files."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import system as S
from tests import synthetic

T0 = 1_750_000_000_000_000_000  # ns since 1970 (2025)


def columns(n: int = 5, **override) -> dict:
    """``n`` events of one process: a model call span every ms, then an instant and a counter."""
    start = T0 + np.arange(n, dtype=np.int64) * 1_000_000
    kind = np.array(["span"] * (n - 2) + ["instant", "counter"], object)
    out = {
        "process": np.full(n, "instance-1", object), "pid": np.full(n, 4242, np.int64),
        "thread": np.full(n, "MainThread", object), "channel": np.full(n, "poptorch", object),
        "name": np.array(["model call"] * (n - 2) + ["weights to host", "samples per second"], object),
        "kind": kind, "start_ns": start, "end_ns": np.where(kind == "span", start + 400_000, start),
        "value": np.where(kind == "counter", 1234.5, np.nan),
    }
    out.update(override)
    return out


def test_a_file_reads_back_as_written_with_its_metadata(tmp_path):
    # GIVEN 10 events written in row groups of 4
    given = columns(10)
    path = tmp_path / "instance-1.pvti.parquet"
    with S.SystemWriter(path, "instance-1", 4242, instance=1, row_group_rows=4) as writer:
        writer.write({k: v[:6] for k, v in given.items()})
        assert not path.exists()  # nothing is named before the writer closes
        writer.write({k: v[6:] for k, v in given.items()})
    # THEN the file has 3 row groups (4 + 4 + 2 rows), the format's metadata, and the rows as written
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    read = S.read_system(path)
    assert (read.process, read.pid, read.instance) == ("instance-1", 4242, 1)
    table = read.table
    for name in ("start_ns", "end_ns", "pid"):
        assert table[name].to_pylist() == given[name].tolist()
    for name in ("process", "thread", "channel", "name", "kind"):
        assert table[name].to_pylist() == given[name].tolist()
    values = table["value"].to_pylist()
    assert values[-1] == 1234.5 and all(math.isnan(v) for v in values[:-1])
    # AND any Parquet reader sees the metadata as plain keys
    meta = pq.read_schema(path).metadata
    assert meta[b"format"] == b"popvision-system-timeline" and meta[b"format_version"] == b"1"


def test_a_writer_left_by_an_exception_publishes_nothing_and_keeps_the_earlier_file(tmp_path):
    path = S.write_system(tmp_path / "p.pvti.parquet", columns(), "instance-1", 4242)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with S.SystemWriter(path, "instance-1", 4242) as writer:
            writer.write(columns(7))
            raise RuntimeError("killed")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.pvti.parquet"]  # no partial file left


def _foreign(path):
    pq.write_table(pa.table({"a": [1, 2]}), path)


def _newer(path):
    table = pa.table(columns()).replace_schema_metadata({**S.metadata("p", 1), b"format_version": b"2"})
    pq.write_table(table, path)


def _retyped(path):
    table = pa.table({**columns(), "pid": np.full(5, 1, np.int32)}).replace_schema_metadata(S.metadata("p", 1))
    pq.write_table(table, path)


def _lacking(path):
    data = columns()
    del data["value"]
    pq.write_table(pa.table(data).replace_schema_metadata(S.metadata("p", 1)), path)


def _values(**override):
    def write(path):
        pq.write_table(pa.table(columns(**override)).replace_schema_metadata(S.metadata("p", 1)), path)
    return write


BAD = {
    "empty": (lambda p: p.write_bytes(b""), "is empty"),
    "not parquet": (lambda p: p.write_text("time,name\n1,compile\n"), "is not a Parquet file, so not a "
                                                                      "system timeline"),
    "cut short": (lambda p: (S.write_system(p, columns(), "p", 1), p.write_bytes(p.read_bytes()[:-30])),
                  "is cut short: its Parquet footer is missing"),
    "a damaged page": (lambda p: (S.write_system(p, columns(), "p", 1),
                                  p.write_bytes(p.read_bytes()[:30] + bytes(40) + p.read_bytes()[70:])),
                       "is corrupt ("),
    "foreign parquet": (_foreign, "is a Parquet file but not a popvision system timeline"),
    "newer version": (_newer, "is a system timeline of version 2; this popvision reads version 1"),
    "a column missing": (_lacking, "lacks the column 'value'"),
    "a column retyped": (_retyped, "column 'pid' holds int32, not int64"),
    "an unknown kind": (_values(kind=np.array(["span", "span", "span", "marker", "counter"], object)),
                        "row 3 is of kind 'marker', not one of span, instant, counter"),
    "a span ending before it starts": (_values(end_ns=T0 + np.arange(5, dtype=np.int64) * 1_000_000 - 1),
                                       "row 0 ends before it starts"),
    "an instant that lasts": (_values(end_ns=T0 + np.arange(5, dtype=np.int64) * 1_000_000 + 5),
                              "row 3 is an instant whose end_ns is not its start_ns"),
    "a counter without a value": (_values(value=np.full(5, np.nan)), "row 4 is a counter without a finite value"),
    "a time before 1970": (_values(start_ns=np.full(5, -5, np.int64), end_ns=np.full(5, -5, np.int64)),
                           "row 0 has a time out of range"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_file_is_one_sentence_and_report_exits_2(case, tmp_path):
    # GIVEN a profile and, as its system timeline, a file that is not a good one
    make, sentence = BAD[case]
    profile = synthetic.write_pipeline_profile(tmp_path / "run" / "profile.pop", [10, 10], stages=[1, 1],
                                               micro_batches=2, iterations=1, tiles_per_ipu=4, bytes_per_tile=1000)
    bad = tmp_path / "run" / "instance-0.pvti.parquet"
    make(bad)
    # WHEN it is read THEN one sentence names the file and what is wrong
    with pytest.raises(S.SystemFileError) as caught:
        S.read_system(bad)
    assert str(caught.value).startswith(str(bad)) and sentence in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    # AND `popvision report --section system` (which finds it beside the profile) says it, exit code 2
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "system"])
    assert result.exit_code == 2 and result.output == f"Error: {caught.value}\n"


def test_where_the_files_are_looked_for(tmp_path):
    # GIVEN a PopTorch run's layout: DIR/training/profile.pop, the timelines in DIR
    profile = tmp_path / "dir" / "training" / "profile.pop"
    profile.parent.mkdir(parents=True)
    assert S.find_system_files(profile) == []
    a = S.write_system(tmp_path / "dir" / "instance-0.pvti.parquet", columns(), "instance-0", 1)
    assert S.find_system_files(profile) == [a]
    # the profile's own folder comes before its parent, and its system/ folder before both
    b = S.write_system(tmp_path / "dir" / "training" / "process-7.pvti.parquet", columns(), "process-7", 7)
    assert S.find_system_files(profile) == [b]
    c = S.write_system(tmp_path / "dir" / "training" / "system" / "rank-0.pvti.parquet", columns(), "rank-0", 3)
    assert S.find_system_files(profile) == [c]
    # --system: folders (searched the same way) and files, each once
    assert S.find_system_files(profile, [tmp_path / "dir", a]) == [a]
    assert S.find_system_files(profile, [tmp_path / "dir" / "training"]) == [c]
    with pytest.raises(S.SystemFileError, match="holds no system timeline file"):
        S.find_system_files(profile, [tmp_path])
    with pytest.raises(S.SystemFileError, match="does not exist"):
        S.find_system_files(profile, [tmp_path / "nowhere"])
