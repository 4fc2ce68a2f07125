"""What bound each profiled step of a GPU trace, the kernels worth a look, and the phases the trace's own
annotations name (``analysis.imported.bound``), from a trace written here as Kineto lays one out and imported
through the CLI. Times in µs below; the profile's are ns from the first step's start (the import's origin).

    ProfilerStep#1 [0, 1000): 100 launches of ``tiny`` (cudaLaunchKernel [10i + 0.5, 10i + 5.5) inside aten::add
        [10i, 10i + 6), in the forward of module ``nn.Module: Bias_0`` [0, 999)), each kernel [10i + 6, 10i + 8)
        on stream 7: the GPU runs 2 µs in each 10 and waits for the next launch the rest
    ProfilerStep#2 [1000, 2000): the DataLoader fetches a batch [1000, 1600) while the GPU idles; ``gemm`` is then
        launched [1600, 1605) and runs [1610, 1900) on stream 7
    ProfilerStep#3 [2000, 3000): two micro-batches, annotated ``mb0`` [1840, 1860) and ``mb1`` [1870, 1890) on the
        CPU (and on the GPU's track, as Kineto copies them), launched ``attn`` [1850, 1855) -> [1900, 2900) on
        stream 7 and ``mlp`` [1880, 1885) -> [2300, 2700) on stream 8: they overlap [2300, 2700), 400 µs

Step 1: busy 100 x 2 = 200; every gap's next kernel was launched after the gap began: 6 (before the first
kernel) + 99 x 8 + 2 (from the last kernel's end at 998 to the step's end; gemm's launch came at 1600) = 800
launch wait: launch-bound. Step 2: idle [1000, 1610) = 610, of which 600 under the DataLoader's fetch and 10 from
gemm's launch to its start; busy [1610, 2000) = 390 (gemm, then attn from 1900): input-bound. Step 3: busy
[2000, 2900) = 900; after attn nothing is launched, so the last 100 wait on something else: gpu-bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.cli import main
from tests.importer.test_gpu_timeline import HEADER, kernel, launch
from tests.importer.test_import_ranges import both_readers_agree, kineto

CPU = {"pid": 1, "tid": 1}
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def annotation(name: str, ts: float, dur: float, stream: int | None = None) -> dict:
    """A user annotation on the CPU, or its copy on a GPU stream's track."""
    where = CPU if stream is None else {"pid": 0, "tid": stream}
    return {"ph": "X", "cat": "user_annotation" if stream is None else "gpu_user_annotation", "name": name,
            "ts": ts, "dur": dur, **where}


def events() -> list[dict]:
    tiny = []
    for i in range(100):
        tiny += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 10 * i, "dur": 6, **CPU},
                 launch("cudaLaunchKernel", 10 * i + 0.5, 5, 100 + i),
                 kernel("void tiny_add_kernel<float>", 10 * i + 6, 2, 7, 100 + i)]
    return [
        *(annotation(f"ProfilerStep#{n + 1}", 1000 * n, 1000) for n in range(3)),
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Bias_0", "ts": 0, "dur": 999, **CPU},
        *tiny,
        annotation(DATALOADER, 1000, 600),
        launch("cudaLaunchKernel", 1600, 5, 1),
        kernel("gemm", 1610, 290, 7, 1),
        annotation("mb0", 1840, 20), launch("cudaLaunchKernel", 1850, 5, 2),
        annotation("mb1", 1870, 20), launch("cudaLaunchKernel", 1880, 5, 3),
        kernel("attn", 1900, 1000, 7, 2), kernel("mlp", 2300, 400, 8, 3),
        annotation("mb0", 1900, 1000, stream=7), annotation("mb1", 2300, 400, stream=8),
    ]


def import_long_run(folder: Path, steps: int, slow: int = 17) -> Path:
    """One rank's ``steps`` profiler steps of 1 ms, but step ``slow`` of 3 ms; each a kernel launched 1 µs in, running
    from 10 µs in to 10 µs before the step ends (every step GPU-bound), imported through the CLI: the profile."""
    events, start = [], 0
    for n in range(1, steps + 1):
        length = 3000 if n == slow else 1000
        events += [annotation(f"ProfilerStep#{n}", start, length), launch("cudaLaunchKernel", start + 1, 5, n),
                   kernel("gemm", start + 10, length - 20, 7, n)]
        start += length
    (folder / "rank0.json").write_text(kineto(HEADER, events))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bound")
    (folder / "rank0.json").write_text(kineto(HEADER, events()))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


def gpu_section(profile: Path) -> dict:
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["sections"]["gpu"]


