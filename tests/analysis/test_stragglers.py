"""Stragglers across ranks (``imported.stragglers``, ``popvision report --section gpu``): a data-parallel run with
one slow rank planted among 64, every collective ending on every rank once the last is ready; the report names
the slow rank, by how much it is late, and the step without it, each figure recomputed here from the raw traces'
kernels and runtime calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from popvision_py.cli import main

ROOT = Path(__file__).resolve().parents[2]
RANKS, SLOW, FACTOR = 64, 37, 1.5


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path]:
    """The traces of 64 ranks, rank 37's GPU 1.5 times slower, the others alike; and their import."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    folder = tmp_path_factory.mktemp("stragglers")
    traces = folder / "traces"
    make_gpu_trace.make(traces, total_mb=0.1, ranks=RANKS, layers=4, bucket=2, jobs=1, spread=0.0,
                        slow_rank=SLOW, slow_factor=FACTOR)
    result = CliRunner().invoke(main, ["import", str(traces), "-o", str(folder / "p.pop")])
    assert result.exit_code == 0, result.output
    return traces, folder / "p.pop"


def ns(us: float) -> int:
    return int(round(us * 1000))


def raw_step(path: Path) -> dict[str, np.ndarray | int]:
    """A rank's first profiler step as its trace gives it: the step's start, each collective's readiness (the
    latest of its runtime call's start and the ends of the compute kernels launched before it), start and end,
    its compute kernels' time from the step's start to each readiness, and the step's last kernel's end."""
    events = json.loads(path.read_text())["traceEvents"]
    step = min(ns(e["ts"]) for e in events if e.get("name") == "ProfilerStep#1")
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("cat") == "cuda_runtime"}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    start = np.array([ns(e["ts"]) for e in gpu])
    end = start + np.array([ns(e["dur"]) for e in gpu])
    launched = np.array([launch[e["args"]["correlation"]] for e in gpu])
    nccl = np.array([e["name"].startswith("nccl") for e in gpu])
    compute = np.array([e["cat"] == "kernel" for e in gpu]) & ~nccl
    comm = np.flatnonzero(nccl)
    comm = comm[np.argsort(start[comm])]
    ready = np.array([max(launched[c], end[compute & (launched < launched[c])].max()) for c in comm])
    done = np.array([(np.minimum(end[compute], r) - np.maximum(start[compute], step)).clip(0).sum() for r in ready])
    return {"step": step, "ready": ready - step, "start": start[comm] - step, "end": end[comm] - step,
            "compute": done, "last": int(end.max()) - step}


def test_the_report_names_the_planted_slow_rank_and_the_step_without_it(planted):
    traces, profile = planted
    # GIVEN each rank's step as its raw trace gives it (one profiler step: the run is small)
    raw = [raw_step(traces / f"rank{r}.json") for r in range(RANKS)]
    ready = np.array([r["ready"] for r in raw])  # ranks x collectives
    inside = np.array([r["end"] - r["start"] for r in raw])
    # WHEN the report's GPU section is asked for as JSON
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["sections"]["gpu"]["stragglers"]
    # THEN it names rank 37 alone: the others are alike
    assert [(row["step"], row["rank"]) for row in rows] == [(1, SLOW)]
    row = rows[0]
    # AND at the collective where it is latest: its readiness past the median rank's
    median = np.median(ready, axis=0)
    late = ready[SLOW] - median
    worst = int(np.argmax(late))
    assert row["collective"] == worst and row["ranks"] == RANKS
    assert row["ready_ns"] == ready[SLOW, worst] and row["median_ready_ns"] == median[worst]
    assert row["late_ns"] == late[worst] > 0
    assert row["late_pct"] == pytest.approx(100 * late[worst] / median[worst])
    # AND its compute before it, 1.5 times the others' (the same kernels on a slower GPU)
    computed = np.array([r["compute"][worst] for r in raw])
    assert row["compute_ns"] == computed[SLOW] and row["median_compute_ns"] == np.median(computed)
    assert row["compute_over_pct"] == pytest.approx(100 * (computed[SLOW] / np.median(computed) - 1))
    assert row["compute_over_pct"] == pytest.approx(100 * (FACTOR - 1), abs=2)
    # AND the others wait for it: the median rank from ready to the collective's end, past the transfer
    transfer = inside.min(axis=0)
    ends = np.array([r["end"] for r in raw])
    assert row["median_wait_ns"] == np.median(ends[:, worst] - ready[:, worst] - transfer[worst])
    # AND the step without it: each collective ends its transfer after the latest readiness and the one before,
    # rank 37 ready at the median instead
    def last_end(at: np.ndarray) -> int:
        end = -10**18
        for c in range(at.shape[1]):
            end = max(at[:, c].max(), end) + transfer[c]
        return end

    moved = ready.copy()
    moved[SLOW] = np.minimum(moved[SLOW], median)
    saved = last_end(ready) - last_end(moved)
    step = max(r["last"] for r in raw)
    assert row["step_ns"] == step and row["saved_ns"] == saved > 0
    assert row["step_without_ns"] == step - saved
    # AND the model the re-timing rests on is the run's: its last collective's end as every rank saw it
    assert last_end(ready) == ends[:, -1].max()


