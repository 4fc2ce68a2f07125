"""`popvision run` and `popvision report` print the same idle time and FLOP utilisation.

GIVEN a run printed by `popvision run` (with and without --profile), WHEN the same profile is
reported, THEN both show the figures a person computes from the raw trace and ops tables.
"""

from __future__ import annotations

import json
import re

import pytest

from popvision_py.format import open_profile
from tests.engine.helpers import run_cli


def _by_hand(path) -> tuple[float, float]:
    """Idle share of all IPU-cycles; FLOPs of every op pass x how often it ran over the peak of the run."""
    with open_profile(path) as p:
        t, ops, programs, target = p.read_pandas("trace"), p.read_pandas("ops"), p.read_pandas("programs"), p.target
    t["cycles"] = t["end_cycle"] - t["start_cycle"]
    idle = 100 * t.loc[t["phase"].astype(str) == "idle", "cycles"].sum() / t["cycles"].sum()
    runs = t[t["step"] >= 0].groupby(["ipu", "step"]).size().rename("executions").reset_index()
    steps = programs.merge(runs, on=["ipu", "step"])
    steps = steps[steps["op_id"] >= 0]
    steps["pass"] = steps["pass"].astype(str)
    ran = steps.groupby(["op_id", "pass"])["executions"].max()  # an op pass ran as often as its most-run step
    ops["pass"] = ops["pass"].astype(str)
    flops = sum(int(f) * int(ran.get((o, s), 0)) for o, s, f in zip(ops["op_id"], ops["pass"], ops["flops"]))
    total = t["end_cycle"].max() - t["start_cycle"].min()
    peak = total * target["num_ipus"] * target["tiles_per_ipu"] * target["flops_per_cycle_per_tile"]["fp16"]
    return idle, 100 * flops / peak


@pytest.mark.parametrize("args", [[], ["--strategy", "sharded"], ["--mode", "inference"]])
def test_run_prints_the_reports_idle_and_flop_utilisation(tmp_path, args):
    # GIVEN mnist run with --profile
    result = run_cli("run", "mnist", "--profile", "--profile-dir", str(tmp_path), "-q", *args)
    assert result.exit_code == 0, result.output
    path = tmp_path / "profile.pop"
    idle, util = _by_hand(path)
    # THEN the run's line shows the figures computed by hand from the trace (update FLOPs included)
    line = re.search(r"idle\s+([\d.]+)% of IPU time\s+FLOP utilisation ([\d.]+)%", result.output)
    assert line, result.output
    assert (line.group(1), line.group(2)) == (f"{idle:.1f}", f"{util:.1f}")
    # AND the report's JSON holds the same unrounded figures
    report = run_cli("report", str(path), "--section", "all", "--format", "json")
    doc = json.loads(report.output)
    assert doc["sections"]["exchange"]["figures"]["idle_pct"] == pytest.approx(idle)
    assert doc["sections"]["summary"]["figures"]["flop_utilisation_pct"] == pytest.approx(util)
    # AND so does the run's JSON, with or without --profile
    for extra in ([], ["--profile", "--profile-dir", str(tmp_path / "again")]):
        out = json.loads(run_cli("run", "mnist", "-q", "--json", *args, *extra).output)
        assert out["idle_pct"] == pytest.approx(idle) and out["flop_utilisation_pct"] == pytest.approx(util)
        assert (out["profile"] is None) == (not extra)
