"""On a GPU trace the rank's time is its GPU's: the kernels, copies and sets, per stream, with the runtime
calls that launched them (the profile's ``kernels``), and the trace's phases cut from them, never from the
CPU's spans.

The trace is written here by hand, as Kineto lays one out, with figures chosen to be summed on paper.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.cli import main
from popvision_py.importer import ranges
from popvision_py.importer.kernels import KERNEL_COLUMN
from popvision_py.importer.parts import KIND
from popvision_py.importer.read import read_stream
from tests.importer.test_import_ranges import assert_same, both_readers_agree, kineto

CPU = {"pid": 1, "tid": 1}


def kernel(name: str, ts: float, dur: float, stream: int, correlation: int | None = None, cat: str = "kernel") -> dict:
    args = {"stream": stream, "device": 0, **({"correlation": correlation} if correlation is not None else {})}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def launch(name: str, ts: float, dur: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": dur, **CPU,
            "args": {"correlation": correlation}}


HEADER = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": 40 << 30}],
          "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "baseTimeNanoseconds": 10**18}


def events() -> list[dict]:
    """One profiler step of 1,000 µs. The CPU blocks in an all-reduce call from 300 to 700 µs and steps the
    optimiser from 800 to 850 µs; the GPU computes [100, 300) and [350, 400) on stream 7, all-reduces
    [250, 500) on stream 20 (hidden behind compute for [250, 300) and [350, 400)), copies [520, 560) on
    stream 8 and sets [600, 610) on stream 7. The first two launches run in operators (aten::mm, aten::relu)
    inside a module's forward, the copy's in aten::copy_ outside it, the all-reduce's in none. Times in µs."""
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, **CPU},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "ts": 5, "dur": 22, **CPU},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 8, "dur": 10, **CPU},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 19, "dur": 7, **CPU},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 29, "dur": 6, **CPU},
        launch("cudaLaunchKernel", 10, 5, 1),
        launch("cudaLaunchKernel", 20, 5, 2),
        launch("cudaMemcpyAsync", 30, 4, 3),
        launch("cudaLaunchKernel", 40, 3, 4),
        launch("cudaStreamSynchronize", 45, 500, 5),  # not a launch: joined to nothing
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 300, "dur": 400, **CPU,
         "args": {"In msg nelems": 1000, "dtype": "Float", "Collective name": "allreduce"}},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "ts": 800, "dur": 50, **CPU},
        kernel("ampere_sgemm_128x64_tn", 100, 200, 7, 1),
        {**kernel("ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclWorkElem)", 250, 250, 20, 4),
         "args": {"stream": 20, "correlation": 4, "In msg nelems": 1000, "dtype": "BFloat16", "Group size": 1}},
        # (a copy says its size in its args)
        kernel("void at::native::vectorized_elementwise_kernel<4, relu>", 350, 50, 7, 2),
        {**kernel("Memcpy HtoD (Pageable -> Device)", 520, 40, 8, 3, cat="gpu_memcpy"),
         "args": {"stream": 8, "correlation": 3, "bytes": 4096}},
        kernel("Memset (Device)", 600, 10, 7, cat="gpu_memset"),
    ]


def import_gpu_trace(folder: Path) -> Path:
    """The trace of ``events`` written in ``folder`` and imported through the CLI: its profile's path."""
    (folder / "rank0.json").write_text(kineto(HEADER, events()))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_gpu_trace(tmp_path_factory.mktemp("gpu"))


def test_each_kernel_copy_and_set_is_a_row_with_its_stream_kind_and_launch(imported):
    with popvision_py.open(imported) as report:
        k = report.profile.read_pandas("kernels")
    # five GPU events, by start, times in ns from the profiled step's start
    assert list(k["start_cycle"]) == [100_000, 250_000, 350_000, 520_000, 600_000]
    assert list(k["end_cycle"]) == [300_000, 500_000, 400_000, 560_000, 610_000]
    assert list(k["stream"]) == [7, 20, 7, 8, 7]
    assert list(k["kind"].astype(str)) == ["compute", "communication", "compute", "memcpy", "memset"]
    assert k["name"].astype(str).iloc[1].startswith("ncclKernel_AllReduce")
    # each joined to the runtime call of its correlation id; the set has none, and the synchronize launches nothing
    assert list(k["correlation"]) == [1, 4, 2, 3, -1]
    assert list(k["launch_start_cycle"]) == [10_000, 40_000, 20_000, 30_000, -1]
    assert list(k["launch_end_cycle"]) == [15_000, 43_000, 25_000, 34_000, -1]
    # what each moves: the all-reduce its 1,000 BFloat16 elements, the copy its 4,096 bytes; its group of 1 rank
    assert list(k["bytes"]) == [0, 2_000, 0, 4_096, 0]
    assert list(k["group"].astype(str)) == ["", "1 rank", "", "", ""]
    # the operator and module each launch ran in: the innermost that holds the launch on its thread
    assert list(k["op"].astype(str)) == ["aten::mm", "", "aten::relu", "aten::copy_", ""]
    assert list(k["module"].astype(str)) == ["nn.Module: Linear_0", "", "nn.Module: Linear_0", "", ""]


