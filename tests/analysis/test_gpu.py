"""analysis.imported.gpu: a GPU trace's kernels measured as Holistic Trace Analysis 0.5 measures them, and
popvision's own figures within the profiled steps (docs/reports.md, "GPU").

Every figure below is worked out by hand from the kernels drawn here (times in ns):

    rank 0  stream 7   A gemm [100,110)  launched [90,95)     B gemm [115,130)  launched [96,99)
                                          D Memcpy HtoD [134,140)  launched [131,138)
            stream 13  C ncclKernel_AllReduce [105,120)  launched [92,94)
    rank 1  stream 7   E relu [200,210), F relu [212,220): one cudaGraphLaunch [150,160), correlation 50
                       G Memset (Device) [225,230), no launch in the trace
            stream 9   H fusedMemcpyKernel [200,205)  launched [190,191): a name HTA counts as no type
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from popvision_py.analysis.imported import bound, gpu
from popvision_py.cli import main
from popvision_py.format import ProfileWriter
from popvision_py.format import system as system_files

ROOT = Path(__file__).resolve().parents[2]
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
KERNELS = [  # ipu, stream, kind, name, start, end, launch start, launch end, correlation, launching call
    (0, 7, "compute", "gemm", 100, 110, 90, 95, 1, "cudaLaunchKernel"),
    (0, 7, "compute", "gemm", 115, 130, 96, 99, 2, "cudaLaunchKernel"),
    (0, 13, "communication", NCCL, 105, 120, 92, 94, 3, "cudaLaunchKernelExC"),
    (0, 7, "memcpy", "Memcpy HtoD (Pinned -> Device)", 134, 140, 131, 138, 4, "cudaMemcpyAsync"),
    (1, 7, "compute", "relu", 200, 210, 150, 160, 50, "cudaGraphLaunch"),
    (1, 7, "compute", "relu", 212, 220, 150, 160, 50, "cudaGraphLaunch"),
    (1, 7, "memset", "Memset (Device)", 225, 230, -1, -1, -1, ""),
    (1, 9, "compute", "fusedMemcpyKernel", 200, 205, 190, 191, 60, "cudaLaunchKernel"),
]


def kernels(rows=KERNELS) -> gpu.Kernels:
    columns = list(zip(*rows))
    return gpu.Kernels.build(*columns[:6], launch_start=columns[6], launch_end=columns[7], correlation=columns[8],
                             launch_name=columns[9] if len(columns) > 9 else None)


def frame(table) -> list[dict]:
    return table.frame().to_dict("records")


def test_hta_sorts_kernels_into_types_by_name_not_by_the_tables_kind():
    # GIVEN the kernels WHEN HTA's types are taken
    types = [gpu.HTA_TYPES[t] if t < gpu.HTA_OTHER else "OTHER" for t in gpu.hta_types(kernels()).tolist()]
    # THEN nccl...Kernel is communication, Memcpy/Memset prefixes memory, a name holding Memcpy elsewhere none
    # (in the table's order: by rank, then start: A, C, B, D; E, H, F, G)
    assert types == ["COMPUTATION", "COMMUNICATION", "COMPUTATION", "MEMORY", "COMPUTATION", "OTHER",
                     "COMPUTATION", "MEMORY"]


def test_temporal_breakdown_is_first_kernel_to_last_over_every_stream():
    # WHEN HTA's temporal breakdown is computed
    rows = frame(gpu.temporal(kernels()))
    # THEN rank 0: [100,140) = 40 ns; kernels cover [100,130)+[134,140) = 36, idle 4 = 10%;
    # compute [100,110)+[115,130) = 25 = 62.5%; non-compute 36 - 25 = 11 (NCCL alone 5, the copy 6) = 27.5%
    r0, r1 = rows
    assert (r0["kernel_ns"], r0["idle_ns"], r0["compute_ns"], r0["non_compute_ns"]) == (40, 4, 25, 11)
    assert (r0["idle_pct"], r0["compute_pct"], r0["non_compute_pct"]) == pytest.approx((10.0, 62.5, 27.5))
    # AND rank 1: [200,230) = 30; covered [200,210)+[212,220)+[225,230) = 23, idle 7 = 23.3%; compute E+F = 18
    # = 60%; fusedMemcpyKernel is busy but no type (inside E), the Memset 5 ns non-compute = 16.7%
    assert (r1["kernel_ns"], r1["idle_ns"], r1["compute_ns"], r1["non_compute_ns"]) == (30, 7, 18, 5)
    assert r1["idle_pct"] == pytest.approx(100 * 7 / 30)


def test_kernel_types_and_their_overlaps_summed_over_ranks():
    # WHEN the kernel type breakdown is computed
    rows = {r["kernel_type"]: (r["time_ns"], r["pct"]) for r in frame(gpu.kernel_types(kernels()))}
    # THEN compute alone: rank 0 [100,105)+[120,130) = 15, rank 1 18 -> 33; NCCL alone [110,115) = 5; both
    # [105,110)+[115,120) = 10; memory 6 + 5 = 11 (fusedMemcpyKernel counts for nothing): 59 in all
    assert rows == {"COMPUTATION": (33, pytest.approx(100 * 33 / 59)),
                    "COMMUNICATION": (5, pytest.approx(100 * 5 / 59)),
                    "COMPUTATION overlapping COMMUNICATION": (10, pytest.approx(100 * 10 / 59)),
                    "MEMORY": (11, pytest.approx(100 * 11 / 59))}
    # AND largest first, and per rank the same split of each rank's own sum
    assert list(gpu.kernel_types(kernels())["kernel_type"])[0] == "COMPUTATION"
    by_rank = {(r["rank"], r["kernel_type"]): r["time_ns"] for r in frame(gpu.kernel_types_by_rank(kernels()))}
    assert by_rank == {(0, "COMPUTATION"): 15, (0, "COMMUNICATION"): 5,
                       (0, "COMPUTATION overlapping COMMUNICATION"): 10, (0, "MEMORY"): 6,
                       (1, "COMPUTATION"): 18, (1, "MEMORY"): 5}


def test_comm_comp_overlap_is_the_share_of_communication_under_compute():
    # WHEN the overlap is computed
    r0, r1 = frame(gpu.comm_comp_overlap(kernels()))
    # THEN the NCCL kernel's [105,120) runs beside compute [100,110)+[115,130) for 10 of its 15 ns
    assert (r0["communication_ns"], r0["overlap_ns"]) == (15, 10)
    assert r0["comm_comp_overlap_pct"] == pytest.approx(100 * 10 / 15)
    # AND a rank with no communication kernel has NaN, as HTA's
    assert r1["communication_ns"] == 0 and math.isnan(r1["comm_comp_overlap_pct"])


def test_two_kernels_of_one_type_overlapping_count_once():
    # GIVEN two compute kernels on two streams overlapping by 5 ns
    k = kernels([(0, 1, "compute", "a", 0, 10, -1, -1, -1), (0, 2, "compute", "b", 5, 20, -1, -1, -1)])
    # THEN compute is their union, 20 ns, not 25, and nothing is idle
    (row,) = frame(gpu.temporal(k))
    assert (row["kernel_ns"], row["compute_ns"], row["idle_ns"]) == (20, 20, 0)
    assert frame(gpu.kernel_types(k)) == [{"kernel_type": "COMPUTATION", "time_ns": 20, "pct": 100.0}]


def test_hta_leaves_out_kernels_launched_in_the_last_profiler_step():
    # GIVEN rank 0's last step starting at 112 and rank 1's at 215
    keep = gpu.hta_selection(kernels(), np.array([112, 215]))
    # THEN D (launched at 131) and G (no launch in the trace) are left out (order: A, C, B, D; E, H, F, G)
    assert keep.tolist() == [True, True, True, False, True, True, True, False]
    # AND rank 0's breakdown is over [100,130): all busy, compute 25 of 30
    r0 = frame(gpu.temporal(kernels().take(keep)))[0]
    assert (r0["kernel_ns"], r0["idle_ns"], r0["compute_ns"]) == (30, 0, 25)
    # AND without two steps HTA keeps everything
    assert gpu.hta_selection(kernels(), None).all()


def test_last_step_starts_are_in_the_kernels_time_from_the_first_step():
    # GIVEN each rank's ProfilerStep starts on the traces' clock
    steps = {0: np.array([1000, 1120]), 1: np.array([1005, 1195])}
    # THEN the last ones, from the first rank's first step: 120 and 195
    assert bound.last_step_starts(steps, 2).tolist() == [120, 195]
    # AND one step a rank, or a rank without steps: HTA filters nothing
    assert bound.last_step_starts({0: np.array([1000]), 1: np.array([1000])}, 2) is None
    assert bound.last_step_starts({0: steps[0]}, 2) is None


def test_launch_statistics_and_their_summary():
    # WHEN each launch is measured
    rows = frame(gpu.launches(kernels()))
    # THEN delay = kernel start - call end, 0 if negative: A 100-95 = 5, B 115-99 = 16, C 105-94 = 11, D 134-138 -> 0;
    # H 200-191 = 9; E and F (a CUDA graph's: cudaGraphLaunch is not a call HTA counts) and G (no launch) are left out
    assert [(r["correlation"], r["cpu_duration_ns"], r["gpu_duration_ns"], r["launch_delay_ns"]) for r in rows] == [
        (1, 5, 10, 5), (3, 2, 15, 11), (2, 3, 15, 16), (4, 7, 6, 0), (60, 1, 5, 9)]
    r0, r1 = frame(gpu.launch_summary(kernels()))
    # AND rank 0: delays 0, 5, 11, 16: median 8, p95 11 + 0.85 x 5 = 15.25, max 16; the copy's call (7) outlasts it (6)
    assert (r0["kernels"], r0["launch_delay_median_ns"], r0["launch_delay_max_ns"]) == (4, 8.0, 16.0)
    assert r0["launch_delay_p95_ns"] == pytest.approx(15.25)
    assert r0["cpu_longer_pct"] == 25.0 and r0["gpu_duration_median_ns"] == 12.5
    assert (r1["kernels"], r1["launch_delay_median_ns"], r1["cpu_longer_pct"]) == (1, 9.0, 0.0)


def test_launch_summary_of_every_rank_at_once_is_numpys_a_rank_at_a_time():
    # GIVEN 5 ranks of random launches: rank 2's one kernel has no launch, rank 4 has one, the others 7 to 40, their
    # delays often 0 (ties) and often not
    rng = np.random.default_rng(7)
    ipu = np.repeat(np.arange(5), [7, 40, 1, 23, 1])
    n = len(ipu)
    start = rng.integers(1000, 10**6, n)
    launch = np.where(ipu == 2, -1, start - rng.integers(-500, 3000, n))
    k = gpu.Kernels.build(ipu, [7] * n, ["compute"] * n, ["k"] * n, start, start + rng.integers(1, 900, n),
                          launch, np.where(launch >= 0, launch + rng.integers(1, 700, n), -1),
                          launch_name=["cudaLaunchKernel"] * n)
    # WHEN the summary is made for every rank at once
    rows = frame(gpu.launch_summary(k))
    # THEN each rank's figures are NumPy's over its own launches, to the last bit (NaN where it has none)
    assert [r["rank"] for r in rows] == [0, 1, 2, 3, 4] and [r["kernels"] for r in rows] == [7, 40, 0, 23, 1]
    launched = frame(gpu.launches(k))
    for r in rows:
        mine = [x for x in launched if x["rank"] == r["rank"]]
        delay = np.array([x["launch_delay_ns"] for x in mine], np.int64)
        cpu = np.array([x["cpu_duration_ns"] for x in mine], np.int64)
        gpu_ns = np.array([x["gpu_duration_ns"] for x in mine], np.int64)
        if not mine:
            assert all(math.isnan(r[c]) for c in gpu.LAUNCH_SUMMARY_COLUMNS[2:])
            continue
        assert r["launch_delay_median_ns"] == float(np.median(delay))
        assert r["launch_delay_p95_ns"] == float(np.percentile(delay, 95))
        assert r["launch_delay_max_ns"] == float(delay.max())
        assert r["cpu_duration_median_ns"] == float(np.median(cpu))
        assert r["gpu_duration_median_ns"] == float(np.median(gpu_ns))
        assert r["cpu_longer_pct"] == 100.0 * float((cpu > gpu_ns).sum()) / len(mine)


def test_launch_statistics_count_only_the_calls_hta_counts():
    # GIVEN kernels launched by Triton's driver call, ROCm's runtime and a synchronous copy
    rows = [(0, 7, "compute", "triton_", 100, 110, 90, 95, 1, "cuLaunchKernel"),
            (0, 7, "compute", "Cijk_Alik", 120, 130, 111, 112, 2, "hipLaunchKernel"),
            (0, 8, "memcpy", "Memcpy DtoH", 140, 150, 131, 138, 3, "cudaMemcpy"),
            (0, 7, "compute", "gemm", 160, 170, 150, 151, 4, "cudaLaunchKernel")]
    # THEN HTA's statistics hold the cudaLaunchKernel's kernel alone (delay 160 - 151 = 9)
    assert [(r["correlation"], r["launch_delay_ns"]) for r in frame(gpu.launches(kernels(rows)))] == [(4, 9)]


def test_idle_breakdown_per_stream():
    # WHEN the gaps of each stream are put in HTA's categories
    rows = {(r["rank"], r["stream"], r["idle_category"]): (r["idle_ns"], r["idle_ratio"])
            for r in frame(gpu.idle_breakdown(kernels()))}
    # THEN rank 0 stream 7: B's gap 115-110 = 5 (its call began at 96, before A ended: kernel wait, under 30 us);
    # D's gap 134-130 = 4 (its call began at 131, after B ended: host wait); A first: other, 0
    assert rows[(0, 7, "kernel_wait")] == (5, pytest.approx(5 / 9))
    assert rows[(0, 7, "host_wait")] == (4, pytest.approx(4 / 9))
    assert rows[(0, 7, "other")] == (0, 0.0)
    # AND a stream of one kernel has its other category at 0 and no ratio
    assert rows[(0, 13, "other")][0] == 0 and math.isnan(rows[(0, 13, "other")][1])
    # AND rank 1 stream 7: F's gap 2 (its call at 150 before E ended: kernel wait), G's gap 5 (no call: kernel wait)
    assert rows[(1, 7, "kernel_wait")] == (7, 1.0)
    # AND with a threshold of 3 ns, G's 5 ns gap is other
    small = {(r["rank"], r["stream"], r["idle_category"]): r["idle_ns"]
             for r in frame(gpu.idle_breakdown(kernels(), 3))}
    assert small[(1, 7, "kernel_wait")] == 2 and small[(1, 7, "other")] == 5


def test_top_kernels_per_rank_and_type():
    rows = {(r["rank"], r["kernel_type"], r["name"]): r for r in frame(gpu.top_kernels(kernels()))}
    # THEN gemm on rank 0: 2 kernels, 10 and 15 ns: sum 25, max 15, min 10, mean 12.5, std sqrt(12.5)
    gemm = rows[(0, "COMPUTATION", "gemm")]
    assert (gemm["kernels"], gemm["sum_ns"], gemm["max_ns"], gemm["min_ns"], gemm["mean_ns"]) == (2, 25, 15, 10, 12.5)
    assert gemm["std_ns"] == pytest.approx(math.sqrt(12.5))
    # AND fusedMemcpyKernel, of no HTA type, is in no row
    assert not any(name == "fusedMemcpyKernel" for _, _, name in rows)


def test_more_names_than_asked_become_others_with_htas_figures_of_sums():
    # GIVEN three compute names on one rank: a 20 + 30 = 50 ns, b 30, c 20
    k = kernels([(0, 1, "compute", n, s, s + d, -1, -1, -1) for n, s, d in
                 (("a", 0, 20), ("a", 100, 30), ("b", 200, 30), ("c", 300, 20))])
    # WHEN the top 1 is asked: past the first, and past the 0.8 quantile of the running sums (50, 80, 100 -> 92)
    rows = frame(gpu.top_kernels(k, num_kernels=1))
    # THEN a alone, its max, min and mean its sum as HTA's regrouping gives them; others b + c = 50, over sums 30, 20
    assert [(r["name"], r["kernels"], r["sum_ns"], r["max_ns"], r["min_ns"], r["mean_ns"]) for r in rows] == [
        ("a", 2, 50, 50, 50, 50), ("others", 2, 50, 30, 20, 25)]
    assert rows[0]["std_ns"] == 0 and rows[1]["std_ns"] == pytest.approx(math.sqrt(50))
    # AND with room for 2 and a ratio of 0.5 (quantile 80): c's running sum 100 passes it, b's 80 does not
    assert [r["name"] for r in frame(gpu.top_kernels(k, num_kernels=2, duration_ratio=0.5))] == ["a", "b", "others"]


WINDOW = (np.array([0, 0]), np.array([240, 240]))


def test_by_rank_within_the_profiled_steps_uses_the_tables_kinds():
    r0, r1 = frame(gpu.by_rank(kernels(), WINDOW))
    # THEN rank 0 over [0,240): busy 36, idle 204; compute 25, NCCL 15, memory 6; hidden NCCL 10 of 15
    assert (r0["window_ns"], r0["busy_ns"], r0["idle_ns"], r0["compute_ns"], r0["communication_ns"],
            r0["memory_ns"], r0["non_compute_ns"], r0["comm_hidden_ns"]) == (240, 36, 204, 25, 15, 6, 11, 10)
    assert r0["idle_pct"] == pytest.approx(100 * 204 / 240) and r0["comm_comp_overlap_pct"] == pytest.approx(200 / 3)
    # AND rank 1: fusedMemcpyKernel is a compute kernel by its kind: compute 18 (inside E), memory 5, busy 23
    assert (r1["busy_ns"], r1["compute_ns"], r1["memory_ns"], r1["communication_ns"]) == (23, 18, 5, 0)
    # AND a window cuts the kernels: [105,125) on rank 0 holds A 5, C 15, B 10 -> all busy
    (cut, _) = frame(gpu.by_rank(kernels(), (np.array([105, 0]), np.array([125, 0]))))
    assert (cut["window_ns"], cut["busy_ns"], cut["compute_ns"], cut["communication_ns"]) == (20, 20, 15, 15)


def test_by_stream_and_kernels_by_name():
    rows = {(r["rank"], r["stream"]): r for r in frame(gpu.by_stream(kernels(), WINDOW))}
    # THEN rank 0 stream 7: A, B, D: 31 ns busy, 25 compute, 6 memory; stream 13 the NCCL kernel's 15
    s7 = rows[(0, 7)]
    assert (s7["kernels"], s7["busy_ns"], s7["compute_ns"], s7["memory_ns"]) == (3, 31, 25, 6)
    assert rows[(0, 13)]["communication_ns"] == 15 and rows[(0, 13)]["busy_pct"] == pytest.approx(100 * 15 / 240)
    named = frame(gpu.kernels_by_name(kernels(), WINDOW, n=1))
    # AND each rank's costliest name: gemm 25 ns (rank 0, before the NCCL kernel's 15), relu 18 (rank 1)
    assert [(r["rank"], r["name"], r["kind"], r["kernels"], r["sum_ns"]) for r in named] == [
        (0, "gemm", "compute", 2, 25), (1, "relu", "compute", 2, 18)]


# -- a real profile: written, then reported by the CLI ------------------------------------------------


def write_gpu_profile(folder: Path) -> Path:
    """An imported two-rank profile holding the kernels above, and each rank's CPU timeline with two
    ProfilerSteps (rank 0's last from 120 ns, rank 1's from 195 ns, in the kernels' time)."""
    path = folder / "profile.pop"
    target = {"arch": "gpu", "num_ipus": 2, "tiles_per_ipu": 1, "bytes_per_tile": 2**30, "clock_hz": 1e9}
    run = {"model": "gpu-test", "strategy": "sharded", "mode": "training",
           "stages": [{"stage": 0, "ipu": 0, "blocks": ["model"]}, {"stage": 1, "ipu": 1, "blocks": ["model"]}],
           "micro_batch_size": 1, "gradient_accumulation": 1, "device_iterations": 2, "replication_factor": 1,
           "runs": 1, "source": "pytorch-profiler", "import": {"ranks": [0, 1], "schedule": "data parallel"}}
    trace = {"run": [0] * 4, "iteration": [0, 1, 0, 1], "micro_batch": [-1] * 4, "ipu": [0, 0, 1, 1],
             "stage": [-1] * 4, "pass": ["none"] * 4, "step": [-1] * 4, "phase": ["idle"] * 4,
             "start_cycle": [0, 120, 0, 120], "end_cycle": [120, 240, 120, 240]}
    columns = list(zip(*KERNELS))
    table = {"ipu": columns[0], "stream": columns[1], "kind": columns[2], "name": columns[3],
             "start_cycle": columns[4], "end_cycle": columns[5], "correlation": columns[8],
             "launch_start_cycle": columns[6], "launch_end_cycle": columns[7], "launch_name": columns[9],
             "bytes": [0] * len(KERNELS), "group": [""] * len(KERNELS), "op": [""] * len(KERNELS),
             "module": [""] * len(KERNELS)}
    with ProfileWriter(path, target=target, run=run) as writer:
        writer.write_table("trace", {k: np.asarray(v) for k, v in trace.items()})
        writer.write_table("kernels", {k: np.asarray(v) for k, v in table.items()})
    (folder / "system").mkdir()
    for rank, starts in ((0, (1000, 1120)), (1, (1005, 1195))):
        with system_files.SystemWriter(folder / "system" / f"rank-{rank}{system_files.SUFFIX}", f"rank-{rank}",
                                       100 + rank) as out:
            n = len(starts)
            out.write({"process": np.full(n, f"rank-{rank}", object), "pid": np.full(n, 100 + rank),
                       "thread": np.full(n, "training thread", object), "channel": np.full(n, "pytorch", object),
                       "name": np.array([f"ProfilerStep#{i}" for i in range(n)], object),
                       "kind": np.full(n, "span", object), "start_ns": np.asarray(starts, np.int64),
                       "end_ns": np.asarray(starts, np.int64) + 110, "value": np.full(n, np.nan)})
    return path


def test_the_report_section_of_a_gpu_profile_in_json(tmp_path):
    # GIVEN an imported profile holding the kernels
    profile = write_gpu_profile(tmp_path)
    # WHEN its GPU section is asked for as JSON
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu", "--format", "json"])
    assert result.exit_code == 0, result.output
    gpu_section = json.loads(result.output)["sections"]["gpu"]
    # THEN popvision's own figures are within the profiled steps [0,240): rank 0 idle 204 of 240
    r0 = gpu_section["by_rank"][0]
    assert (r0["rank"], r0["busy_ns"], r0["idle_ns"], r0["compute_ns"]) == (0, 36, 204, 25)
    # AND HTA's leave out what was launched from each rank's last step on (rank 0 from 120: the copy D; rank 1
    # from 195: nothing launched there, the memset G launched by nothing): rank 0 [100,130) all busy, 25 compute;
    # rank 1 [200,220): E and F, 18 of 20, idle 2 = 10%
    t0, t1 = gpu_section["temporal"]
    assert (t0["kernel_ns"], t0["idle_ns"], t0["compute_ns"]) == (30, 0, 25)
    assert (t1["kernel_ns"], t1["idle_ns"], t1["compute_ns"]) == (20, 2, 18) and t1["idle_pct"] == pytest.approx(10.0)
    assert gpu_section["overlap"][0]["comm_comp_overlap_pct"] == pytest.approx(200 / 3)
    assert gpu_section["overlap"][1]["comm_comp_overlap_pct"] is None  # NaN: no communication
    assert {r["kernel_type"]: r["time_ns"] for r in gpu_section["kernel_types"]} == {
        "COMPUTATION": 15 + 18, "COMMUNICATION": 5, "COMPUTATION overlapping COMMUNICATION": 10}
    assert [r["kernels"] for r in gpu_section["launch_summary"]] == [3, 1]
    assert {r["name"] for r in gpu_section["top_kernels"]} == {"gemm", NCCL, "relu"}


@pytest.mark.parametrize("fmt", ["text", "md", "csv", "html"])
def test_the_section_renders_in_every_format(tmp_path, fmt):
    profile = write_gpu_profile(tmp_path)
    out = tmp_path / ("csv" if fmt == "csv" else f"r.{fmt}")
    args = ["report", str(profile), "--section", "gpu", "--format", fmt] + (["-o", str(out)] if fmt in ("csv", "html")
                                                                             else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    text = result.output if fmt in ("text", "md") else (
        (out / "gpu.temporal.csv").read_text() if fmt == "csv" else out.read_text())
    assert ("kernel_ns" in text) and ("idle" in text)


def test_a_profile_without_kernels_says_why_in_one_sentence():
    # GIVEN an emulated sample (schema 4: no kernels table)
    sample = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"
    # WHEN its GPU section is asked for, as text and as JSON
    text = CliRunner().invoke(main, ["report", str(sample), "--section", "gpu"])
    data = CliRunner().invoke(main, ["report", str(sample), "--section", "gpu", "--format", "json"])
    # THEN each says, in one sentence, that an emulated run has no GPU kernels
    assert text.exit_code == 0 and data.exit_code == 0
    note = json.loads(data.output)["sections"]["gpu"]["kernels"]
    assert note == {"kernels": 0, "note": "An emulated IPU run has no GPU kernels: this section is for profiles "
                                          "imported from GPU traces."}
    assert note["note"] in " ".join(text.output.split())


def test_collectives_per_rank_and_group_with_nccl_tests_bandwidths():
    from popvision_py.analysis.imported.collectives import collectives
    # GIVEN rank 0's two all-reduces of 1,000 bytes over a group of 4 (100 and 300 ns), a broadcast of 600
    # bytes over 8 ranks (200 ns), and a compute kernel; rank 1's all-reduce whose group is not said
    names = ["ncclKernel_AllReduce_RING_LL_Sum_float(x)", "ncclDevKernel_Broadcast_RING_LL(y)", "gemm"]
    k = gpu.Kernels.build(
        ipu=[0, 0, 0, 0, 1], stream=[20, 20, 21, 7, 20], kind=["communication"] * 3 + ["compute", "communication"],
        name=[names[0], names[0], names[1], names[2], names[0]], start=[0, 200, 600, 0, 0],
        end=[100, 500, 800, 900, 50], nbytes=[1000, 1000, 600, 0, 50],
        labels={"group": ["[0, 1, 2, 3]", "[0, 1, 2, 3]", "8 ranks", "", ""]})
    rows = frame(collectives(k, (np.array([0, 0]), np.array([1000, 1000]))))
    # THEN rank 0's all-reduces: 2 calls, 2,000 bytes in 400 ns: algbw 5 GB/s, busbw 5 x 2 x 3/4 = 7.5
    assert rows[0] == {"rank": 0, "collective": "AllReduce", "group": "[0, 1, 2, 3]", "group_size": 4, "calls": 2,
                       "bytes": 2000, "time_ns": 400, "algbw_gb_s": 5.0, "busbw_gb_s": 7.5}
    # AND its broadcast: 600 bytes in 200 ns, 3 GB/s, busbw the same (factor 1)
    assert (rows[1]["collective"], rows[1]["group_size"], rows[1]["algbw_gb_s"], rows[1]["busbw_gb_s"]) == (
        "Broadcast", 8, 3.0, 3.0)
    # AND rank 1's, whose group is unknown: its algbw (1 GB/s), no busbw
    assert rows[2]["rank"] == 1 and rows[2]["algbw_gb_s"] == 1.0 and math.isnan(rows[2]["busbw_gb_s"])
    assert len(rows) == 3  # the compute kernel is no collective


def _coverage_by_moment(group, start, end, label, groups, labels):
    """``coverage`` from first principles: at each moment between two of the times, which labels have an interval
    running, per group; the moment's length added to that set's entry (the empty set's: a gap between kernels)."""
    out = np.zeros((groups, 1 << labels), np.int64)
    for g in range(groups):
        mine = (group == g) & (label >= 0) & (end > start)
        times = np.unique(np.concatenate([start[mine], end[mine]]))
        for a, b in zip(times[:-1], times[1:]):
            running = mine & (start <= a) & (end >= b)
            mask = 0
            for lab in np.unique(label[running]).tolist():
                mask |= 1 << lab
            out[g, mask] += b - a
    return out


@pytest.mark.parametrize("sort_by_group", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 7, 50, 10_000])
def test_coverage_a_piece_of_intervals_at_a_time_is_every_moments_labels_summed(rows, sort_by_group):
    # GIVEN 300 intervals of 3 groups and 2 labels: nested, overlapping, long ones across many others, empty ones,
    # some of no label; sorted by group then start as the kernels table is, or not (a figure's groups of streams)
    rng = np.random.default_rng(rows)
    n = 300
    group = rng.integers(0, 3, n)
    start = rng.integers(0, 1_000, n)
    end = start + np.where(rng.random(n) < 0.1, rng.integers(0, 800, n), rng.integers(0, 40, n))
    label = rng.integers(-1, 2, n)
    if sort_by_group:
        order = np.lexsort((start, group))
        group, start, end, label = group[order], start[order], end[order], label[order]
    # WHEN covered ``rows`` intervals at a time
    found = gpu.coverage(group, start, end, label, 3, 2, rows=rows)
    # THEN each group's time under each set of labels is that counted moment by moment
    assert found.tolist() == _coverage_by_moment(group, start, end, label, 3, 2).tolist()


@pytest.mark.parametrize("sample", ["mnist_pipelined", "pytorch_gpipe"])
def test_a_profile_without_kernels_answers_every_gpu_figure_in_the_api(sample):
    # GIVEN an emulated run (no kernels table) and an import of CPU traces (a kernels table of no rows)
    import popvision_py
    from popvision_py.analysis.imported.gpu_ranks import DEFAULTS

    with popvision_py.open(ROOT / "sample_profiles" / sample / "profile.pop") as report:
        view = report.gpu
        assert view.missing()
        # WHEN every figure is asked for in the API (the report shows the one sentence instead)
        found = {name: getattr(view, name)() for name in [*DEFAULTS, "kernel_types", "stragglers", "launches"]}
        ranks = int(report.target["num_ipus"])
    # THEN no figure of kernels has a row, and each rank's window is all idle, each of its steps without GPU time
    kernel_figures = set(found) - {"by_rank", "bounds"}
    assert all(len(found[name]) == 0 for name in kernel_figures), {n: len(found[n]) for n in kernel_figures}
    by_rank, bounds = found["by_rank"], found["bounds"]
    assert len(by_rank) == ranks and (by_rank["busy_ns"] == 0).all()
    assert (by_rank["idle_ns"] == by_rank["window_ns"]).all() and (by_rank["idle_pct"] == 100.0).all()
    assert len(bounds) >= ranks and (bounds["gpu_busy_ns"] == 0).all()
