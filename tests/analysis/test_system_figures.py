"""The System section's figures read a run of timeline files at a time (``host.system_figures``): the same tables as
every event loaded at once, whatever the runs and the files' order, and every event loaded where a process's events
are in two runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from popvision_py.analysis.host import system, system_figures
from popvision_py.format import system as S

WORDS = {"name": ["ProfilerStep#1", "ProfilerStep#2", "aten::mm", "allocated", "reserved", "mark"],
         "channel": ["pytorch", "annotation", "memory", "dataloader"]}


def _file(folder: Path, process: str, rng: np.random.Generator, rows: int = 300) -> Path:
    """``rows`` random events of ``process`` (two threads), its words in an order of its own: each file's
    dictionaries differ, as different ranks' do."""
    kind = rng.choice(["span", "instant", "counter"], rows)
    start = rng.integers(1_000, 1_000_000, rows)
    names = rng.permutation(WORDS["name"])
    channels = rng.permutation(WORDS["channel"])
    return S.write_system(folder / f"{process}{S.SUFFIX}", {
        "process": np.full(rows, process, object), "pid": np.full(rows, 7),
        "thread": rng.choice(np.array(["MainThread", "pt_autograd_0"], object), rows),
        "channel": channels[rng.integers(0, len(channels), rows)].astype(object),
        "name": names[rng.integers(0, len(names), rows)].astype(object), "kind": kind.astype(object),
        "start_ns": start, "end_ns": start + np.where(kind == "span", rng.integers(0, 5_000, rows), 0),
        "value": rng.integers(0, 100, rows).astype(np.float64)}, process, 7)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("system-figures")
    rng = np.random.default_rng(11)
    return [_file(folder, f"rank-{k}", rng) for k in (3, 0, 10, 2, 1)]


def _same(got: dict, events: system.Events, imported: bool) -> None:
    want = {"processes": system.processes(events, imported), "by_name": system.by_name(events),
            "counters": system.counters(events)}
    for name, table in want.items():
        assert got[name].names == table.names, name
        for column in table.names:
            a, b = np.asarray(got[name][column]), np.asarray(table[column])
            if a.dtype.kind == "f":
                np.testing.assert_array_equal(a, b, err_msg=f"{name}.{column}")
            else:
                assert a.tolist() == b.tolist(), f"{name}.{column}"


@pytest.mark.parametrize("per_run", [1, 2, 5])
@pytest.mark.parametrize("imported", [False, True])
def test_each_run_of_files_gives_the_rows_of_every_event_at_once(files, monkeypatch, per_run, imported):
    # GIVEN five ranks' files (their processes out of order, each with dictionaries of its own) read one, two or
    # five at a time
    sizes = [p.stat().st_size for p in files]
    assert 3 * min(sizes) > 2 * max(sizes)  # (about the same size: `per_run` of them fit in per_run x the largest)
    monkeypatch.setattr(system_figures, "RUN_BYTES", per_run * max(sizes))
    assert [len(run) for run in system_figures.runs_of(files)] == {1: [1] * 5, 2: [2, 2, 1], 5: [5]}[per_run]
    # WHEN their figures are made a run at a time
    got = system_figures.figures(files, imported)
    # THEN they are those of every event loaded at once, row for row: processes in natural order (rank-2 before
    # rank-10), each one's names by total, then name, channel and kind; its counters by name
    assert got is not None
    _same(got, system.load_files(files), imported)
    assert got["processes"]["process"].tolist() == ["rank-0", "rank-1", "rank-2", "rank-3", "rank-10"]


def test_a_process_whose_events_are_in_two_runs_is_left_to_every_event_at_once(files, tmp_path, monkeypatch):
    # GIVEN rank-0's events in two files, read a file at a time
    monkeypatch.setattr(system_figures, "RUN_BYTES", 1)
    again = _file(tmp_path, "rank-0", np.random.default_rng(5))
    paths = [*files, again]
    # WHEN their figures are asked for a run at a time THEN none are made: a run alone cannot give rank-0's
    assert system_figures.figures(paths, False) is None
    # AND the report's System view gives those of every event at once
    import popvision_py as pv
    from tests import synthetic

    profile = synthetic.write_pipeline_profile(tmp_path / "p" / "profile.pop", [10, 10], stages=[1, 1],
                                               micro_batches=2, iterations=1, tiles_per_ipu=4, bytes_per_tile=1000)
    with pv.open(profile, [str(p) for p in paths]) as report:
        got = {name: report.answer(f"system.{name}") for name in system_figures.FIGURES}
    _same(got, system.load_files(paths), False)
    assert got["processes"]["events"].tolist()[0] == 600  # rank-0's 300 events of each file