def test_each_step_is_launch_input_or_gpu_bound_with_its_evidence(imported):
    # WHEN the GPU section is asked for through the CLI
    bounds = gpu_section(imported)["bounds"]
    # THEN each profiled step has its verdict and the figures behind it (ns)
    assert [(b["step"], b["verdict"]) for b in bounds] == [(1, "launch-bound"), (2, "input-bound"), (3, "gpu-bound")]
    assert [b["step_ns"] for b in bounds] == [1_000_000] * 3
    assert [b["gpu_busy_ns"] for b in bounds] == [200_000, 390_000, 900_000]
    assert [b["launch_wait_ns"] for b in bounds] == [800_000, 10_000, 0]
    assert [b["input_wait_ns"] for b in bounds] == [0, 600_000, 0]
    assert [b["other_idle_ns"] for b in bounds] == [0, 0, 100_000]
    assert [b["gpu_busy_pct"] for b in bounds] == [20.0, 39.0, 90.0]
    # AND the launches that made step 1 launch-bound: 100 kernels of 2 µs, each launch 5 µs on the CPU
    assert (bounds[0]["kernels"], bounds[0]["kernel_median_ns"], bounds[0]["launch_median_ns"]) == (100, 2000, 5000)


def test_the_text_report_says_each_verdict_in_words(imported):
    result = CliRunner().invoke(main, ["report", str(imported), "--section", "gpu"])
    assert result.exit_code == 0, result.output
    assert "rank 0 step 1 (1.000 ms): launch-bound" in result.output
    assert "GPU busy 20.0%; idle 80.0% waiting for launches" in result.output
    assert "rank 0 step 2 (1.000 ms): input-bound" in result.output
    assert "39.0%; idle 1.0% waiting for launches (the next kernel's launch came after the GPU went idle), 60.0% " \
           "while the DataLoader fetched" in result.output
    assert "rank 0 step 3 (1.000 ms): gpu-bound" in result.output


def test_a_long_runs_steps_are_said_a_rank_at_a_time_then_the_slowest(tmp_path):
    # GIVEN one rank's 50 steps of 1 ms but step 17 of 3 ms, every one GPU-bound: more than the 40 a report lists
    profile = import_long_run(tmp_path, 50)
    # WHEN the text report says what bound each step
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu"])
    assert result.exit_code == 0, result.output
    text = result.output[result.output.index("What bound each step"):result.output.index("The kernels worth a look")]
    lines = [line.strip() for line in text.splitlines()[2:] if line.strip()]
    # THEN first the rank's 50 steps in a line, their median and the slowest; then the 10 slowest, step 17 first
    # with its evidence; then how many more there are, not 40 steps alike
    assert lines[0] == "rank 0 over 50 steps: 50 gpu-bound"
    assert lines[1].startswith("median step 1.000 ms: GPU busy 98.0%")
    assert lines[2] == "slowest: step 17 (3.000 ms), gpu-bound"
    assert lines[3] == "the 10 slowest of 50 steps:"
    assert lines[4] == "rank 0 step 17 (3.000 ms): gpu-bound"
    assert sum(line.startswith("rank 0 step ") for line in lines) == 10
    assert lines[-1] == "... 40 more steps (--format json or csv lists every one)"


def test_the_short_kernel_launched_many_times_is_worth_a_look(imported):
    worth = {w["name"]: w for w in gpu_section(imported)["worth_a_look"]}
    # THEN the four names are each rank's longest (five at most), the longest first; tiny is short and many too:
    # 100 launches (MANY_KERNELS), each 2 µs on the GPU and 5 µs to launch
    assert list(worth) == ["attn", "mlp", "gemm", "void tiny_add_kernel<float>"]
    tiny = worth["void tiny_add_kernel<float>"]
    assert tiny["reason"] == "long; short and many"
    assert (tiny["kernels"], tiny["total_ns"], tiny["median_ns"], tiny["launch_median_ns"]) == (100, 200_000, 2000,
                                                                                              5000)
    assert tiny["why"].endswith("100 launches of 2.0 us each on the GPU (median), each launch 5.0 us on the CPU: "
                                "launch overhead, worth fusing or a CUDA graph")
    assert worth["attn"]["why"] == "33.3% of the profiled time on the GPU (1.000 ms over 1 kernels)"  # of 3,000 µs
    # AND each with the operator and module its launches ran in (attn's launch ran in none)
    assert (tiny["op"], tiny["module"]) == ("aten::add", "nn.Module: Bias_0")
    assert (worth["attn"]["op"], worth["attn"]["module"]) == ("", "")
    text = CliRunner().invoke(main, ["report", str(imported), "--section", "gpu"]).output
    assert "rank 0: void tiny_add_kernel<float> (long; short and many)\n" in text
    assert "      launched from aten::add in nn.Module: Bias_0\n" in text


