"""`popvision export-trace`: windows (iterations, cycles, IPUs), tracks per stage and pass, progress
bar, bad options, and the reader's row-group selection behind the window.

Every expected figure is computed here from the raw trace table
(``open_profile(path).read_table("trace")``), not by the exporter's own code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.export_trace import Window
from popvision_py.format import open_profile, writer
from tests.terminal import stderr_on_a_terminal

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(ROOT.glob("sample_profiles/*/profile.pop"))
MNIST = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
BERT_LARGE = ROOT / "sample_profiles" / "bert_large_out_of_memory" / "profile.pop"
# What a Perfetto user should read on each track, written out by hand from the schema's words
PASS_WORDS = {"forward": " forward", "backward": " backward", "update": " update", "none": ""}
TYPE_WORDS = {"compute_set": "compute set", "exchange": "exchange", "global_exchange": "global exchange",
              "stream_copy": "stream copy", "remote_buffer_copy": "remote-buffer copy", "sync": "sync",
              "all_reduce": "all-reduce"}


def _small_row_groups(folder: Path, runs: int, statistics: bool = True) -> Path:
    """mnist over 2 replicas, ``runs`` runs of 10 iterations, its trace cut into row groups of at most
    2,000 rows (so a window can skip some), written with or without column statistics."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "ROW_GROUP_ROWS", 2000)
        if not statistics:
            patch.setattr(writer, "PARQUET_OPTIONS", {**writer.PARQUET_OPTIONS, "write_statistics": False})
        result = CliRunner().invoke(main, ["run", "mnist", "--replicas", "2", "--runs", str(runs),
                                           "--device-iterations", "10", "--profile", "--profile-dir", str(folder),
                                           "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder / "profile.pop"


@pytest.fixture(scope="module")
def replicated(tmp_path_factory) -> Path:
    """A real engine profile with 4 runs of 10 iterations, gradient all-reduces (2 replicas), and a
    trace cut into row groups of at most 2,000 rows (so a window can skip some)."""
    path = _small_row_groups(tmp_path_factory.mktemp("replicated"), runs=4)
    with open_profile(path) as profile:
        assert profile.metadata("trace").num_row_groups > 10
    return path


def raw_trace(path: Path) -> pd.DataFrame:
    """The trace table with the global iteration (run x iterations per run + iteration) and each row's
    program type (NaN for rows without a program step)."""
    with open_profile(path) as profile:
        trace = profile.read_table("trace").to_pandas()
        programs = profile.read_table("programs", ["ipu", "step", "type"]).to_pandas()
    for column in ("pass", "phase"):
        trace[column] = trace[column].astype(str)
    programs["type"] = programs["type"].astype(str)
    per_run = int(trace["iteration"].max()) + 1
    trace["global_iteration"] = trace["run"].astype(np.int64) * per_run + trace["iteration"]
    return trace.merge(programs, on=["ipu", "step"], how="left")


def export(path: Path, out: Path, *options: str):
    result = CliRunner().invoke(main, ["export-trace", str(path), "-o", str(out), *options], catch_exceptions=False)
    return result, (json.loads(out.read_text()) if result.exit_code == 0 else None)


def events_of(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def row_keys(frame: pd.DataFrame) -> Counter:
    return Counter(zip(frame["ipu"].astype(int), frame["start_cycle"].astype(int), frame["end_cycle"].astype(int),
                       frame["step"].astype(int)))


def event_keys(events: list[dict]) -> Counter:
    return Counter((e["pid"], e["args"]["start_cycle"], e["args"]["end_cycle"], e["args"]["step"]) for e in events)


def expected_track(row: pd.Series) -> str:
    if row["stage"] >= 0:
        return f"stage {row['stage']}{PASS_WORDS[row['pass']]}"
    if isinstance(row["type"], str):
        return TYPE_WORDS[row["type"]]
    return "idle" if row["phase"] == "idle" else "other"


# -- windows -------------------------------------------------------------------------------------


def test_an_iteration_window_keeps_exactly_the_rows_of_those_iterations_over_runs(replicated, tmp_path):
    # GIVEN 4 runs of 10 iterations: iterations 8:13 are run 0's iterations 8-9 and run 1's 0-2
    trace = raw_trace(replicated)
    want = trace[((trace["run"] == 0) & (trace["iteration"] >= 8)) | ((trace["run"] == 1) & (trace["iteration"] <= 2))]
    assert len(want) > 0 and set(want["global_iteration"]) == {8, 9, 10, 11, 12}
    # WHEN they are exported
    result, doc = export(replicated, tmp_path / "t.json", "--iterations", "8:13")
    # THEN exactly those rows are events, and the message says how many
    assert result.exit_code == 0, result.output
    assert event_keys(events_of(doc)) == row_keys(want)
    assert f"Wrote {len(want):,} events" in result.stderr


@pytest.mark.parametrize("spec, first, stop", [("37:", 37, 40), (":2", 0, 2), ("25", 25, 26)])
def test_open_ended_and_single_iteration_windows(replicated, tmp_path, spec, first, stop):
    trace = raw_trace(replicated)
    want = trace[(trace["global_iteration"] >= first) & (trace["global_iteration"] < stop)]
    result, doc = export(replicated, tmp_path / "t.json", "--iterations", spec)
    assert result.exit_code == 0, result.output
    assert event_keys(events_of(doc)) == row_keys(want) and len(want) > 0


def test_a_cycle_window_keeps_the_rows_that_overlap_it(tmp_path):
    # GIVEN a window over the middle of mnist's trace, its edges inside rows
    trace = raw_trace(MNIST)
    low = int(trace["start_cycle"].quantile(0.4)) + 1
    high = int(trace["start_cycle"].quantile(0.45)) + 1
    # THEN the rows that start before its end and end after its start (or start at or after it)
    want = trace[(trace["start_cycle"] < high) & ((trace["end_cycle"] > low) | (trace["start_cycle"] >= low))]
    result, doc = export(MNIST, tmp_path / "t.json", "--from", str(low), "--to", str(high))
    assert result.exit_code == 0, result.output
    assert event_keys(events_of(doc)) == row_keys(want)
    # one row crosses the window's start: it is kept whole, not clipped
    crossing = want[(want["start_cycle"] < low)]
    assert len(crossing) >= 1


def test_ipu_options_keep_those_ipus_and_name_only_their_processes(tmp_path):
    trace = raw_trace(MNIST)
    result, doc = export(MNIST, tmp_path / "t.json", "--ipu", "3", "--ipu", "1")
    assert result.exit_code == 0, result.output
    assert event_keys(events_of(doc)) == row_keys(trace[trace["ipu"].isin([1, 3])])
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert processes == {1: "IPU 1", 3: "IPU 3"}


def test_windows_combine(replicated, tmp_path):
    # GIVEN iterations 12:30 of IPU 2, from a cycle inside iteration 20
    trace = raw_trace(replicated)
    low = int(trace.loc[trace["global_iteration"] == 20, "start_cycle"].median())
    want = trace[(trace["global_iteration"] >= 12) & (trace["global_iteration"] < 30) & (trace["ipu"] == 2)
                 & ((trace["end_cycle"] > low) | (trace["start_cycle"] >= low))]
    result, doc = export(replicated, tmp_path / "t.json", "--iterations", "12:30", "--ipu", "2", "--from", str(low))
    assert result.exit_code == 0, result.output
    assert event_keys(events_of(doc)) == row_keys(want) and len(want) > 0
    assert doc["otherData"]["window"] == f"--iterations 12:30 --from {low} --ipu 2"


def test_a_narrow_window_decodes_only_the_row_groups_that_hold_it(replicated):
    # GIVEN the row group of every trace row (row groups follow each other in the table)
    trace = raw_trace(replicated)
    with open_profile(replicated) as profile:
        metadata = profile.metadata("trace")
    ends = np.cumsum([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)])
    group = np.searchsorted(ends, np.arange(len(trace)), side="right")
    # WHEN the window is one iteration of one IPU
    window = Window.parse("17", None, None, ("1",))
    kept = window.row_groups(metadata, per_run=10)
    # THEN every group holding one of its rows is kept, and most of the others are skipped
    holding = set(group[((trace["global_iteration"] == 17) & (trace["ipu"] == 1)).to_numpy()].tolist())
    assert holding and holding <= set(kept)
    assert len(kept) < metadata.num_row_groups / 2
    # AND the whole trace keeps every group
    assert Window().row_groups(metadata, per_run=10) == list(range(metadata.num_row_groups))


def test_the_reader_reads_only_the_row_groups_asked_for(replicated):
    with open_profile(replicated) as profile:
        metadata = profile.metadata("trace")
        rows = sum(b.num_rows for b in profile.iter_batches("trace", ["ipu"], 500, row_groups=[1, 3]))
        whole = profile.read_table("trace", ["start_cycle"])["start_cycle"].to_numpy()
        streamed = np.concatenate([b["start_cycle"].to_numpy() for b in
                                   profile.iter_batches("trace", ["start_cycle"], 777)])
    assert rows == metadata.row_group(1).num_rows + metadata.row_group(3).num_rows
    assert np.array_equal(streamed, whole)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc/self/maps")
def test_a_pass_over_the_trace_maps_nothing_of_the_profile(tmp_path):
    # GIVEN a copy of bert-large's profile (its own file: no other mapping of it in this process)
    path = tmp_path / "profile.pop"
    path.write_bytes(BERT_LARGE.read_bytes())
    # WHEN the trace is read through, batch by batch
    with open_profile(path) as profile:
        rows = sum(batch.num_rows for batch in profile.iter_batches("trace"))
        maps = Path("/proc/self/maps").read_text()
    # THEN every row was read, and no page of the file is mapped into the process: its resident
    # size does not grow with the trace, and a rewrite of the file in place cannot SIGBUS it
    assert rows == profile.num_rows("trace") > 0
    assert str(path) not in maps


# -- tracks --------------------------------------------------------------------------------------


def test_every_event_sits_on_its_stage_and_pass_track_and_every_track_is_named(replicated, tmp_path):
    trace = raw_trace(replicated)
    result, doc = export(replicated, tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    events = events_of(doc)
    # THEN every (pid, tid) an event uses has a thread_name, and no thread_name is left unused
    used = {(e["pid"], e["tid"]) for e in events}
    assert used == set(names)
    # AND each event's track name is the one computed from its row: stage and pass, else program type or idle
    got = Counter((e["pid"], e["args"]["start_cycle"], e["args"]["end_cycle"], e["args"]["step"],
                   names[e["pid"], e["tid"]]) for e in events)
    want = Counter(zip(trace["ipu"], trace["start_cycle"], trace["end_cycle"], trace["step"],
                       trace.apply(expected_track, axis=1)))
    assert got == want
    # AND within an IPU one track per name
    for pid in {p for p, _ in names}:
        mine = [n for (p, _), n in names.items() if p == pid]
        assert len(mine) == len(set(mine))
    # AND the tracks a training pipeline shows: IPU 1 runs stage 1's three passes, the all-reduce, syncs
    assert {n for (p, _), n in names.items() if p == 1} >= {
        "stage 1 forward", "stage 1 backward", "stage 1 update", "all-reduce", "sync"}
    sorts = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_sort_index"}
    assert sorts == used


def test_inference_has_forward_tracks_only(tmp_path):
    result, doc = export(ROOT / "sample_profiles" / "mnist_inference" / "profile.pop", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {n for n in names if n.startswith("stage")} == {f"stage {s} forward" for s in range(4)}


@pytest.mark.parametrize("path", SAMPLES, ids=[p.parent.name for p in SAMPLES])
def test_every_sample_exports_valid_trace_event_json(path, tmp_path):
    assert len(SAMPLES) == 7
    result, doc = export(path, tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    with open_profile(path) as profile:
        rows = profile.num_rows("trace")
        clock = profile.target["clock_hz"]
    events = events_of(doc)
    assert len(events) == rows
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert set(e["args"]) <= {"name", "sort_index"} and e["args"]
    # durations are the rows' cycles over the clock, in microseconds
    assert all(abs(e["dur"] - (e["args"]["end_cycle"] - e["args"]["start_cycle"]) / clock * 1e6) < 1e-6
               for e in events)
    # each event is named after its row's program step (the programs row of its IPU and step), or its phase where
    # the step has no program, in the trace's own order
    with open_profile(path) as profile:
        trace = profile.read_table("trace", ["ipu", "step", "phase"]).to_pandas()
        programs = profile.read_table("programs", ["ipu", "step", "name"]).to_pandas()
    named = trace.merge(programs, on=["ipu", "step"], how="left")
    expected = np.where(named["name"].isna(), named["phase"].astype(str), named["name"].astype(str))
    assert [e["name"] for e in events] == expected.tolist()
    assert named["name"].notna().any()  # (and there were program steps to name)


# -- progress bar --------------------------------------------------------------------------------


def test_a_progress_bar_on_a_terminal_and_none_with_quiet_or_a_pipe(tmp_path):
    out = tmp_path / "t.json"
    with open_profile(BERT_LARGE) as profile:
        rows = profile.num_rows("trace")  # one event per trace row
    shown = stderr_on_a_terminal(["export-trace", str(BERT_LARGE), "-o", str(out)])
    assert "Exporting trace" in shown and f"/{rows / 1000:.1f}k" in shown  # the bar counts the trace rows
    quiet = stderr_on_a_terminal(["export-trace", str(BERT_LARGE), "-o", str(out), "-q"])
    assert "Exporting trace" not in quiet and f"Wrote {rows:,} events" in quiet
    piped = subprocess.run([sys.executable, "-m", "popvision_py.cli", "export-trace", str(BERT_LARGE), "-o", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == f"Wrote {rows:,} events to {out}\n"


# -- bad options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options, sentence", [
    (["--iterations", "abc"], "Error: --iterations takes an iteration range A:B (iterations A to B-1, counted over "
                              "the whole trace), A:, :B or one iteration N, not 'abc'."),
    (["--iterations", "5:3"], "Error: --iterations 5:3 selects no iteration: A must be less than B."),
    (["--iterations", "-1:4"], "Error: --iterations takes an iteration range A:B (iterations A to B-1, counted over "
                               "the whole trace), A:, :B or one iteration N, not '-1:4'."),
    (["--from", "ten"], "Error: --from takes a cycle (a whole number >= 0), not 'ten'."),
    (["--from", "500", "--to", "500"], "Error: --from 500 must be less than --to 500."),
    (["--ipu", "x"], "Error: --ipu takes an IPU number (a whole number >= 0), not 'x'."),
])
def test_a_malformed_option_is_one_sentence_and_exit_2(tmp_path, options, sentence):
    out = tmp_path / "t.json"
    result = export(MNIST, out, *options)[0]
    assert result.exit_code == 2
    assert result.stderr == sentence + "\n"
    assert not out.exists()


def test_an_ipu_the_profile_lacks_is_one_sentence_and_exit_2(tmp_path):
    out = tmp_path / "t.json"
    result = export(MNIST, out, "--ipu", "9")[0]
    assert result.exit_code == 2
    assert result.stderr == f"Error: {MNIST} has no IPU 9: its IPUs are 0 to 3.\n"
    assert not out.exists()


def test_a_window_outside_the_trace_says_what_the_trace_holds(replicated, tmp_path):
    # GIVEN a file already at the output path
    out = tmp_path / "t.json"
    out.write_text("earlier")
    trace = raw_trace(replicated)
    last, first_cycle, last_cycle = (int(trace["global_iteration"].max()), int(trace["start_cycle"].min()),
                                     int(trace["end_cycle"].max()))
    assert last == 39
    # WHEN the window starts after the last iteration
    result = export(replicated, out, "--iterations", "40:")[0]
    # THEN one sentence with the trace's extent, exit 2, and the earlier file untouched
    assert result.exit_code == 2
    assert result.stderr == (f"Error: The window --iterations 40: holds no trace rows: the trace of {replicated} holds "
                             f"iterations 0 to {last} and cycles {first_cycle} to {last_cycle}.\n")
    assert out.read_text() == "earlier"


def test_a_trace_without_statistics_still_gets_exactly_its_window(tmp_path):
    # GIVEN the replicated run written by a writer that stores no column statistics (another tool)
    path = _small_row_groups(tmp_path / "plain", runs=3, statistics=False)
    with open_profile(path) as profile:
        metadata = profile.metadata("trace")
        stats = metadata.row_group(0).column(0).statistics
        assert stats is None or not stats.has_min_max
    # WHEN iterations 9:12 are exported (the iterations per run come from the rows, not the footer)
    trace = raw_trace(path)
    want = trace[(trace["global_iteration"] >= 9) & (trace["global_iteration"] < 12)]
    result, doc = export(path, tmp_path / "t.json", "--iterations", "9:12")
    # THEN every row group is read and exactly the window's rows come out
    assert result.exit_code == 0, result.output
    assert set(want["run"]) == {0, 1}
    assert event_keys(events_of(doc)) == row_keys(want)
    assert Window.parse("9:12").row_groups(metadata, per_run=10) == list(range(metadata.num_row_groups))


@pytest.mark.parametrize("statistics", [True, False])
def test_the_program_steps_read_a_batch_at_a_time_are_the_programs_tables(tmp_path, statistics):
    # GIVEN a profile whose programs table is cut into row groups (their footer stating each one's range, or not)
    from popvision_py.export_trace import ProgramSteps
    from popvision_py.format import schema

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "ROW_GROUP_ROWS", 50)
        if not statistics:
            patch.setattr(writer, "PARQUET_OPTIONS", {**writer.PARQUET_OPTIONS, "write_statistics": False})
        result = CliRunner().invoke(main, ["run", "mnist", "--replicas", "2", "--profile", "--profile-dir",
                                           str(tmp_path), "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with open_profile(tmp_path / "profile.pop") as profile:
        assert profile.metadata("programs").num_row_groups > 2
        # WHEN the export reads each (ipu, step)'s name and type
        steps = ProgramSteps.read(profile)
        programs = profile.read_table("programs", ["ipu", "step", "type", "name"]).to_pandas()
    # THEN each row of the programs table has its name and type there, and no other (ipu, step) has any
    names = np.array(steps.names, dtype=object)
    found = {(i, s): (names[steps.name[i, s]], schema.PROGRAM_TYPES[steps.type[i, s]])
             for i, s in zip(*np.nonzero(steps.name >= 0))}
    assert found == {(r.ipu, r.step): (r.name, r.type) for r in programs.itertuples()}
    assert steps.name.shape == (programs["ipu"].max() + 1, programs["step"].max() + 1)
    assert ((steps.name >= 0) == (steps.type >= 0)).all()


def test_an_imported_traces_processes_are_named_by_their_ranks(tmp_path):
    from tests.importer.test_import_some_ranks import import_ranks

    # GIVEN the traces of ranks 5 and 6 of a job of 8, imported (IPUs 0 and 1 of the profile)
    profile = import_ranks(tmp_path, [5, 6], 8, {})
    # WHEN its trace is exported THEN Perfetto's processes are "Rank 5" and "Rank 6", not "IPU 0" and "IPU 1"
    out = tmp_path / "trace.json"
    result = CliRunner().invoke(main, ["export-trace", str(profile), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    names = [e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "process_name"]
    assert names == ["Rank 5", "Rank 6"]