def test_the_phases_are_the_gpus_and_the_cpus_blocked_call_and_optimiser_step_are_not(imported):
    with popvision_py.open(imported) as report:
        trace = report.profile.read_pandas("trace")
        run = report.run
        overview = report.summary.figures()
    cycles = (trace["end_cycle"] - trace["start_cycle"]).groupby(trace["phase"].astype(str)).sum()
    # compute [100, 300) + [350, 400) = 250 µs; communication alone [300, 350) + [400, 500) = 150 µs (the
    # CPU's call from 300 to 700 µs is not: from 500 the GPU idles); copies and sets 40 + 10 = 50 µs; the
    # rest of the 1,000 µs idle (the CPU's optimiser step at 800 µs ran no kernel)
    assert cycles.get("compute", 0) == 250_000
    assert cycles.get("exchange", 0) == 150_000
    assert cycles.get("stream", 0) == 50_000
    assert cycles.get("idle", 0) == 550_000
    # communication hidden behind compute: [250, 300) and [350, 400)
    assert run["import"]["hidden_comm_ns"] == [100_000]
    # the all-reduce moved its kernel's 1,000 BFloat16 elements: 2,000 bytes, over its 250 µs on the GPU
    exchanges = report_exchanges(imported)
    assert exchanges["bytes"].sum() == 2_000 and 250_000 in set(exchanges["cycles"])
    assert overview.step_cycles == 1_000_000
    # AND per rank the same parts, which add up to the rank's 1,000 µs; the communication hidden apart
    with popvision_py.open(imported) as report:
        comm = report.exchange.communication().iloc[0]
    assert (comm["compute_cycles"], comm["exposed_comm_cycles"], comm["copies_cycles"], comm["idle_cycles"],
            comm["hidden_comm_cycles"]) == (250_000, 150_000, 50_000, 550_000, 100_000)


def report_exchanges(path: Path):
    with popvision_py.open(path) as report:
        return report.profile.read_pandas("exchanges")


def test_the_overview_says_the_gpus_idle_share(imported):
    result = CliRunner().invoke(main, ["report", str(imported)])
    assert result.exit_code == 0, result.output
    assert "idle 55.0%" in result.output  # 550 of 1,000 µs


def test_the_overview_tells_communication_from_the_gpus_copies_and_sets(imported):
    # busy: compute 250 µs, the all-reduce alone 150 µs, copies and sets 50 µs (the test above): 450 µs. A copy
    # is not communication between ranks: it is counted apart, not in the communication's share
    result = CliRunner().invoke(main, ["report", str(imported)])
    assert result.exit_code == 0, result.output
    line = next(s for s in result.output.splitlines() if s.strip().startswith("exchange"))
    assert f"{100 * 150 / 450:.1f}% of the busy time is communication, {100 * 50 / 450:.1f}% the GPU's copies " \
           f"and sets ({100 * 250 / 1000:.1f}% of all time computes)" in line


def test_both_readers_keep_the_same_gpu_timeline(tmp_path, monkeypatch):
    # GIVEN the trace cut into byte ranges of a few hundred bytes (a kernel and its launch in different ranges)
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, events()))
    # THEN both readers keep the same kernels, names and launches
    fast = both_readers_agree(path, monkeypatch, 300, 256)
    assert len(fast.kernels) == 5 and fast.kernel_names == sorted(fast.kernel_names)
    launch = KERNEL_COLUMN["launch_start"]
    launched = fast.kernels[:, launch] >= 0
    assert launched.sum() == 4 and np.all(fast.kernels[launched, launch] < fast.kernels[launched, 0])