def test_the_text_report_says_it_in_words(planted):
    _, profile = planted
    # WHEN the GPU section is printed
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu"])
    assert result.exit_code == 0, result.output
    text = result.output[result.output.index("Stragglers"):]
    # THEN the step's heading says what it would take without its late rank, and names rank 37 under it
    assert f"over {RANKS} ranks): without its late ranks" in text
    assert f"      rank {SLOW}: ready for AllReduce #" in text


def test_the_step_without_the_straggler_is_the_run_without_it(planted, tmp_path):
    # GIVEN the same 64 ranks with no slow rank, their collectives synchronised alike
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    make_gpu_trace.make(tmp_path / "t", total_mb=0.1, ranks=RANKS, layers=4, bucket=2, jobs=1, spread=0.0,
                        synchronised=True)
    assert CliRunner().invoke(main, ["import", str(tmp_path / "t"), "-o", str(tmp_path / "p.pop")]).exit_code == 0
    # WHEN the report's GPU section is asked for, of it and of the planted run
    alike = CliRunner().invoke(main, ["report", str(tmp_path / "p.pop"), "--section", "gpu", "--format", "json"])
    slow = CliRunner().invoke(main, ["report", str(planted[1]), "--section", "gpu", "--format", "json"])
    # THEN it names no rank
    assert json.loads(alike.output)["sections"]["gpu"]["stragglers"] == []
    # AND its step, as its raw traces give it, is the planted run's step without rank 37, but for rank 37's own
    # update after the last all-reduce: three 25 us kernels, each half as long again on its GPU
    step = max(raw_step(tmp_path / "t" / f"rank{r}.json")["last"] for r in range(RANKS))
    without = json.loads(slow.output)["sections"]["gpu"]["stragglers"][0]["step_without_ns"]
    assert without - step == 3 * 25_000 * (FACTOR - 1)


def test_a_report_of_64_ranks_gives_each_figures_spread_and_the_ranks_past_it(planted):
    _, profile = planted
    # GIVEN every rank's row of the GPU's time per rank, as JSON keeps them
    result = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu", "--format", "json"])
    rows = json.loads(result.output)["sections"]["gpu"]["by_rank"]
    assert len(rows) == RANKS
    compute = np.array([row["compute_ns"] for row in rows])
    # WHEN the text report is printed
    text = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu"]).output
    # THEN the table per rank is a row per figure: its spread over the 64 ranks and the ranks past its median,
    # rank 37 first in compute, by its share past the median
    block = text[text.index("GPU time per rank"):text.index("GPU time per stream")]
    assert f"({RANKS} ranks: each figure's spread" in block
    line = next(x for x in block.splitlines() if x.strip().startswith("compute_ns"))
    over = 100 * (compute[SLOW] / np.median(compute) - 1)
    assert f"{np.median(compute):,.0f}" in line and f"{compute.max():,}" in line
    assert line.rstrip().endswith(f"{SLOW} ({over:+.1f}%)")  # the others alike: no one else past the median
    assert len(block.splitlines()) < 20
    # AND the steps' verdicts are those of the ranks it names, not the first 40 ranks
    bounds = text[text.index("What bound each step"):text.index("The kernels worth a look")]
    assert f"ranks {SLOW}," in bounds.splitlines()[0] or f"ranks {SLOW} " in bounds.splitlines()[0]
    assert {int(x.split()[1]) for x in bounds.splitlines()[2:] if x.startswith("  rank ")} >= {SLOW}


def test_a_table_of_several_rows_a_rank_shows_those_of_the_ranks_that_stand_out(planted):
    _, profile = planted
    # WHEN the text report's GPU time per stream is printed (three streams a rank, 64 ranks)
    text = CliRunner().invoke(main, ["report", str(profile), "--section", "gpu"]).output
    block = text[text.index("GPU time per stream"):text.index("What bound each step")].splitlines()
    # THEN its title names the ranks the section's table per rank names past the median, rank 37 first
    title = block[0]
    named = [int(r) for r in title.split("the rows of ranks ")[1].split(", furthest")[0].split(", ")]
    assert named[0] == SLOW and "gpu.by_rank's figures" in title
    # AND its rows are those ranks' streams alone
    rows = [line.split() for line in block[4:] if line.strip()]
    assert {int(row[0]) for row in rows} == set(named) and len(rows) == 3 * len(named)
