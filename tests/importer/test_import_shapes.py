"""Trace shapes the CPU recordings do not have: a GPU trace (Kineto's device tracks) written here by
hand in its documented layout, and any JSON at all in place of the events (hypothesis)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import popvision_py
from popvision_py.cli import main


def gpu_trace(rank: int) -> dict:
    """One rank of a 2-rank pipeline on GPUs, as Kineto lays it out: CPU annotations and launches on
    the host (pid 1), kernels and GPU-side annotations on the device (pid 0, stream 7), an NCCL kernel
    on stream 20, CUDA [memory] events (Device Type 1) beside CPU ones (Device Type 0). Times in µs."""
    cpu, dev = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, **cpu},
        # the host launches the forward at 10 µs; the GPU runs it from 100 to 400 µs
        {"ph": "X", "cat": "user_annotation", "name": "Forward 0", "ts": 10, "dur": 20, **cpu},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12, "dur": 5, **cpu,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "Forward 0", "ts": 100, "dur": 300, **dev},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "ts": 100, "dur": 300, **dev,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        # the send of the activations: an NCCL kernel on its own stream, 400 to 450 µs
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
         "ts": 400, "dur": 50, "pid": 0, "tid": 20, "args": {"correlation": 2, "stream": 20}},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "ts": 500, "dur": 10, **cpu},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "Optimizer.step#SGD.step", "ts": 600, "dur": 100, **dev},
        {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel", "ts": 600, "dur": 100, **dev},
        {"ph": "i", "name": "[memory]", "ts": 100, **cpu, "args": {"Total Allocated": 7, "Device Type": 0}},
        {"ph": "i", "name": "[memory]", "ts": 150, **cpu, "args": {"Total Allocated": 3 << 30, "Device Type": 1,
                                                                   "Device Id": 0}},
        {"ph": "i", "name": "[memory]", "ts": 620, **cpu, "args": {"Total Allocated": 5 << 30, "Device Type": 1,
                                                                   "Device Id": 0}},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 << 30}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}, "baseTimeNanoseconds": 10**18,
            "traceEvents": events, "traceName": f"rank{rank}.json"}


def test_a_gpu_trace_takes_its_passes_time_kernels_and_memory_from_the_device(tmp_path):
    for rank in range(2):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gpu_trace(rank)))
    result = CliRunner().invoke(main, ["import", str(tmp_path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    with popvision_py.open(tmp_path / "out" / "profile.pop") as report:
        assert report.target["arch"] == "gpu" and report.target["bytes_per_tile"] == 80 << 30
        trace = report.profile.read_pandas("trace")
        exchanges = report.profile.read_pandas("exchanges")
        by_ipu = report.memory.by_ipu().set_index("ipu")
    rank0 = trace[trace["ipu"] == 0]
    forward = rank0[rank0["pass"] == "forward"]
    # the forward ran on the GPU from 100 to 400 µs (the host's launch at 10 µs is not its time)
    assert list(zip(forward["start_cycle"], forward["end_cycle"])) == [(100_000, 400_000)]
    update = rank0[rank0["pass"] == "update"]
    assert list(zip(update["start_cycle"], update["end_cycle"])) == [(600_000, 700_000)]
    # the NCCL kernel is communication, exposed: nothing else ran on the GPU then
    comm = rank0[rank0["phase"] == "exchange"]
    assert list(zip(comm["start_cycle"], comm["end_cycle"])) == [(400_000, 450_000)]
    assert set(exchanges["cycles"]) == {50_000}
    # the GPU's memory, not the host's: 5 GiB at its peak
    assert by_ipu.loc[0, "total_bytes"] == 5 << 30


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)
EVENT = st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "M", "s", 5]),
                               "name": st.sampled_from(["Forward 1", "PP:0F1", "c10d::send", "gloo:recv", "[memory]",
                                                        "ProfilerStep#1", "aten::mm", "Optimizer.step#SGD.step"])
                               | JSON,
                               "cat": st.sampled_from(["cpu_op", "user_annotation", "kernel", "gpu_user_annotation"])
                               | JSON,
                               "ts": st.integers(-10, 10**6) | JSON, "dur": st.integers(0, 10**4) | JSON,
                               "args": JSON})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(EVENT | JSON, max_size=12), head=JSON)
def test_any_json_in_a_trace_is_a_profile_or_one_sentence(tmp_path, events, head):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": head, "traceEvents": events}))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(out)])
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ")
    else:
        with popvision_py.open(out / "profile.pop") as report:
            report.summary.insights()  # and it reads back
