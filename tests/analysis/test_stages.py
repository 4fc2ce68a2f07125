"""Stage figures against values computed by hand from the synthetic schedules (tests/synthetic.py)."""

from __future__ import annotations

import numpy as np
import pytest

import popvision_py as pv
from popvision_py.analysis.pipeline.stages import SUMMARY_COLUMNS, pipeline_cycles
from tests import synthetic


def test_balanced_pipeline_time_per_stage_and_pass(balanced):
    # GIVEN two stages of 100 forward / 200 backward cycles, 4 micro-batches, a 10-cycle update
    # WHEN the stages are summarised
    s = balanced.stages.summary()
    # THEN each pass's cycles per micro-batch are the compute set's cycles
    assert list(s.columns) == SUMMARY_COLUMNS
    row = s.set_index(["stage", "pass"])
    assert row.loc[(0, "forward"), "cycles_per_micro_batch"] == 100
    assert row.loc[(0, "backward"), "cycles_per_micro_batch"] == 200
    assert row.loc[(0, "update"), "busy_cycles"] == 10
    assert row.loc[(1, "all"), "busy_cycles"] == 4 * 300 + 10
    # the update runs once per step: labelled per step, its 10 cycles not spread over the 4 micro-batches
    assert row.loc[(0, "update"), "per"] == "step"
    assert row.loc[(0, "update"), "cycles_per_micro_batch"] == 10
    assert row.loc[(0, "forward"), "per"] == "micro_batch"
    assert row.loc[(1, "all"), "cycles_per_micro_batch"] == 300
    # pipeline cycles last 100, 300, 300, 300, 300, 200: IPU 0 idles 200 + 100, IPU 1 100 + 200
    assert row.loc[(0, "all"), "idle_cycles"] == 300
    assert row.loc[(1, "all"), "idle_cycles"] == 300
    assert row.loc[(0, "all"), "total_cycles"] == 1510
    assert row.loc[(0, "all"), "utilisation_pct"] == pytest.approx(100 * 1210 / 1510)
    assert row.loc[(0, "forward"), "blocks"] == "B1"


def test_balanced_pipeline_figures(balanced):
    f = balanced.stages.figures()
    assert f.num_stages == 2 and f.micro_batches == 4
    assert f.step_cycles == 1510  # 100 + 4 x 300 + 200 + update 10
    assert f.imbalance == pytest.approx(1.0)
    assert f.bubble_pct == pytest.approx(100 * 600 / (2 * 1510))
    # already balanced: re-timed, the run is itself, so the ideal idle is the measured 600 of 2 x 1,510
    assert f.ideal_bubble_pct == pytest.approx(100 * 600 / (2 * 1510))
    assert f.balanced_step_cycles == pytest.approx(1510)
    assert f.balance_gain_pct == pytest.approx(0.0)
    assert balanced.stages.best_split().gain_pct == 0


def test_unbalanced_pipeline_bottleneck_and_balance(unbalanced):
    # GIVEN blocks of 10/10/10/30 forward (backward 2x) split B1 | B2,B3,B4 and no update
    f = unbalanced.stages.figures()
    # THEN stage 1 takes 50 + 100 = 150 cycles per micro-batch against stage 0's 30
    assert f.bottleneck_stage == 1
    assert f.imbalance == pytest.approx(150 / 90)
    # pipeline cycles: 10, 150, 150, 150, 150, 20 = 630; balanced (30/60 each): 30, 90 x 4, 60 = 450
    assert f.step_cycles == 630
    assert f.balanced_step_cycles == pytest.approx(450)
    assert f.balance_gain_pct == pytest.approx(100 * 180 / 630)
    assert f.bubble_pct == pytest.approx(100 * (510 + 30) / (2 * 630))


def test_unbalanced_pipeline_best_split(unbalanced):
    split = unbalanced.stages.best_split()
    stages = split.stages
    assert list(stages["blocks"]) == ["B1,B2,B3", "B4"]
    assert list(stages["cycles_per_micro_batch"]) == [90, 90]
    # memory: IPU 0 keeps 1,000 - 400 (B1) = 600 and gains 1,200; IPU 1 keeps 2,200 - 1,200 and gains 400
    assert list(stages["memory_bytes"]) == [1800, 1400]
    assert stages["fits"].all()
    assert split.current_step_cycles == 630
    assert split.predicted_step_cycles == pytest.approx(450)
    assert split.gain_pct == pytest.approx(100 * 180 / 630)


def test_best_split_respects_memory(tmp_path):
    # GIVEN the unbalanced split, but B1's 2,000 activation bytes stay on IPU 0 (capacity 4 x 1,000)
    path = synthetic.write_pipeline_profile(tmp_path / "p.pop", [10, 10, 10, 30], stages=[1, 3], update_cycles=0,
                                            weight_bytes=[400, 400, 2000, 400], activation_bytes=[2000, 200, 200, 200])
    split = pv.open(path).stages.best_split()
    # THEN B1,B2,B3 on IPU 0 would need 2,400 + 2,800 = 5,200 bytes: the best that fits is B1,B2 | B3,B4
    assert list(split.stages["blocks"]) == ["B1,B2", "B3,B4"]
    assert list(split.stages["memory_bytes"]) == [3200, 3400]
    # model: 20, 120, 120, 120, 120, 40 = 540 cycles
    assert split.predicted_step_cycles == pytest.approx(540)


def test_sharded_stages_run_one_at_a_time(profiles):
    r = pv.open(profiles["sharded"])
    f = r.stages.figures()
    # per micro-batch 10 + 20 + 40 + 20 cycles plus 4 syncs of 5; 3 micro-batches, then update 10 + sync 5
    assert f.step_cycles == 3 * (90 + 20) + 15
    # each segment's superstep keeps the other IPU idle: 3 x 90 idle cycles per IPU pair over 2 x 345
    assert f.bubble_pct == pytest.approx(100 * 270 / (2 * 345))
    # one stage at a time, moving work between the stages changes nothing: the ideal is what ran
    assert f.ideal_bubble_pct == pytest.approx(f.bubble_pct)
    assert f.balanced_step_cycles == f.step_cycles
    assert f.balance_gain_pct == 0.0
    assert "stages" not in set(r.summary.insights()["topic"])


def test_inference_pipeline(profiles):
    r = pv.open(profiles["inference"])
    f = r.stages.figures()
    # 3 micro-batches (device iterations) through 10- and 20-cycle stages: 10 + 20 + 20 + 20 = 70 cycles
    assert r.summary.figures().total_cycles == 70
    assert f.micro_batches == 3 and f.step_cycles == pytest.approx(70 / 3)
    assert f.ideal_bubble_pct == pytest.approx(25.0)  # balanced 15/15: 4 cycles of 15, 2 x 3 x 15 busy


def test_pipeline_model_by_hand():
    assert pipeline_cycles(np.array([100, 100]), np.array([200, 200]), 4, True, True) == 1500
    assert pipeline_cycles(np.array([10, 20]), np.array([0, 0]), 3, True, False) == 70
    assert pipeline_cycles(np.array([10, 20]), np.array([20, 40]), 3, False, True) == 270


def test_gantt_bars(balanced):
    g = balanced.stages.gantt()
    assert list(g.columns) == ["ipu", "stage", "pass", "iteration", "micro_batch", "start_cycle", "end_cycle"]
    assert len(g) == 2 * 2 * 4  # stages x passes x micro-batches
    first = g.iloc[0]
    assert (first["ipu"], first["pass"], first["micro_batch"], first["start_cycle"], first["end_cycle"]) == (
        0, "forward", 0, 0, 100)
