"""The critical path of an emulated (bulk-synchronous) run, through its supersteps (issue 32, item 2),
on a two-stage pipeline timed on paper (tests/synthetic.py's schedule).

Stage 0 runs 100 forward / 200 backward cycles a micro-batch, stage 1 300 / 600; 4 micro-batches, an
update of 10 cycles, no syncs. The synthetic schedule's 6 pipeline cycles last, by their busiest IPU:
100 (IPU 0's first forward), 4 x 900 (IPU 1's forward and backward), 200 (IPU 0's last backward), then
the update's 10: a 3,910-cycle run, all of it on the path, none waiting. IPU 1 made as light as the mean
IPU (forwards 800 / 2 IPUs / 4 = 200 a micro-batch, backwards 400) makes each of its cycles 600: 2,710
cycles, 1,200 saved.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.cli import main
from tests.synthetic import write_pipeline_profile


@pytest.fixture(scope="module")
def heavy_second_stage(tmp_path_factory):
    path = tmp_path_factory.mktemp("bsp") / "profile.pop"
    return write_pipeline_profile(path, [100, 300], [200, 600], micro_batches=4, update_cycles=10)


def test_the_path_runs_through_each_superstep_s_busiest_ipu(heavy_second_stage) -> None:
    with popvision_py.open(heavy_second_stage) as report:
        view = report.critical_path
        assert view.emulated
        figures = view.figures()
        by_ipu = view.by_ipu().set_index("ipu")
    assert figures["path_ms"] == pytest.approx(3910 / 1e9 * 1e3)  # 1 GHz: a cycle is a nanosecond
    assert figures["compute_pct"] == pytest.approx(100 * 3900 / 3910)
    assert figures["other_work_pct"] == pytest.approx(100 * 10 / 3910)
    assert figures["waiting_pct"] == 0
    assert by_ipu.loc[1, "supersteps_led"] == 4 and by_ipu.loc[1, "micro_batch_cycles"] == 3600
    assert by_ipu.loc[0, "micro_batch_cycles"] == 300 and by_ipu.loc[0, "other_work_cycles"] == 10
    assert by_ipu["path_share_pct"].sum() == pytest.approx(100.0)


def test_the_heavy_ipu_is_the_culprit_and_what_it_would_save(heavy_second_stage) -> None:
    with popvision_py.open(heavy_second_stage) as report:
        figures = report.critical_path.figures()
        culprits = report.critical_path.culprits()
    assert figures["culprit"] == "IPU 1"
    top = culprits.iloc[0]
    assert top["ipu"] == 1 and top["step_cycles"] == 3910 and top["saves_cycles"] == pytest.approx(1200)
    assert figures["culprit_saves_pct"] == pytest.approx(100 * 1200 / 3910)
    assert np.all(culprits.iloc[1:]["saves_cycles"] == 0)  # IPU 0 is lighter than the mean already


def test_report_critical_path_of_an_emulated_run_as_json(heavy_second_stage, tmp_path) -> None:
    out = tmp_path / "cp.json"
    result = CliRunner().invoke(main, ["report", str(heavy_second_stage), "--section", "critical-path",
                                       "--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert '"culprit": "IPU 1"' in text and "critical-path" in json.loads(text)["sections"]