def test_both_readers_read_streams_and_correlations_out_of_range_alike(tmp_path):
    # GIVEN kernels whose args say no stream or one out of range (the track's is taken), and correlation ids missing,
    # negative or past 2^62 (none: -1), launched or not
    odd = [{"stream": None}, {"stream": 1 << 31, "correlation": 2}, {"stream": -4, "correlation": -3},
           {"stream": 9, "correlation": (1 << 62) + 1}, {"stream": 9, "correlation": 7}, {}]
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, **CPU},
              launch("cudaLaunchKernel", 10, 5, 2), launch("cudaLaunchKernel", 12, 5, (1 << 62) + 1)]
    for k, args in enumerate(odd):
        event = kernel(f"k{k}", 100 + 10 * k, 5, 7)
        event["tid"] = "stream 12" if k % 2 else 31
        events.append({**event, "args": args} if args else {kk: v for kk, v in event.items() if kk != "args"})
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, events))
    # WHEN both readers read it
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN they agree: the streams are the args' where in range, else the track's; one kernel is launched
    assert_same(fast, stream)
    c = KERNEL_COLUMN
    assert fast.kernels[:, c["stream"]].tolist() == [31, 12, 31, 9, 9, 12]
    assert fast.kernels[:, c["correlation"]].tolist() == [-1, 2, -1, -1, 7, -1]
    assert (fast.kernels[:, c["launch_start"]] >= 0).sum() == 1
    # AND an id past int64, which the streaming parser refuses, is not taken by the fast path either
    path.write_text(kineto(HEADER, [*events, kernel("big", 300, 5, 7, (1 << 63) + 5)]))
    with pytest.raises(ranges.Fallback):
        ranges.read_fast(path)


COLLECTIVE_ARGS = [  # what a collective's args may say of its bytes and group, as Kineto and gloo write them
    {"In msg nelems": 1000, "dtype": "BFloat16", "Group size": 4, "Process Group Ranks": [0, 1, 2, 3]},
    {"In msg nelems": 7, "dtype": "Double", "Process Group Ranks": "[0, 2]", "Group size": 2},
    {"In msg nelems": 0, "dtype": None, "Group size": 1},
    {"Input type": ["c10::Half"], "Input Dims": [[32, 512]], "Group size": 3},
    {"Input Dims": [[[2, 3], [4]]], "Process Group Ranks": [1, True]},  # a tensor list; a bool is no rank
    {"dtype": "Float", "In msg nelems": 5, "In msg nelems ": 9, "stream": 20, "Out msg nelems": 12},
    {"In msg nelems": 3, "dtype": "Float", "TWICE": 11},  # written as "In msg nelems" twice: the last one is read
    None,  # args: null
    {},
]


@pytest.mark.parametrize("on", ["kernel", "annotation", "gpu annotation"])
def test_both_readers_read_a_collectives_bytes_and_group_alike_whatever_its_args_say(on, tmp_path):
    # GIVEN NCCL kernels, CPU annotations or GPU-track annotations of collectives whose args say their bytes and
    # group in each way a trace says them (elements and type, shapes, nothing; ranks as a list or a string; a key
    # twice; args null, or none at all)
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, **CPU}]
    for k, args in enumerate([*COLLECTIVE_ARGS, "none"]):
        if on == "kernel":
            event = kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 100 + 50 * k, 40, 20, k + 1)
        else:
            cat = "user_annotation" if on == "annotation" else "gpu_user_annotation"
            event = {"ph": "X", "cat": cat, "name": "nccl:all_reduce", "ts": 100 + 50 * k, "dur": 40, **CPU}
        if args == "none":
            event.pop("args", None)
        else:
            event["args"] = args
        events.append(event)
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, events).replace('"TWICE"', '"In msg nelems"'))
    # WHEN both readers read it
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN they keep the same spans (the bytes each moved) and kernels (their bytes and groups)
    assert_same(fast, stream)
    flight = fast.kind == KIND["comm_flight"]
    assert flight.sum() == len(COLLECTIVE_ARGS) + 1
    assert fast.nbytes[flight].tolist() == [2000, 56, 0, 32 * 512 * 2, 40, 20, 44, 0, 0, 0]


