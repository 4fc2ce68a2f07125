"""`popvision import` writes each rank's CPU timeline beside the profile (DIR/system/rank-<r>.pvti.parquet): the
training thread's annotations of the real traces, on their clock, which `report --section system` and the
System page read. A bad trace writes none (test_import_cli.py checks the folder is left as it was)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import system as S

pytestmark = pytest.mark.slow  # records the GPipe traces when no other test of the session has


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def annotations(raw: dict, name_start: str) -> list[tuple[int, int]]:
    """(start, end) in ns of the trace's CPU annotations whose name starts with ``name_start``."""
    base = raw.get("baseTimeNanoseconds", 0)
    return sorted((int(round(e["ts"] * 1000)) + base, int(round(e["ts"] * 1000)) + base + int(round(e["dur"] * 1000)))
                  for e in raw["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                  and str(e.get("name")).startswith(name_start))


def test_import_writes_each_ranks_timeline_from_its_annotations(recorded, tmp_path):
    run = recorded("gpipe")
    # WHEN the 4 ranks' traces are imported
    result = invoke("import", run.folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert f"Wrote {tmp_path / 'out' / 'system'}: each rank's CPU timeline (4 file(s)" in result.output
    files = sorted((tmp_path / "out" / "system").iterdir())
    assert [p.name for p in files] == [f"rank-{r}.pvti.parquet" for r in range(4)]
    for rank, path in enumerate(files):
        timeline = S.read_system(path)
        frame = timeline.table.to_pandas().astype({c: str for c in S.STRING_COLUMNS})
        raw = run.raw(rank)
        # THEN each file is its rank's, one thread: the training loop's; its steps, passes and calls on the pytorch
        # channel, its other annotations (Optimizer.zero_grad#...) on the annotation channel, as the trace has them
        assert timeline.process == f"rank-{rank}" and set(frame["process"]) == {f"rank-{rank}"}
        assert set(frame["channel"]) <= {"pytorch", "annotation"} and set(frame["kind"]) == {"span"}
        assert frame["thread"].nunique() == 1
        other = frame[frame["channel"] == "annotation"]
        assert sorted(zip(other["start_ns"], other["end_ns"])) == sorted(
            span for name in set(other["name"]) for span in annotations(raw, name))
        pid = next(e["pid"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
        assert timeline.pid == pid
        # AND its profiler steps and GPipe passes are the trace's own annotations, to the nanosecond
        for prefix in ("ProfilerStep#", "Forward ", "Backward "):
            spans = frame[frame["name"].str.startswith(prefix)]
            assert sorted(zip(spans["start_ns"], spans["end_ns"])) == annotations(raw, prefix), (rank, prefix)
        # AND its communication calls are there (a pipeline's ranks send and receive)
        assert frame["name"].str.startswith("c10d::").any()


def test_the_system_report_of_an_imported_run(recorded, tmp_path):
    run = recorded("gpipe")
    assert invoke("import", run.folder, "-o", tmp_path / "out").exit_code == 0
    doc = json.loads(invoke("report", tmp_path / "out" / "profile.pop", "--section", "system",
                            "--format", "json").stdout)
    processes = doc["sections"]["system"]["processes"]
    assert [p["process"] for p in processes] == ["rank-0", "rank-1", "rank-2", "rank-3"]
    # a profiler step per step of the recording, each a family (ProfilerStep#1, #2 -> ProfilerStep)
    steps = {r["process"]: r for r in doc["sections"]["system"]["by_name"] if r["name"] == "ProfilerStep"}
    for rank in range(4):
        raw = annotations(run.raw(rank), "ProfilerStep#")
        assert steps[f"rank-{rank}"]["count"] == len(raw) == run.meta["steps"]
        assert steps[f"rank-{rank}"]["total_ms"] == pytest.approx(sum(e - s for s, e in raw) / 1e6)


def test_a_smaller_import_into_the_same_folder_leaves_only_its_ranks(recorded, tmp_path):
    run = recorded("gpipe")
    assert invoke("import", run.folder, "-o", tmp_path / "out").exit_code == 0
    # WHEN ranks 0 and 1 alone are imported into the same folder
    two = tmp_path / "two"
    two.mkdir()
    for path in run.paths[:2]:
        shutil.copy(path, two / path.name)
    assert invoke("import", two, "-o", tmp_path / "out").exit_code == 0
    # THEN the folder's timelines are theirs: the earlier import's ranks 2 and 3 are gone
    assert sorted(p.name for p in (tmp_path / "out" / "system").iterdir()) == ["rank-0.pvti.parquet",
                                                                              "rank-1.pvti.parquet"]
    frame = S.read_system(tmp_path / "out" / "system" / "rank-1.pvti.parquet").table.to_pandas()
    steps = frame[frame["name"].astype(str).str.startswith("ProfilerStep#")]
    assert sorted(zip(steps["start_ns"], steps["end_ns"])) == annotations(run.raw(1), "ProfilerStep#")


def test_the_system_page_shows_the_ranks(recorded, tmp_path):
    import importlib

    from dashboards.app import create_app

    run = recorded("gpipe")
    assert invoke("import", run.folder, "-o", tmp_path / "out").exit_code == 0
    create_app([str(tmp_path / "out" / "profile.pop")])
    page = importlib.import_module("dashboards.pages.system")
    # the whole run: a row per rank's training thread, each pass family a colour of its own
    fig, level, _ = page.timeline("a", None, "relative")
    assert [label.split(" · ")[0] for label in fig.layout.yaxis.categoryarray] == [
        "rank-3", "rank-2", "rank-1", "rank-0"]
    names = {trace.name for trace in fig.data}
    assert {"ProfilerStep", "Forward", "Backward"} <= names
    note, cards, _ = page.render_figures("a")
    assert note is None and "rank-0" in str(cards.to_plotly_json())


def test_past_64_ranks_the_timelines_are_one_file_of_the_same_rows(recorded, tmp_path):
    from popvision_py.importer import find_traces, read_traces
    from popvision_py.importer.system import write_timelines

    # GIVEN the 4 ranks of a real GPipe run, read
    traces = read_traces(find_traces([str(recorded("gpipe").folder)]), jobs=1)
    # WHEN their timelines are written a file a rank, and as one file (past 2 ranks here, as past 64 by default)
    each = write_timelines(traces, tmp_path / "each")
    one = write_timelines(traces, tmp_path / "one", one_file_past=2)
    # THEN the one file holds every rank's rows, each naming its rank as its process, as its own file has them
    assert [p.name for p in one] == ["ranks.pvti.parquet"] and [p.name for p in each] == [
        f"rank-{r}.pvti.parquet" for r in range(4)]
    together = S.read_system(one[0])
    assert together.process == "ranks" and together.pid == -1
    frame = together.table.to_pandas().astype({c: str for c in S.STRING_COLUMNS})
    apart = [S.read_system(p).table.to_pandas().astype({c: str for c in S.STRING_COLUMNS}) for p in each]
    assert frame["process"].unique().tolist() == [f"rank-{r}" for r in range(4)]
    for rank, rows in enumerate(apart):
        assert frame[frame["process"] == f"rank-{rank}"].reset_index(drop=True).equals(rows), rank
    # AND the system report of the run reads the same processes and figures from either
    assert invoke("import", recorded("gpipe").folder, "-o", tmp_path / "out").exit_code == 0
    docs = [json.loads(invoke("report", tmp_path / "out" / "profile.pop", "--section", "system", "--system",
                              tmp_path / path, "--format", "json").stdout)["sections"]["system"]
            for path in ("each", "one")]
    assert docs[0] == docs[1] and [p["process"] for p in docs[0]["processes"]] == [f"rank-{r}" for r in range(4)]


def test_an_import_of_65_ranks_writes_one_timeline_file_and_a_smaller_one_replaces_it(tmp_path):
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import make_gpu_trace

    span = {"process": np.array(["x"], object), "pid": np.array([1]), "thread": np.array(["t"], object),
            "channel": np.array(["pytorch"], object), "name": np.array(["step"], object),
            "kind": np.array(["span"], object), "start_ns": np.array([1]), "end_ns": np.array([2]),
            "value": np.array([np.nan])}

    # GIVEN 65 ranks of a data-parallel run, and an earlier import's timeline files in the output's folder
    make_gpu_trace.make(tmp_path / "t", total_mb=0.05, ranks=65, layers=2, bucket=1, jobs=1, spread=0.0)
    (tmp_path / "out" / "system").mkdir(parents=True)
    for rank in (0, 70):
        S.write_system(tmp_path / "out" / "system" / f"rank-{rank}.pvti.parquet", span, f"rank-{rank}", 1)
    # WHEN they are imported
    result = invoke("import", tmp_path / "t", "-o", tmp_path / "out")
    # THEN the timelines are one file of every rank, and the earlier import's files are gone
    assert result.exit_code == 0, result.output
    assert "CPU timeline (one file, ranks.pvti.parquet, of 65 ranks, for the System page)" in result.output
    assert sorted(p.name for p in (tmp_path / "out" / "system").iterdir()) == ["ranks.pvti.parquet"]
    frame = S.read_system(tmp_path / "out" / "system" / "ranks.pvti.parquet").table.to_pandas()
    assert sorted(frame["process"].astype(str).unique()) == sorted(f"rank-{r}" for r in range(65))
    # AND the report's system section names every rank from it
    doc = json.loads(invoke("report", tmp_path / "out" / "profile.pop", "--section", "system", "--format",
                            "json").stdout)["sections"]["system"]
    assert len(doc["processes"]) == 65
    # WHEN 4 of the ranks are imported into the same folder
    four = tmp_path / "four"
    four.mkdir()
    for rank in range(4):
        shutil.copy(tmp_path / "t" / f"rank{rank}.json", four / f"rank{rank}.json")
    assert invoke("import", four, "-o", tmp_path / "out").exit_code == 0
    # THEN the folder holds their files alone: the one file of 65 ranks is gone
    assert sorted(p.name for p in (tmp_path / "out" / "system").iterdir()) == [
        f"rank-{r}.pvti.parquet" for r in range(4)]
