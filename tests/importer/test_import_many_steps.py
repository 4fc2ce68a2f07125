"""A real trace with more program steps than an int16 holds runs through every command (issue 35, item 1).

Each op a rank runs is a program step of its own (importer/profile.py), so a long trace has tens of
thousands of steps per rank while the ``ipu`` column is int16: the trace fold's packed keys once
multiplied that int16 column by the program's width in int16 (``OverflowError: Python integer 40001
out of bounds for int16``). The trace here is written by hand in Kineto's layout: two ranks, one
profiler step, 40,000 ops each with a gap between them, so every figure below is counted on paper.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.cli import main

OPS = 40_000  # program steps per rank: beyond int16's 32,767
OP_US, GAP_US = 2, 1  # each op lasts 2 µs, then the rank idles 1 µs


def kineto_rank(rank: int) -> dict:
    cpu = {"pid": 1, "tid": 1}
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
               "dur": (OP_US + GAP_US) * OPS + 10, **cpu}]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1 + (OP_US + GAP_US) * i, "dur": OP_US, **cpu}
               for i in range(OPS)]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
            "baseTimeNanoseconds": 10**18, "traceEvents": events}


@pytest.fixture(scope="module")
def many_steps(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("many_steps")
    for rank in range(2):
        (folder / f"rank{rank}.json").write_text(json.dumps(kineto_rank(rank)))
    result = CliRunner().invoke(main, ["import", str(folder), "-o", str(folder / "out")])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


def test_the_profile_holds_more_steps_per_ipu_than_int16(many_steps: Path) -> None:
    with popvision_py.open(many_steps) as report:
        programs = report.profile.read_pandas("programs")
    assert programs.groupby("ipu")["step"].max().min() >= OPS - 1 > 2**15


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_report_all_counts_every_op(many_steps: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"report.{fmt}"
    result = CliRunner().invoke(main, ["report", str(many_steps), "--section", "all", "--format", fmt, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and out.stat().st_size > 1000
    with popvision_py.open(many_steps) as report:
        agg = report.trace_summary()
    # every op ran once on each IPU, and the IPU's rows (ops and the idle gaps) tile the profiler step:
    # (2 + 1) µs x 40,000 + 10 µs, at 1 cycle a nanosecond
    assert agg.executions.shape == (2, OPS) and (agg.executions == 1).all()
    assert np.asarray(agg.cube).sum(axis=(1, 2, 3)).tolist() == [((OP_US + GAP_US) * OPS + 10) * 1000] * 2


def test_sql_export_and_the_dashboard_warm_up_read_it(many_steps: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sql", str(many_steps),
                                       "SELECT ipu, max(step) AS last FROM trace GROUP BY ipu ORDER BY ipu",
                                       "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = result.output.split()
    assert rows[0] == "ipu,last" and [int(r.split(",")[1]) for r in rows[1:]][0] >= OPS - 1
    exported = tmp_path / "trace.json"
    result = CliRunner().invoke(main, ["export-trace", str(many_steps), "-q", "-o", str(exported)])
    assert result.exit_code == 0, result.output
    assert sum(e.get("ph") == "X" for e in json.loads(exported.read_text())["traceEvents"]) >= 2 * OPS

    from dashboards import data
    from dashboards.app import create_app

    create_app([str(many_steps)])
    data.current().warm()  # every page's first answer, the timeline index and the Gantt bars