def test_both_readers_keep_the_same_gpu_timeline_of_a_data_parallel_run(tmp_path, monkeypatch):
    # GIVEN a synthetic data-parallel GPU trace (make_gpu_trace.py: three streams, NCCL kernels, every kernel, copy
    # and set launched by a runtime call), cut into ranges of 16 KiB
    from tests.importer.test_import_spill import synthetic_gpu

    path = synthetic_gpu(tmp_path / "traces") / "rank1.json"
    monkeypatch.setattr(ranges, "RANGE_BYTES", 16 << 10)
    fast, stream = ranges.read_fast(path), read_stream(path)
    # THEN both readers keep the same kernels, names and launches, every one of them launched
    assert len(ranges.rank_ranges(path)[0].ranges) > 20
    assert_same(fast, stream)
    c = KERNEL_COLUMN
    assert set(np.unique(fast.kernels[:, c["stream"]]).tolist()) == {7, 20, 24}
    assert (fast.kernels[:, c["launch_start"]] >= 0).all() and (fast.kernels[:, c["op"]] >= 0).all()


def test_a_cpu_trace_has_no_kernels(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, [e for e in events() if e.get("pid") != 0]))
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        assert report.profile.read_table("kernels").num_rows == 0
        assert report.target["arch"] == "cpu"