def test_two_micro_batches_on_two_streams_are_two_phases_overlapping(imported):
    section = gpu_section(imported)
    phases = {p["phase"]: p for p in section["phases"]}
    # THEN mb0's kernel ran 1,000 µs, 400 of them beside mb1's, which ran beside it all its 400 µs; the steps
    # and the DataLoader's fetch are not phases
    assert set(phases) == {"mb0", "mb1"}
    assert {k: phases["mb0"][k] for k in ("spans", "kernels", "gpu_ns", "overlap_ns", "overlapped_with", "with_ns")} \
        == {"spans": 1, "kernels": 1, "gpu_ns": 1_000_000, "overlap_ns": 400_000, "overlapped_with": "mb1",
            "with_ns": 400_000}
    assert (phases["mb1"]["gpu_ns"], phases["mb1"]["overlap_ns"], phases["mb1"]["overlap_pct"]) == (
        400_000, 400_000, 100.0)
    assert phases["mb0"]["overlap_pct"] == 40.0
    assert [(p["phase"], p["other"], p["overlap_ns"]) for p in section["phase_overlaps"]] == [
        ("mb0", "mb1", 400_000), ("mb1", "mb0", 400_000)]


def test_the_ranks_cpu_timeline_holds_the_fetches_and_annotations(imported):
    with popvision_py.open(imported) as report:
        spans = report.gpu.spans()
        events = report.system.events()
    # THEN the DataLoader's fetch and the annotations are on channels of their own, the GPU's copies on their
    # stream's thread, on the kernels' time (ns from the first step)
    assert set(events.channels) == {"pytorch", "dataloader", "annotation"}
    assert {thread for _, thread in events.rows} == {"training thread", "GPU stream 7", "GPU stream 8"}
    by = {(str(spans.names[n]), int(s)): (int(a), int(b)) for n, s, a, b in zip(spans.name, spans.stream,
                                                                                  spans.start, spans.end)}
    assert by[(DATALOADER, -1)] == (1_000_000, 1_600_000)
    assert by[("mb1", -1)] == (1_870_000, 1_890_000) and by[("mb1", 8)] == (2_300_000, 2_700_000)
    assert by[("ProfilerStep#3", -1)] == (2_000_000, 3_000_000)


def test_both_readers_keep_the_same_annotations(tmp_path, monkeypatch):
    path = tmp_path / "rank0.json"
    path.write_text(kineto(HEADER, events()))
    fast = both_readers_agree(path, monkeypatch, 2000, 512)
    assert {"mb0", "mb1", DATALOADER} <= set(fast.names)


def test_a_ranks_system_row_counts_its_profiler_steps_and_its_waits_for_data(imported):
    from dashboards.app import create_app
    from tests.dashboard.test_gpu_page import page, text

    # GIVEN the rank of events(): three profiler steps of 1 ms, one DataLoader fetch of 600 µs
    with popvision_py.open(imported) as report:
        row = report.system.processes().iloc[0]
    # THEN its system row counts its profiler steps as its model calls, and the fetch is its wait for data, of its
    # 3 ms from its first event to its last
    assert row["model_calls"] == 3 and row["wall_ms"] == pytest.approx(3.0)
    assert row["wait_for_data_ms"] == pytest.approx(0.6) and row["wait_for_data_pct"] == pytest.approx(20.0)
    # AND the text report calls them steps, and has no samples per second and no block of counters (the import
    # writes none); JSON keeps the profile's names and the empty block
    out = CliRunner().invoke(main, ["report", str(imported), "--section", "system"]).output
    header = out.splitlines()[out.splitlines().index("System timeline: host time per process") + 2].split()
    assert header == ["process", "pid", "threads", "events", "wall_ms", "steps", "wait_for_data_ms",
                      "wait_for_data_pct"]
    assert "Counters" not in out
    doc = json.loads(CliRunner().invoke(main, ["report", str(imported), "--section", "system", "--format",
                                               "json"]).output)["sections"]["system"]
    assert doc["processes"][0]["model_calls"] == 3 and doc["counters"] == []
    # AND the System page's card says the same
    create_app([str(imported)])
    cards = text(page("system").render_figures("a")[1])
    assert "3 steps · waits for data 20.0 %" in cards
