"""The system timeline's files read into ``Events`` a run of files at a time (``host.events``): the same events, words
and order as one sort of every file's rows, worked out here with pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from popvision_py.analysis.host import events as E
from popvision_py.format import system as S

# (file, process, pid): rank-2's MainThread in two files (a row in two runs where files are runs of one), rank-10
# after rank-9 (natural order), and a file whose process sorts first written last
FILES = [("a", "rank-10", 110), ("b", "rank-2", 102), ("c", "rank-9", 109), ("d", "rank-2", 202), ("e", "rank-0", 100)]
THREADS = ["pt_autograd_0", "MainThread", "Thread-10", "Thread-2"]
NAMES = ["ProfilerStep#3", "aten::mm", "Forward", "ProfilerStep#12", "nccl:all_reduce", "allocated"]


def _write(folder: Path, rng: np.random.Generator, files: list[tuple]) -> tuple[list[Path], pd.DataFrame]:
    """The files, and every row in the order written (file by file)."""
    paths, frames = [], []
    for file, process, pid in files:
        n = int(rng.integers(40, 90))
        start = rng.integers(0, 30, n) * 10  # few starts: many ties
        kind = rng.choice(["span", "span", "instant", "counter"], n)
        end = np.where(kind == "span", start + rng.integers(0, 4, n) * 5, start)
        frame = pd.DataFrame({
            "process": process, "pid": pid, "thread": rng.choice(THREADS[:3] if file != "d" else THREADS, n),
            "channel": rng.choice(["pytorch", "annotation", "memory"], n),
            "name": rng.choice(NAMES[::-1] if file in "bd" else NAMES, n), "kind": kind, "start_ns": start,
            "end_ns": end, "value": np.where(kind == "counter", rng.integers(0, 9, n), 0).astype(float)})
        frame = pd.concat([frame, frame.iloc[:3]], ignore_index=True)  # three events twice over
        paths.append(S.write_system(folder / f"{file}{S.SUFFIX}", frame, process, pid))
        frames.append(frame)
    return paths, pd.concat(frames, ignore_index=True)


def _natural(words: list[str], key=E.natural) -> list[str]:
    return sorted(set(words), key=key)


ONE_A_FILE = [f for f in FILES if f[0] != "d"]
IN_ORDER = sorted(ONE_A_FILE, key=lambda f: E.natural(f[1]))


@pytest.mark.parametrize("files", [FILES, ONE_A_FILE, IN_ORDER],
                         ids=["a process in two files", "a process a file", "a process a file, in order"])
@pytest.mark.parametrize("run_rows", [1, 100, 1 << 17], ids=["a file a run", "two files a run", "one run"])
def test_files_gathered_a_run_at_a_time_are_one_sort_of_every_row(tmp_path, monkeypatch, run_rows, files):
    # GIVEN four processes' files (with or without rank-2's second file), their events tied in start, some repeated
    paths, rows = _write(tmp_path, np.random.default_rng(5), files)
    # WHEN they are read a run of files at a time
    monkeypatch.setattr(E, "RUN_ROWS", run_rows)
    events = E.load_files(paths)
    # THEN the processes are in natural order with their first row's pid, the threads the main thread first
    processes = _natural(rows["process"].tolist())
    assert list(events.processes) == processes == ["rank-0", "rank-2", "rank-9", "rank-10"]
    assert events.pids.tolist() == [100, 102, 109, 110]
    threads = _natural(rows["thread"].tolist(), key=lambda t: (t != "MainThread", E.natural(t)))
    pairs = sorted({(processes.index(p), threads.index(t)) for p, t in zip(rows["process"], rows["thread"])})
    assert list(events.rows) == [(p, threads[t]) for p, t in pairs]
    # AND the words are numbered in the order the files first give them
    assert list(events.names) == list(pd.unique(rows["name"]))
    assert list(events.channels) == list(pd.unique(rows["channel"]))
    # AND every event is there in (row, start, longer first) order, a tie in the order written
    rows["row"] = [pairs.index((processes.index(p), threads.index(t))) for p, t in zip(rows["process"], rows["thread"])]
    rows["written"] = np.arange(len(rows))
    expected = rows.sort_values(["row", "start_ns", "end_ns", "written"], ascending=[True, True, False, True])
    assert events.row.tolist() == expected["row"].tolist()
    assert events.start.tolist() == expected["start_ns"].tolist()
    assert events.end.tolist() == expected["end_ns"].tolist()
    assert events.value.tolist() == expected["value"].tolist()
    assert [events.names[c] for c in events.name] == expected["name"].tolist()
    assert [events.channels[c] for c in events.channel] == expected["channel"].tolist()
    assert [S.KINDS[c] for c in events.kind] == expected["kind"].tolist()
    # AND the codes are as narrow as they can be (the times int64)
    assert [a.dtype for a in (events.row, events.name, events.channel, events.kind, events.start, events.end)] == [
        np.int32, np.int32, np.int32, np.int8, np.int64, np.int64]


def test_no_files_are_no_events():
    events = E.load_files([])
    assert len(events) == 0 and events.processes == () and events.rows == () and events.names == ()
    assert events.start.dtype == np.int64 and events.value.dtype == np.float64


def _one_file(folder: Path, rng: np.random.Generator, grouped: bool) -> tuple[Path, pd.DataFrame]:
    """Every process of ``IN_ORDER`` in one file, as the import writes past 64 ranks (``ranks.pvti.parquet``), in row
    groups of 16 rows: each process's rows after the one before's (``grouped``), or the rows shuffled."""
    _, rows = _write(folder / "apart", rng, IN_ORDER)
    if not grouped:
        rows = rows.iloc[rng.permutation(len(rows))].reset_index(drop=True)
    path = folder / f"ranks{S.SUFFIX}"
    with S.SystemWriter(path, "ranks", 0, row_group_rows=16) as writer:
        writer.write(pa.Table.from_pandas(rows, preserve_index=False).cast(S.SCHEMA))
    return path, rows


@pytest.mark.parametrize("grouped", [True, False], ids=["each process's rows together", "the rows shuffled"])
@pytest.mark.parametrize("run_rows", [1, 100, 1 << 17], ids=["a process a piece", "pieces of 100 rows", "the file"])
def test_one_file_of_many_processes_read_in_pieces_is_the_file_read_whole(tmp_path, monkeypatch, run_rows, grouped):
    # GIVEN one file of four processes' rows, in row groups of 16 rows
    (tmp_path / "apart").mkdir()
    path, rows = _one_file(tmp_path, np.random.default_rng(7), grouped)
    whole = E.load_tables([S.read_system(path).table.replace_schema_metadata(None)])
    # WHEN it is read in pieces of whole processes of about ``run_rows`` rows, each piece's rows sorted in a run
    monkeypatch.setattr(E, "RUN_ROWS", run_rows)
    pieces = list(S.read_system_pieces(path, run_rows))
    events = E.load_files([path])
    # THEN the pieces are the file's rows in order, each ending where the process changes (where the rows keep
    # processes together), the first at or past ``run_rows``
    assert sum(p.num_rows for p in pieces) == len(rows)
    read = pd.concat([p.to_pandas() for p in pieces], ignore_index=True)
    assert read["start_ns"].tolist() == rows["start_ns"].tolist()
    assert read["process"].astype(str).tolist() == rows["process"].tolist()
    if grouped:  # each piece ends at the first change of process at or past ``run_rows`` rows from its start
        changes = np.flatnonzero(rows["process"].to_numpy()[1:] != rows["process"].to_numpy()[:-1]) + 1
        starts = np.r_[0, np.cumsum([p.num_rows for p in pieces])]
        for a, b in zip(starts[:-1], starts[1:]):
            assert b == (changes[changes >= a + run_rows][0] if (changes >= a + run_rows).any() else len(rows))
        # a process a piece; processes of 43 to 92 rows two or three a piece; the whole file one
        assert len(pieces) == 4 if run_rows == 1 else 1 < len(pieces) < 4 if run_rows == 100 else len(pieces) == 1
    # AND the events are those of the file read whole and sorted at once: words, rows, order and values
    for field in ("processes", "rows", "names", "channels", "families"):
        assert getattr(events, field) == getattr(whole, field)
    assert events.pids.tolist() == whole.pids.tolist()
    for field in ("row", "name", "channel", "kind", "start", "end", "value"):
        assert getattr(events, field).tolist() == getattr(whole, field).tolist()


def test_a_bad_row_in_a_later_piece_is_named_by_its_row_in_the_file(tmp_path):
    # GIVEN one file of four processes' rows in row groups of 16, a span of the last process ending before it starts
    (tmp_path / "apart").mkdir()
    path, rows = _one_file(tmp_path, np.random.default_rng(7), True)
    table = pq.read_table(path)
    start = table["start_ns"].to_numpy().copy()
    kind = np.asarray(table["kind"].to_pylist(), object)
    last = int(np.flatnonzero(rows["process"].to_numpy() == rows["process"].iloc[-1])[0])
    bad = int(np.flatnonzero((kind == "span") & (np.arange(len(kind)) >= last))[0])
    end = table["end_ns"].to_numpy().copy()
    end[bad] = start[bad] - 1
    table = table.set_column(table.schema.get_field_index("end_ns"), "end_ns", pa.array(end))
    pq.write_table(table, path, row_group_size=16)
    # WHEN it is read in pieces of 20 rows (the bad row in the last)
    assert bad > 20
    with pytest.raises(S.SystemFileError) as raised:
        list(S.read_system_pieces(path, 20))
    # THEN the sentence names the row in the file, as a whole read does
    assert str(raised.value) == f"{path}: row {bad:,} ends before it starts."
    with pytest.raises(S.SystemFileError) as whole:
        S.read_system(path)
    assert str(whole.value) == str(raised.value)