def test_info_says_what_the_traces_were_in_a_pytorch_users_words(imported):
    result = CliRunner().invoke(main, ["info", str(imported)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "Imported from PyTorch profiler traces" in lines
    assert any(line.split() == ["GPU", "kernels", "5"] for line in lines)
    assert any(line.split()[:3] == ["ranks", "traced", "rank"] and line.endswith("rank 0") for line in lines)
    assert "gpu, memory 40,960.0 MiB a rank" in result.output  # deviceProperties' totalGlobalMem, 40 GiB
    # and none of an IPU's words
    assert "strategy" not in result.output and "tiles_per_ipu" not in result.output


def test_one_rank_of_a_larger_world_is_a_data_parallel_job(tmp_path):
    # GIVEN the trace of rank 3 of 64, published alone (it made no collective call on the CPU)
    header = {**HEADER, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 64}}
    path = tmp_path / "rank3.json"
    path.write_text(kineto(header, [e for e in events() if e["name"] != "c10d::allreduce_"]))
    assert CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out"), "-q"]).exit_code == 0
    result = CliRunner().invoke(main, ["info", str(tmp_path / "out" / "profile.pop")])
    # THEN it is one rank of 64 of a data-parallel job, not a single process
    assert "rank 3 of a world of 64" in result.output
    assert any(line.split() == ["schedule", "data", "parallel"] for line in result.output.splitlines())


def test_the_gpu_section_lists_the_all_reduce_with_its_bytes_group_and_bandwidth(imported):
    result = CliRunner().invoke(main, ["report", str(imported), "--section", "gpu", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["sections"]["gpu"]["collectives"]
    # the all-reduce's 1,000 BFloat16 elements (2,000 bytes) in its 250 µs: 0.008 GB/s; a group of 1 rank
    # carries nothing over a link (nccl-tests' 2(n-1)/n = 0)
    assert rows == [{"rank": 0, "collective": "AllReduce", "group": "1 rank", "group_size": 1, "calls": 1,
                     "bytes": 2000, "time_ns": 250_000, "algbw_gb_s": 0.008, "busbw_gb_s": 0.0}]


def test_a_distributed_info_written_after_the_events_names_the_rank(tmp_path, monkeypatch):
    # GIVEN a trace whose distributedInfo follows its events (rank 3 of 4), as some tools write it
    header = {k: v for k, v in HEADER.items() if k != "distributedInfo"}
    text = kineto(header, events())
    at = text.rstrip().rfind("}")
    path = tmp_path / "rank.json"
    path.write_text(text[:at] + ',\n  "distributedInfo": {"rank": 3, "world_size": 4}\n}\n')
    monkeypatch.setattr(ranges, "RANGE_BYTES", 300)  # the keys after the events in the last of many ranges
    monkeypatch.setattr(ranges, "SEARCH_BYTES", 256)
    # WHEN both readers read it THEN both take it for rank 3 of 4
    for trace in (ranges.read_fast(path), read_stream(path)):
        assert (trace.rank, trace.world_size) == (3, 4)
    # AND the import says rank 3
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0 and "rank 3)" in result.output, result.output


def test_kinetos_copy_of_a_profiler_step_on_the_gpus_track_is_not_a_step(tmp_path):
    # GIVEN the trace with Kineto's copy of ProfilerStep#1 on stream 7's track (gpu_user_annotation), as ROCm's
    # and CUDA's traces hold it
    copy = {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 100,
            "dur": 510, "args": {"stream": 7}}
    (tmp_path / "rank0.json").write_text(kineto(HEADER, [*events(), copy]))
    result = CliRunner().invoke(main, ["import", str(tmp_path / "rank0.json"), "-o", str(tmp_path / "out"), "-q"])
    # THEN the run has the one step the CPU recorded, 1,000 µs long
    assert result.exit_code == 0 and "1 step(s)" in result.output, result.output
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        assert report.summary.figures().step_cycles == 1_000_000


def memory(ts: float, total: int) -> dict:
    """A [memory] event on the GPU: ``total`` bytes allocated from ``ts`` µs."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", **CPU, "ts": ts,
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": 0, "Device Id": 0, "Device Type": 1,
                     "Addr": 1}}


MIB = 1 << 20


def import_hidden_all_reduce(folder: Path) -> Path:
    """One profiler step of 1,000 µs imported: a GEMM [100, 300) with an all-reduce [150, 250) wholly hidden behind
    it, then a GEMM [400, 500); 6 MiB allocated from 50 µs, 2 MiB from 350, 8 MiB from 450. Its profile's path."""
    mib = MIB
    (folder / "rank0.json").write_text(kineto(HEADER, [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, **CPU},
        launch("cudaLaunchKernel", 10, 5, 1), launch("cudaLaunchKernel", 20, 5, 2),
        launch("cudaLaunchKernel", 30, 5, 3),
        kernel("ampere_sgemm_128x64_tn", 100, 200, 7, 1),
        {**kernel("ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclWorkElem)", 150, 100, 20, 2),
         "args": {"stream": 20, "correlation": 2, "In msg nelems": 1000, "dtype": "BFloat16", "Group size": 1}},
        kernel("ampere_sgemm_64x64_tn", 400, 100, 7, 3),
        memory(50, 6 * mib), memory(350, 2 * mib), memory(450, 8 * mib)]))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


def test_a_hidden_all_reduce_is_a_program_step_without_liveness(tmp_path):
    # GIVEN the trace of a GEMM hiding an all-reduce, then a GEMM WHEN it is imported
    mib = MIB
    with popvision_py.open(import_hidden_all_reduce(tmp_path)) as report:
        trace = report.profile.read_pandas("trace")
        programs = report.profile.read_pandas("programs")
        exchanges = report.profile.read_pandas("exchanges")
        liveness = report.profile.read_pandas("liveness")
        tile_memory = report.profile.read_pandas("tile_memory")
        by_step = report.liveness.by_step()
    # THEN the time line's two steps are the GEMMs (the all-reduce never runs alone)
    busy = trace[trace["step"] >= 0]
    assert list(zip(busy["step"], busy["start_cycle"], busy["end_cycle"])) == [(0, 100_000, 300_000),
                                                                               (1, 400_000, 500_000)]
    # the all-reduce is a step of its own after them, of 0 cycles, its 250 µs and 2,000 bytes in exchanges
    assert list(programs["step"]) == [0, 1, 2] and programs["cycles"].iloc[2] == 0
    assert str(programs["type"].iloc[2]) == "all_reduce"
    assert list(zip(exchanges["step"], exchanges["cycles"], exchanges["bytes"])) == [(2, 100_000, 2_000)]
    # memory: the time line's steps only, each the most allocated in it or else when it began: 6 MiB in the
    # first GEMM (nothing sampled in it), 8 MiB in the second (2 MiB when it began, 8 from 450 µs)
    assert list(liveness["step"]) == [0, 1] and list(by_step["step"]) == [0, 1]
    # the lowest level is still the 2 MiB allocated when the last step began: the weights (always live) are 2 MiB,
    # the activations the 8 MiB peak less them
    assert set(liveness["always_live_bytes"]) == {2 * mib}
    assert list(liveness["not_always_live_bytes"]) == [4 * mib, 6 * mib]
    assert list(liveness["worst_tile_bytes"]) == [6 * mib, 8 * mib]
    assert dict(zip(tile_memory["category"].astype(str), tile_memory["bytes"])) == {"weights": 2 * mib,
                                                                                  "activations": 6 * mib}


def test_the_peaks_are_read_a_batch_at_a_time_where_the_program_steps_are_many(tmp_path, monkeypatch):
    from popvision_py.analysis.ipu import liveness

    # GIVEN an import whose liveness (2 rows) is short and its programs (3 rows, the hidden all-reduce's too) long
    path = import_hidden_all_reduce(tmp_path)
    with popvision_py.open(path) as whole:
        expected = whole.liveness.peaks()
    monkeypatch.setattr(liveness, "STREAM_ROWS", 2)
    with popvision_py.open(path) as report:
        # WHEN its peaks are asked for (the summary's findings, the dashboard's first page)
        peaks = report.liveness.peaks()
        # THEN neither table is decoded whole: the peaks are read a batch at a time, and the same
        assert not report.decodes("programs") and not report.decodes("liveness")
    pd.testing.assert_frame_equal(peaks, expected)
    assert list(peaks["peak_step"]) == [1] and list(peaks["not_always_live_bytes"]) == [6 * MIB]


def test_the_communication_hidden_is_measured_at_import_and_the_exchanges_read_only_without_it(tmp_path):
    from popvision_py.analysis.imported.ranks import communication

    # GIVEN the import of a GEMM [100, 300) hiding an all-reduce [150, 250)
    with popvision_py.open(import_hidden_all_reduce(tmp_path)) as report:
        trace, run = report.trace_summary(), report.run
        exchanges = report.columns("exchanges")

    def unread():
        raise AssertionError("the exchanges were read")

    # WHEN its communication per rank is worked out THEN the import's measure is taken: 100 µs hidden, none exposed,
    # and the exchanges are not read
    measured = communication(trace, unread, run)
    assert list(measured["hidden_comm_cycles"]) == [100_000] and list(measured["exposed_comm_cycles"]) == [0]
    # AND a profile imported before the import measured it: the transfers' whole time less their exposed part
    older = {**run, "import": {k: v for k, v in run["import"].items() if k != "hidden_comm_ns"}}
    bounded = communication(trace, lambda: exchanges, older)
    assert list(bounded["hidden_comm_cycles"]) == [100_000]


def test_the_collectives_alone_are_one_figure_and_the_same_as_with_every_figure(imported):
    # GIVEN the trace's profile opened twice WHEN the Exchange page asks for the collectives first, in one,
    # and after the GPU page's figures, in the other
    with popvision_py.open(imported) as first, popvision_py.open(imported) as after:
        alone = first.gpu.collectives()
        made_alone = not first.holds(("GpuReport", "figures"))
        after.gpu.by_rank()
        together = after.gpu.collectives()
    # THEN the first made the collectives alone (not every figure), and both are the same: the all-reduce's 2,000
    # bytes in 250 µs on rank 0
    assert made_alone
    pd.testing.assert_frame_equal(alone, together)
    assert list(alone["bytes"]) == [2_000] and list(alone["calls"]) == [1]


def test_a_kind_of_transfer_whose_size_the_trace_does_not_record_has_no_bandwidth_achieved_not_zero(tmp_path):
    from popvision_py.analysis.imported.ranks import NO_SIZES

    # GIVEN the trace of ``events`` (its all-reduce moves 1,000 BFloat16 elements in 250 µs) with a SendRecv kernel
    # of no size, and the same trace with the all-reduce's size left out too
    send = kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 900, 30, 21)
    sizeless = [{**e, "args": {k: v for k, v in e["args"].items() if k != "In msg nelems"}} if "args" in e else e
                for e in events()]
    answers = {}
    for name, trace in (("sized", events() + [send]), ("sizeless", sizeless + [send])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank0.json").write_text(kineto(HEADER, trace))
        out = tmp_path / name / "out"
        assert CliRunner().invoke(main, ["import", str(tmp_path / name / "rank0.json"), "-o", str(out), "-q"]) \
            .exit_code == 0
        # WHEN the exchange section is asked for, as JSON and as text
        json_out = CliRunner().invoke(main, ["report", str(out / "profile.pop"), "--section", "exchange",
                                             "--format", "json"])
        text_out = CliRunner().invoke(main, ["report", str(out / "profile.pop"), "--section", "exchange"])
        assert json_out.exit_code == 0 and text_out.exit_code == 0, json_out.output + text_out.output
        rows = json.loads(json_out.output)["sections"]["exchange"]["bandwidth"]
        answers[name] = ({r["kind"]: r["achieved_bytes_per_s"] for r in rows if r["cycles"]}, text_out.output)
    # THEN the all-reduce's 2,000 bytes in 250 µs achieved 8,000,000 bytes/s; the SendRecv, of no size, none (null
    # in JSON), where 0 bytes over its 30 µs read as 0 bytes/s before
    assert answers["sized"][0] == {"all_reduce": 2000 / 250e-6, "inter_ipu": None}
    assert NO_SIZES not in answers["sized"][1]
    # AND where no transfer has a size, the text says so in a sentence instead of a table of zeros
    assert answers["sizeless"][0] == {"all_reduce": None, "inter_ipu": None}
    assert f"  ({NO_SIZES})" in answers["sizeless"][1].splitlines()
