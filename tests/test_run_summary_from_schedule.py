"""`popvision run` takes its idle share and FLOP utilisation from the schedule, not from its profile.

GIVEN runs of several shapes (pipelined training, pipelined inference with its fill, steady state
and flush, sharded over several host calls, phased, host-bound), WHEN the run prints its summary
(without reading the trace it wrote), THEN its figures are exactly those the analysis of the written
profile gives (`popvision report`'s summary), and the trace sums the run folded from one repeat of
each part (``scheduler.templates``, ``scheduler.span``) are the written trace's own.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.compiler import compile_plan
from engine.runner import RunRequest, prepare
from engine.scheduler import schedule, span, templates
from popvision_py.format import open_profile
from popvision_py.run_figures import summary_figures
from popvision_py.scripts import load_script
from tests.engine.helpers import run_cli

SHAPES = {
    "pipelined training": ["--device-iterations", "3"],
    "pipelined inference": ["--mode", "inference", "--device-iterations", "12"],
    "sharded, three host calls": ["--strategy", "sharded", "--runs", "3", "--device-iterations", "2"],
    "phased": ["--strategy", "phased", "--device-iterations", "2"],
    "host-bound": ["--input", "image", "--loader-workers", "1", "--runs", "2"],
}


@pytest.mark.parametrize("args", SHAPES.values(), ids=SHAPES.keys())
def test_the_runs_figures_are_the_reports_exactly(tmp_path, args):
    # GIVEN a run with --profile, its summary as JSON
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path), "-q", "--json", "--no-ranges", *args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    # THEN its figures are those the analysis of its profile computes, to the last bit
    read_back = summary_figures(tmp_path / "profile.pop")
    assert printed["idle_pct"] == read_back["idle_pct"]
    assert printed["flop_utilisation_pct"] == read_back["flop_utilisation_pct"]


@pytest.mark.parametrize("args", [SHAPES["pipelined inference"], SHAPES["sharded, three host calls"]],
                         ids=["pipelined inference", "sharded, three host calls"])
def test_the_schedules_sums_are_the_written_traces(tmp_path, args):
    # GIVEN a run's profile
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path), "-q", "--no-ranges", *args)
    assert result.exit_code == 0, result.output
    with open_profile(tmp_path / "profile.pop") as profile:
        trace = profile.read_pandas("trace")
    # AND the same run's schedule
    options = dict(zip(args[::2], args[1::2]))
    request = RunRequest(model="mnist", options={k.lstrip("-").replace("-", "_"): (v if not v.isdigit() else int(v))
                                                 for k, v in options.items() if k != "--strategy"},
                         strategy=options.get("--strategy"), ranges=False)
    compiled = compile_plan(prepare(request, load_script))
    sched = schedule(compiled)
    # WHEN the trace's sums are taken from one repeat of each part, weighted by its count
    rows = sum(len(r["step"]) * n for r, n in templates(sched))
    cycles = sum(int((r["end_cycle"] - r["start_cycle"]).sum()) * n for r, n in templates(sched))
    executions: dict[tuple[int, int], int] = {}
    for r, n in templates(sched):
        keys, counts = np.unique(np.c_[r["ipu"], r["step"]], axis=0, return_counts=True)
        for (ipu, step), count in zip(keys, counts):
            executions[(int(ipu), int(step))] = executions.get((int(ipu), int(step)), 0) + int(count) * n
    # THEN they are the written trace's, counted row by row
    assert rows == len(trace)
    assert cycles == int((trace["end_cycle"] - trace["start_cycle"]).sum())
    assert span(sched) == (int(trace["start_cycle"].min()), int(trace["end_cycle"].max()))
    counted = trace.groupby(["ipu", "step"]).size()
    assert executions == {(int(i), int(s)): int(c) for (i, s), c in counted.items()}
