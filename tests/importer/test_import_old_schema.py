"""Traces of PyTorch 1.8 to 1.12: categories named otherwise (``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``,
``Operator``; record_function's spans as ``Operator`` events), and ``[memory]`` events that carry each
allocation's change (``Bytes``: + allocated, - freed) and no ``Total Allocated``. Memory is the running total
of the changes in time order, from 0 at the first (or from the least level that never goes below 0); the
streaming parser, the byte ranges and the spilled columns read the same."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.cli import main
from popvision_py.importer import ranges, spill
from popvision_py.importer.read import read_stream
from tests.importer.test_import_ranges import assert_same, kineto

MIB = 1 << 20
T0 = 1_000_000_000  # µs: an older trace's absolute times (no baseTimeNanoseconds), exact in a float64
NOTE = "PyTorch before 1.10 records each allocation's and free's change (Bytes)"


def memory(ts: float, change: int, device: int = 1) -> dict:
    """A [memory] event as PyTorch 1.9 writes one: the change alone, no Total Allocated."""
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": T0 + ts,
            "args": {"Device Type": device, "Device Id": 0 if device else -1, "Addr": 1234, "Bytes": change}}


def op(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + ts, "dur": dur}


def old_gpu_trace() -> dict:
    """Two profiler steps of 1 ms on a GPU, as PyTorch 1.9 writes them (times in µs from T0).

    - ProfilerStep#1 [0, 1000) and #2 [1000, 2000): record_function spans, category Operator;
    - the GPU: a Kernel [100, 400), a Memcpy [400, 450), a Memset [450, 460); in step 2 a Kernel [1100, 1300);
    - CUDA memory: +8 MiB at 50, -8 MiB at 200, +6 MiB at 1050, -6 MiB at 1200, +4 MiB at 1500, so the
      level is 8, 0, 6, 0, 4 MiB: its peak 8 MiB (step 1). The file lists the free at 200
      before the allocation at 50: cumulated in the file's order the peak would be 14 MiB.
    - the host's memory (Device Type 0): +1 MiB at 60, not the rank's on a GPU trace.
    """
    events = [
        op("Operator", "ProfilerStep#1", 0, 1000), op("Operator", "ProfilerStep#2", 1000, 1000),
        op("Operator", "aten::mm", 10, 90), op("Runtime", "cudaLaunchKernel", 20, 10),
        op("Kernel", "volta_sgemm_128x64_nn", 100, 300, pid=0, tid=7),
        op("Memcpy", "Memcpy DtoD (Device -> Device)", 400, 50, pid=0, tid=7),
        op("Memset", "Memset (Device)", 450, 10, pid=0, tid=7),
        memory(200, -8 * MIB), memory(50, 8 * MIB), memory(60, MIB, device=0),
        op("Operator", "aten::mm", 1010, 90), op("Runtime", "cudaLaunchKernel", 1020, 10),
        op("Kernel", "volta_sgemm_128x64_nn", 1100, 200, pid=0, tid=7),
        memory(1050, 6 * MIB), memory(1200, -6 * MIB), memory(1500, 4 * MIB),
    ]
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}


def write(path: Path, trace: dict) -> Path:
    header = {"schemaVersion": 1, **{k: v for k, v in trace.items() if k != "traceEvents"}}
    path.write_text(kineto(header, trace["traceEvents"]))
    return path


def test_an_old_gpu_trace_reads_its_kernels_steps_and_memory_changes(tmp_path):
    # GIVEN a GPU trace as PyTorch 1.9 writes it
    path = write(tmp_path / "old.json", old_gpu_trace())
    # WHEN it is imported
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    # THEN it imports: two steps, the GPU's kernels, memcpys and memsets as its busy time, and the note on memory
    assert result.exit_code == 0, result.output
    assert "2 step(s)" in result.output
    assert sum(NOTE in line for line in result.output.splitlines()) == 1
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        assert report.target["arch"] == "gpu"
        trace = report.profile.read_pandas("trace")
        liveness = report.profile.read_pandas("liveness")
        by_ipu = report.memory.by_ipu().set_index("ipu")
    busy = trace[trace["phase"] != "idle"]
    # the Kernels compute; the Memcpy and the Memset are the GPU's copies and sets (the trace's "stream" phase)
    assert list(zip(busy["start_cycle"], busy["end_cycle"], busy["phase"].astype(str))) == [
        (100_000, 400_000, "compute"), (400_000, 460_000, "stream"), (1_100_000, 1_300_000, "compute")]
    assert list(busy["iteration"]) == [0, 0, 1]
    # memory: the running total of the CUDA changes in time order, 8 MiB at its peak (not the file order's 14)
    assert by_ipu.loc[0, "total_bytes"] == 8 * MIB
    # each busy row's most: 8 MiB in the kernel (8 at 50 µs, 0 at 200), 0 in the copy and set, 6 MiB in step 2's
    # kernel (6 from 1050 µs, 0 at 1200)
    assert list(liveness["worst_tile_bytes"]) == [8 * MIB, 0, 6 * MIB]


def test_an_old_cpu_trace_reads_record_functions_operators_as_its_annotations(tmp_path):
    # GIVEN a CPU trace of PyTorch 1.8: ProfilerStep#1 and Forward 0 are Operator events, like aten::mm
    events = [op("Operator", "ProfilerStep#1", 0, 1000), op("Operator", "Forward 0", 100, 400),
              op("Operator", "aten::mm", 150, 100), op("Operator", "aten::relu", 300, 50),
              op("Operator", "aten::add", 700, 100)]
    path = write(tmp_path / "old.json", {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events})
    # WHEN it is imported
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        trace = report.profile.read_pandas("trace")
    # THEN the step spans [0, 1000) µs and the forward [100, 500) µs, while only the operators are busy: the
    # forward's own time, and aten::add's (700 to 800 µs) outside any pass
    assert trace["end_cycle"].max() == 1_000_000
    forward = trace[trace["pass"] == "forward"]
    assert list(zip(forward["start_cycle"], forward["end_cycle"])) == [(100_000, 500_000)]
    rest = trace[(trace["phase"] == "compute") & (trace["pass"] == "none")]
    assert list(zip(rest["start_cycle"], rest["end_cycle"])) == [(700_000, 800_000)]


def random_changes(seed: int, n: int = 400) -> tuple[list[dict], int]:
    """``n`` CUDA changes at random times (several in one 10 µs, some at one time), shuffled in the file, and
    the peak a person computes: the levels in time order (ties in the file's order), from the least start
    that keeps every level at 0 or above."""
    rng = random.Random(seed)
    made = [(float(rng.randrange(0, 5000)), rng.randrange(-3, 5) * 1000) for _ in range(n)]
    rng.shuffle(made)
    level, lowest, highest = 0, 0, 0
    for _, change in sorted(made, key=lambda m: m[0]):  # sorted() is stable: ties keep the file's order
        level += change
        lowest, highest = min(lowest, level), max(highest, level)
    events = [op("Operator", "ProfilerStep#1", -1, 6000), op("Kernel", "k", 0, 5000, pid=0, tid=7)]
    return events + [memory(ts, change) for ts, change in made], highest - lowest


@pytest.mark.parametrize("seed", [1, 2])
def test_the_readers_and_the_spill_cumulate_changes_alike_in_time_order(seed, tmp_path, monkeypatch):
    # GIVEN 400 memory changes in random order, read in ranges of a few hundred bytes (dozens of parts)
    events, peak = random_changes(seed)
    path = write(tmp_path / "old.json", {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events})
    monkeypatch.setattr(ranges, "RANGE_BYTES", 400)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 256)
    assert len(ranges.rank_ranges(path)[0].ranges) > 20
    # WHEN it is read by the streaming parser, by byte ranges in memory, and by byte ranges spilled (its
    # changes cumulated 7 rows at a time)
    stream = read_stream(path)
    fast = ranges.read_fast(path)
    monkeypatch.setattr(spill, "BATCH_ROWS", 7)
    spilled = ranges.read_fast(path, spill=tmp_path)
    # THEN the three hold the same columns, and the peak a person computes
    assert spilled.spill is not None and stream.memory_changes and fast.memory_changes and spilled.memory_changes
    assert_same(fast, stream)
    assert_same(spilled, stream, but=("spill",))
    assert int(stream.memory_bytes.max()) == peak
    assert int(stream.memory_bytes.min()) >= 0


def test_an_import_in_parallel_processes_cumulates_the_changes_as_the_streaming_parser(tmp_path, monkeypatch):
    # GIVEN two ranks of 400 shuffled memory changes each, in ranges small enough for each rank to be read by
    # both processes
    from popvision_py.importer import read_traces

    folder = tmp_path / "traces"
    folder.mkdir()
    peaks = []
    for rank in (0, 1):
        events, peak = random_changes(10 + rank)
        write(folder / f"rank{rank}.json", {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events})
        peaks.append(peak)
    paths = sorted(folder.iterdir())
    monkeypatch.setattr("popvision_py.importer.IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(ranges, "RANGE_BYTES", 2000)
    # WHEN they are read in two processes, their columns spilled, and by the streaming parser
    parallel = read_traces(paths, jobs=2, spill=tmp_path)
    # THEN each rank's memory is the streaming parser's, its peak the one a person computes
    for trace, path, peak in zip(parallel, paths, peaks):
        assert trace.spill is not None
        assert_same(trace, read_stream(path), but=("spill",))
        assert int(trace.memory_bytes.max()) == peak


def test_a_trace_that_frees_what_it_never_allocated_starts_from_the_least_level_above_0(tmp_path):
    # GIVEN CUDA changes of -2 MiB (a free of memory allocated before the trace), +5 MiB, -1 MiB
    events = [op("Operator", "ProfilerStep#1", 0, 1000), op("Kernel", "k", 10, 900, pid=0, tid=7),
              memory(100, -2 * MIB), memory(200, 5 * MIB), memory(300, -1 * MIB)]
    path = write(tmp_path / "old.json", {"traceEvents": events})
    # WHEN it is imported
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        by_ipu = report.memory.by_ipu().set_index("ipu")
    # THEN at least 2 MiB was allocated before it: the levels are 0, 5 and 4 MiB, the peak 5 MiB
    assert by_ipu.loc[0, "total_bytes"] == 5 * MIB


@pytest.mark.parametrize("args, sentence", [
    ({"Device Type": 1, "Bytes": "4"}, 'has a [memory] event whose Bytes is "4", not a change in bytes'),
    ({"Device Type": 1, "Bytes": 1 << 62}, "has a [memory] event whose Bytes is out of range"),
    ({"Device Type": 1}, "has a [memory] event whose Total Allocated is null"),
])
def test_a_bad_memory_change_is_one_sentence(args, sentence, tmp_path):
    # GIVEN an old trace whose one [memory] event's change is not a number, out of range, or missing
    events = [op("Operator", "ProfilerStep#1", 0, 1000), op("Kernel", "k", 10, 900, pid=0, tid=7),
              {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": T0 + 5, "args": args}]
    path = write(tmp_path / "old.json", {"traceEvents": events})
    # WHEN it is imported
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    # THEN one sentence, exit code 2, nothing written
    assert result.exit_code == 2, result.output
    assert sentence in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_trace_mixing_levels_and_changes_of_one_device_is_one_sentence(tmp_path, monkeypatch):
    # GIVEN CUDA [memory] events with Total Allocated and, in another byte range of the file, with only Bytes
    events = [op("Operator", "ProfilerStep#1", 0, 1000), op("Kernel", "k", 10, 900, pid=0, tid=7),
              {**memory(100, MIB), "args": {"Device Type": 1, "Bytes": MIB, "Total Allocated": MIB}},
              *(op("Operator", f"aten::op{k}", 20 + k, 1) for k in range(40)), memory(200, MIB)]
    path = write(tmp_path / "old.json", {"traceEvents": events})
    monkeypatch.setattr(ranges, "RANGE_BYTES", 400)
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 256)
    assert len(ranges.rank_ranges(path)[0].ranges) > 5
    # WHEN it is read by byte ranges (in memory, and spilled), and imported
    for folder in (None, tmp_path):
        with pytest.raises(ranges.Fallback):  # the streaming parser says what is wrong
            ranges.read_fast(path, spill=folder)
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    # THEN one sentence: a trace records one or the other
    assert result.exit_code == 2, result.output
    assert "that give Total Allocated and others that give only Bytes" in result.output


def test_the_categories_are_read_as_todays_by_both_readers(tmp_path):
    # GIVEN the old GPU trace
    path = write(tmp_path / "old.json", old_gpu_trace())
    # WHEN both readers read it
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN both keep the same: its two steps (Operator events), its GPU busy time, its CUDA memory levels
    assert_same(fast, stream)
    assert fast.gpu and sorted(fast.names) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert (fast.busy - T0 * 1000).tolist() == [[100_000, 460_000], [1_100_000, 1_300_000]]
    assert (fast.memory_bytes // MIB).tolist() == [8, 0, 6, 0, 4]
    assert np.array_equal(fast.memory_ts - T0 * 1000, [50_000, 200_000, 1_050_000, 1_200_000, 1_500_000])
    assert json.loads(path.read_text())["traceEvents"][7]["args"]["Bytes"] == -8 * MIB  # the free, listed first
