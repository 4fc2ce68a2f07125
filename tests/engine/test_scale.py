"""The trace at scale: built from one iteration's template, streamed in bounded batches, and the
engine's run needs no pandas; the engine benchmark's harness works (tiny sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from engine.compiler import compile_plan
from engine.runner import RunRequest, prepare
from engine.scheduler import schedule, trace_batches
from popvision_py.format import open_profile
from tests.engine.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


def _schedule(**options):
    return schedule(compile_plan(prepare(RunRequest("mnist", options=options))))


def _concat(batches) -> dict[str, np.ndarray]:
    batches = list(batches)
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_batches_are_bounded_and_do_not_change_the_trace():
    # GIVEN mnist training over 3 runs of 5 device iterations
    sched = _schedule(device_iterations=5, runs=3)
    body_rows = max(len(r["step"]) for part in sched.parts for r in part.rows)
    # WHEN the trace is streamed in small batches and in one go
    small = list(trace_batches(sched, max_rows=1))
    whole = _concat(trace_batches(sched, max_rows=1 << 30))
    # THEN no small batch holds more than one iteration of one IPU, and the rows are the same
    assert max(len(b["step"]) for b in small) <= body_rows
    joined = _concat(small)
    assert all(np.array_equal(joined[k], whole[k]) for k in whole)
    assert len(whole["step"]) == sched.units * sched.rows_per_unit


def test_iterations_repeat_one_template():
    # GIVEN the same run at 2 and at 6 device iterations
    two, six = _schedule(device_iterations=2), _schedule(device_iterations=6)
    # THEN each is a host call then one iteration, repeated; each iteration lasts as long, and the
    # longer run holds 3 times the iterations' cycles
    assert [p.repeats for p in two.parts] == [1, 2] and [p.repeats for p in six.parts] == [1, 6]
    assert two.parts[1].cycles == six.parts[1].cycles
    assert six.unit_cycles - six.parts[0].cycles == 3 * (two.unit_cycles - two.parts[0].cycles)
    trace = _concat(trace_batches(six))
    ipu0 = trace["ipu"] == 0
    # and on every IPU the rows tile the time line, iteration after iteration
    for ipu in np.unique(trace["ipu"]):
        rows = trace["ipu"] == ipu
        assert np.array_equal(trace["start_cycle"][rows][1:], trace["end_cycle"][rows][:-1])
    assert sorted(set(trace["iteration"][ipu0].tolist())) == list(range(6))


def test_inference_streams_in_bounded_batches_whatever_the_device_iterations():
    # GIVEN mnist inference over its 4-stage pipeline (the default) at 40 and at 4,000 device
    # iterations, and sharded at 4,000
    small = _schedule(mode="inference", device_iterations=40)
    big = _schedule(mode="inference", device_iterations=4000)
    sharded = schedule(compile_plan(prepare(RunRequest("mnist", strategy="sharded", options={
        "mode": "inference", "device_iterations": 4000}))))
    # THEN a run is the host call, the fill, one steady-state superstep repeated, the flush: its
    # templates do not grow with device iterations
    assert [p.repeats for p in big.parts] == [1, 1, 4000 - 3, 1]
    assert [len(r["step"]) for p in big.parts for r in p.rows] == [len(r["step"]) for p in small.parts for r in p.rows]
    # WHEN the trace is streamed in batches of at most 1,000 rows
    batches = list(trace_batches(big, max_rows=1000))
    # THEN no batch exceeds it, and the rows tile each IPU's time line with each micro-batch once per stage
    assert max(len(b["step"]) for b in batches) <= 1000
    trace = _concat(batches)
    assert len(trace["step"]) == big.rows_per_unit
    for ipu in np.unique(trace["ipu"]):
        rows = trace["ipu"] == ipu
        assert np.array_equal(trace["start_cycle"][rows][1:], trace["end_cycle"][rows][:-1])
        busy = rows & (trace["micro_batch"] == 0)
        assert set(trace["iteration"][busy].tolist()) == set(range(4000))
    assert trace["end_cycle"].max() == big.unit_cycles
    # and the same holds sharded: one micro-batch's supersteps, repeated
    assert [p.repeats for p in sharded.parts][-1] == 4000


def test_inference_batches_match_the_run_built_whole():
    # GIVEN pipelined and sharded mnist inference, streamed in tiny batches and in one go
    for strategy in ("pipelined", "sharded"):
        sched = schedule(compile_plan(prepare(RunRequest("mnist", strategy=strategy, options={
            "mode": "inference", "device_iterations": 9, "runs": 2}))))
        small, whole = _concat(trace_batches(sched, max_rows=1)), _concat(trace_batches(sched, max_rows=1 << 30))
        # THEN the rows are the same, every micro-batch is there, and runs follow each other
        assert all(np.array_equal(small[k], whole[k]) for k in whole)
        busy = whole["micro_batch"] == 0
        assert set(whole["iteration"][busy].tolist()) == set(range(9))
        assert whole["end_cycle"].max() == 2 * sched.unit_cycles


def test_trace_rows_are_as_many_as_the_manifest_says(tmp_path):
    result = run_cli("run", "mnist", "--device-iterations", "7", "--runs", "2", "--profile",
                     "--profile-dir", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    with open_profile(tmp_path / "profile.pop") as profile:
        trace = profile.read_table("trace", ["run", "iteration"])
        assert profile.manifest["tables"]["trace"]["rows"] == trace.num_rows
    assert set(trace.column("run").to_pylist()) == {0, 1}
    assert set(trace.column("iteration").to_pylist()) == set(range(7))


def test_the_emulator_does_not_import_pandas(tmp_path):
    # pyarrow.array imports pandas (0.2-0.4 s); the engine builds its Arrow arrays without it. (`popvision
    # run` then reads its idle time and FLOP utilisation through the analysis, which does use pandas.)
    code = ("import sys; from engine.runner import RunRequest, emulate; "
            f"emulate(RunRequest('mnist', profile={str(tmp_path / 'profile.pop')!r})); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_engine_benchmark_smoke(tmp_path):
    # The harness works at tiny sizes (figures are not checked: this machine's timings are noise).
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--quick", "--json", str(out),
                    "--tmp", str(tmp_path)], check=True, capture_output=True, cwd=ROOT)
    figures = json.loads(out.read_text())
    cases = [r["case"] for r in figures["results"]]
    assert cases[:2] == ["A", "B"] and len([c for c in cases if c.startswith("growth")]) == 3
    for r in figures["results"]:
        assert r["engine_s"] > 0 and r["writer_s"] > 0 and r["peak_rss_mb"] > 0 and r["profile_bytes"] > 0
        assert r["total_rows"] == sum(r["rows"].values()) and r["rows"]["trace"] > 0
