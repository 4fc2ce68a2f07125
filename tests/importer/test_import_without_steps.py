"""A trace recorded with a plain ``with profile(...)`` around a few iterations (no ``schedule``, no
``prof.step()``): it has no ``ProfilerStep#N``, and the whole trace, from the first event the import keeps
to the last, is one step, said in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from popvision_py.format import open_profile
from popvision_py.importer import find_traces, read_traces
from popvision_py.importer.profile import write_profile

BASE_NS = 1_700_000_000_000_000_000
NOTE = "no ProfilerStep#N (recorded without a schedule, or without prof.step())"


def benchmark_trace(gpu: bool) -> dict:
    """Three iterations of a matmul: on the host at 100, 200 and 300 µs (20 µs each), launching a kernel
    that runs 40 µs on the GPU from 130, 230 and 330 µs. No annotation at all. Times in µs."""
    events = []
    for k in range(3):
        t = 100.0 + 100 * k
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 20.0})
        if gpu:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t + 5, "dur": 5.0, "args": {"correlation": k}})
            events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7,
                           "ts": t + 30, "dur": 40.0, "args": {"correlation": k, "stream": 7}})
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "baseTimeNanoseconds": BASE_NS,
            "traceEvents": events}


@pytest.mark.parametrize("gpu", [True, False])
def test_a_trace_without_profiler_steps_is_one_step_from_its_first_event_to_its_last(gpu, tmp_path):
    # GIVEN a benchmark's trace without ProfilerStep#N (on a GPU: its kernels are the rank's busy time)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(benchmark_trace(gpu)))
    # WHEN it is imported
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    # THEN it imports, says in one line that the whole trace is one step, and `info` shows that line too
    assert result.exit_code == 0, result.output
    assert sum(NOTE in line for line in result.output.splitlines()) == 1
    assert "the whole trace, from the first event the import keeps to the last, is one step" in result.output
    info = CliRunner().invoke(main, ["info", str(tmp_path / "out" / "profile.pop")])
    assert info.exit_code == 0 and NOTE in info.output
    with open_profile(tmp_path / "out" / "profile.pop") as profile:
        trace = profile.read_pandas("trace")
        assert profile.run["device_iterations"] == 1
    # the step: GPU, the first kernel's launch (105 µs) to the last kernel's end (370 µs), 3 x 40 µs busy;
    # CPU, the first operator's start (100 µs) to the last one's end (320 µs), 3 x 20 µs busy
    first, last, busy = (105_000, 370_000, 120_000) if gpu else (100_000, 320_000, 60_000)
    assert trace["start_cycle"].min() == 0 and trace["end_cycle"].max() == last - first
    assert set(trace["iteration"]) == {0}
    live = trace[trace["phase"] != "idle"]
    assert (live["end_cycle"] - live["start_cycle"]).sum() == busy
    report = CliRunner().invoke(main, ["report", str(tmp_path / "out" / "profile.pop")])
    assert report.exit_code == 0, report.output
    assert f"{(last - first) / 1e6:,.3g} ms a step" in report.output


def test_the_rows_of_a_trace_without_steps_cut_a_window_at_a_time_are_its_rows_cut_whole(tmp_path):
    # GIVEN the GPU benchmark's trace: no span at all, only kernels (its windows hold no span)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(benchmark_trace(gpu=True)))
    traces = read_traces(find_traces([str(path)]), jobs=1)
    # WHEN its profile is written whole, and a window of one busy row at a time
    write_profile(tmp_path / "whole" / "profile.pop", traces, name="x", busy_rows=1 << 40)
    write_profile(tmp_path / "cut" / "profile.pop", traces, name="x", busy_rows=1)
    # THEN both hold the same tables: idle from the first launch to the first kernel, three kernels, idle between
    with open_profile(tmp_path / "whole" / "profile.pop") as a, open_profile(tmp_path / "cut" / "profile.pop") as b:
        for table in ("trace", "programs", "liveness", "tile_memory"):
            assert a.read_table(table).equals(b.read_table(table)), table
        trace = a.read_pandas("trace")
    assert list(trace["phase"].astype(str)) == ["idle", "compute", "idle", "compute", "idle", "compute"]


def test_ranks_without_steps_are_said_once_for_the_run(tmp_path: Path):
    # GIVEN two ranks of the benchmark, neither with ProfilerStep#N
    for rank in (0, 1):
        trace = benchmark_trace(gpu=True)
        trace["distributedInfo"] = {"rank": rank, "world_size": 2}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(trace))
    # WHEN they are imported
    result = CliRunner().invoke(main, ["import", str(tmp_path), "-o", str(tmp_path / "out")])
    # THEN the note is one line for the run, not one a rank
    assert result.exit_code == 0, result.output
    assert sum(NOTE in line for line in result.output.splitlines()) == 1
    assert "the traces hold no ProfilerStep#N" in result.output
