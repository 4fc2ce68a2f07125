"""benchmarks/gpu_vs_hta.py: its reading of a trace's raw JSON (HTA's rounding and last-step rule, by hand) and
its side-by-side table, on figures made here (HTA itself runs only in the benchmark, in its own environment)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_vs_hta  # noqa: E402

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def write_trace(folder: Path) -> Path:
    """One rank, two profiler steps, fractional microseconds as PyTorch 2.4 on writes them."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000.0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1100.0, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1010.2, "dur": 3.3,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1020.4, "dur": 9.9,
         "args": {"stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1105.0, "dur": 2.0,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 13, "ts": 1110.5, "dur": 20.0,
         "args": {"stream": 13, "correlation": 2}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 1050.0,
         "dur": 5.0, "args": {"stream": 7, "correlation": 3}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 1020.4},  # a flow: no duration
    ]
    path = folder / "rank0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
                                "traceEvents": events}))
    return path


def test_the_raw_json_is_read_with_htas_rounding_and_its_last_step(tmp_path):
    # GIVEN a trace with fractional microseconds
    write_trace(tmp_path)
    # WHEN it is read with HTA's rules
    raw = gpu_vs_hta.read_raw(tmp_path)
    rows = raw["rows"]
    # THEN each start is rounded up and each end down to whole microseconds, from the earliest event (ts 1000):
    # gemm [1020.4, 1030.3) -> [21, 30) us; the NCCL kernel [1110.5, 1130.5) -> [111, 130); its call [1105, 1107)
    assert list(zip(rows["name"], rows["kind"], rows["start"], rows["end"], rows["launch_start"])) == [
        ("gemm", "compute", 21_000, 30_000, 11_000), (NCCL, "communication", 111_000, 130_000, 105_000),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", 50_000, 55_000, -1)]
    # AND the last step starts at 100 us, the steps span [0, 200) us
    assert raw["last_step_start"] == [100_000] and raw["window"] == (0, 200_000)
    # AND without HTA's rules the times are the trace's own, to the ns
    exact = gpu_vs_hta.read_raw(tmp_path, hta_rules=False)["rows"]
    assert (exact["start"][0], exact["end"][0]) == (20_400, 30_300)


def test_the_raw_figures_keep_what_hta_keeps_and_popvisions_own_take_the_steps(tmp_path):
    write_trace(tmp_path)
    raw = gpu_vs_hta.read_raw(tmp_path)
    found = gpu_vs_hta.figures_of(gpu_vs_hta.raw_kernels(raw), raw["last_step_start"], raw["window"])
    # THEN HTA's figures hold only gemm (the NCCL kernel was launched in the last step, the copy by no call
    # in the trace): 9 us, all compute
    (temporal,) = found["temporal"]
    assert (temporal["kernel_us"], temporal["idle_pct"], temporal["compute_pct"]) == (9.0, 0.0, 100.0)
    assert found["launch"][0]["launch_delay_median_us"] == 8.0  # 21 - 13
    # AND popvision's own: every kernel within [0, 200) us: 9 + 19 + 5 = 33 busy, idle 167 of 200 = 83.5%
    assert found["steps"][0]["idle_pct"] == pytest.approx(83.5)


HTA = {"temporal": [{"rank": 3, "idle_pct": 16.2, "compute_pct": 61.23, "non_compute_pct": 22.57}],
       "overlap": [{"rank": 3, "comm_comp_overlap_pct": float("nan")}],
       "launch": [{"rank": 3, "launch_delay_median_us": 614.0, "launch_delay_p95_us": 9939.0}],
       "kernel_types": [{"kernel_type": "COMPUTATION", "pct": 47.2}],
       "top_kernels": [{"rank": 3, "kernel_type": "COMMUNICATION", "name": NCCL, "sum_us": 105057.0},
                       {"rank": 3, "kernel_type": "COMPUTATION", "name": "others", "sum_us": 1e9}]}


def test_compare_sets_each_figure_beside_htas_and_marks_what_is_off():
    # GIVEN HTA's figures, the raw JSON's equal, and popvision's: idle 1.8 points off, the launch median 6 us
    # off (under 1% of 614), no p95, NaN overlap as HTA's, and its own idle within the steps
    raw = json.loads(json.dumps(HTA)) | {"steps": [{"rank": 3, "idle_pct": 16.46}]}
    pv = {"temporal": [{"rank": 3, "idle_pct": 18.0, "compute_pct": 61.0, "non_compute_pct": 21.0}],
          "overlap": [{"rank": 3, "comm_comp_overlap_pct": None}],
          "launch": [{"rank": 3, "launch_delay_median_us": 620.0}], "kernel_types": [],
          "top_kernels": [{"rank": 3, "kernel_type": "COMMUNICATION", "name": NCCL, "sum_us": 105057.4}],
          "steps": [{"rank": 3, "idle_pct": 16.5}]}
    rows = {r.figure: r for r in gpu_vs_hta.compare("t", HTA, raw, pv)}
    idle = rows["rank 3 idle %"]
    assert (idle.hta, idle.raw, idle.popvision) == (16.2, 16.2, 18.0)
    assert idle.agrees(idle.raw) is True and idle.agrees(idle.popvision) is False
    assert rows["rank 3 compute %"].agrees(61.0) is True  # 0.23 points
    assert rows["rank 3 launch delay median us"].agrees(620.0) is True  # 6 us, under 1% of HTA's 614
    assert rows["rank 3 launch delay p95 us"].popvision is None
    overlap = rows["rank 3 comm-comp overlap %"]
    assert math.isnan(overlap.popvision) and overlap.agrees(overlap.popvision) is True  # both NaN
    assert rows["COMPUTATION % of kernel time"].popvision is None  # popvision found no such type
    # AND the top kernels are HTA's own names (not its "others"), matched by rank, type and name
    top = [r for r in rows.values() if r.figure.startswith("rank 3 ncclKernel")]
    assert len(top) == 1 and top[0].popvision == 105057.4 and not any("others" in f for f in rows)
    # AND popvision's own idle within the steps has no HTA value
    own = rows["rank 3 idle % within the profiled steps"]
    assert (own.hta, own.raw, own.popvision) == (None, 16.46, 16.5)
    # WHEN it is printed THEN each popvision-side value is marked: = within the tolerance, ! off
    table = "\n".join(gpu_vs_hta.markdown(list(rows.values())))
    assert "| t | rank 3 idle % | 16.20 | 16.20 = | 18.00 ! |" in table
    assert "| t | rank 3 comm-comp overlap % | NaN | NaN = | NaN = |" in table
