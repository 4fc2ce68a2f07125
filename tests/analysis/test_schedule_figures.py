"""Stage and exchange figures of the schedule a run actually used, recomputed from the raw tables.

GIVEN profiles the real emulator writes (pipelined, phased over distinct IPUs, phased round-robin
over shared IPUs), WHEN the analysis reads them, THEN its figures equal what a person computes from
the trace with pandas and the schedule's definition.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.format import open_profile
from tests.engine.helpers import profile_path


def _profile(folder, name, *args):
    # a data loader that keeps up: these figures are the IPUs' schedule's (mnist's default is host-bound)
    return profile_path(folder, "mnist", "--input", "synthetic", *args, name=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schedules")
    return {
        "pipelined": _profile(folder, "pipelined"),
        "phased": _profile(folder, "phased", "--strategy", "phased"),
        # four stages round-robin over two IPUs: phased execution runs them one after another
        "round_robin": _profile(folder, "rr", "--strategy", "phased", "--stages", "B1@0 B2@1 B3@0 B4@1"),
        "inference": _profile(folder, "inference", "--mode", "inference"),
    }


def _trace(path) -> pd.DataFrame:
    with open_profile(path) as p:
        t = p.read_pandas("trace")
    t["cycles"] = t["end_cycle"] - t["start_cycle"]
    for c in ("phase", "pass"):
        t[c] = t[c].astype(str)
    return t


def _balanced_pipeline_bubble(stages: int, micro_batches: int, training: bool) -> float:
    """Idle share of a pipeline of equal stages, by walking its supersteps: cycle t runs stage s's forward
    of micro-batch t - s and (training) its backward of micro-batch t - (2S - 2 - s); a cycle lasts as
    long as its busiest stage (forward 1 unit, backward 2)."""
    length = busy = 0
    for t in range(micro_batches + (2 * stages - 2 if training else stages - 1)):
        work = []
        for s in range(stages):
            w = 1 if 0 <= t - s < micro_batches else 0
            if training and 0 <= t - (2 * stages - 2 - s) < micro_batches:
                w += 2
            work.append(w)
        length += max(work)
        busy += sum(work)
    return 100.0 * (1 - busy / (stages * length))


def test_phased_over_distinct_ipus_is_analysed_as_the_pipeline_it_ran(runs):
    # GIVEN the same model pipelined and phased over four IPUs (the engine runs both on the pipelined schedule)
    with pv.open(runs["phased"]) as phased, pv.open(runs["pipelined"]) as pipelined:
        f, g = phased.stages.figures(), pipelined.stages.figures()
        # THEN the ideal bubble of the phased run is the pipeline's, not the 75 % of four stages one after another
        assert f.ideal_bubble_pct == pytest.approx(g.ideal_bubble_pct, rel=0.05)
        assert f.ideal_bubble_pct < 60.0
        # AND balancing the stages gains time, as in a pipeline (one after another it would gain nothing)
        assert f.balance_gain_pct > 0 and f.balanced_step_cycles < f.step_cycles
        topics = set(phased.summary.insights()["topic"])
        assert "stages" in topics  # an imbalance or bubble finding, as the pipelined run gets


def test_ideal_bubble_of_equal_stages_matches_a_walk_of_the_schedule(runs):
    # GIVEN a run whose stages' forward and backward were made equal (the analysis' balanced model)
    with pv.open(runs["pipelined"]) as r:
        c = r.stages._costs()
        n, m = len(c.stages), c.unit_micro_batches
        # THEN with backward = 2 x forward, the walk above gives the same idle share as the analysis' model
        from popvision_py.analysis.pipeline import stages as S

        model = S.pipeline_cycles(np.ones(n), 2 * np.ones(n), m, True, True)
        assert 100 * (1 - m * 3 / model) == pytest.approx(_balanced_pipeline_bubble(n, m, True))


def test_round_robin_phased_ideal_bubble_is_what_ran(runs):
    # GIVEN four stages run one after another on two IPUs
    with pv.open(runs["round_robin"]) as r:
        f = r.stages.figures()
        # THEN one IPU works while the other idles: the bubble is the trace's idle rows over 2 IPUs' time
        t = _trace(runs["round_robin"])
        total = t["end_cycle"].max() - t["start_cycle"].min()
        assert f.num_stages == 4
        assert f.bubble_pct == pytest.approx(100 * t.loc[t["phase"] == "idle", "cycles"].sum() / (2 * total))
        # AND one after another, the balance of the stages does not change the step time: the ideal is what ran
        assert f.balanced_step_cycles == f.step_cycles and f.balance_gain_pct == 0.0
        assert f.ideal_bubble_pct == pytest.approx(f.bubble_pct)
        # AND each IPU is busy at least half of the stages' time: the idle share stays within 50 %, not 1 - 1/4 = 75 %
        assert f.ideal_bubble_pct <= 50.0


def test_stage_all_row_idle_counts_each_sync_once(runs):
    # GIVEN the pipelined mnist run
    path = runs["pipelined"]
    t = _trace(path)
    with pv.open(path) as r:
        s = r.stages.summary()
    rows = s[s["pass"] == "all"].set_index("stage")
    for stage, row in rows.iterrows():
        ipu = int(row["ipu"])
        on = t[t["ipu"] == ipu]
        # THEN idle = the IPU's idle rows + its syncs outside any stage (a stage's own syncs are busy time)
        expected_idle = on.loc[on["phase"] == "idle", "cycles"].sum() + on.loc[
            (on["phase"] == "sync") & (on["stage"] < 0), "cycles"].sum()
        assert row["idle_cycles"] == expected_idle
        # AND busy = every non-idle row of the stage, its own syncs included
        assert row["busy_cycles"] == on.loc[(on["stage"] == stage) & (on["phase"] != "idle"), "cycles"].sum()


def test_exchange_time_shares_are_the_exposed_shares_of_the_time_line(runs):
    # GIVEN a phased run whose weight loads partly overlap compute, and a pipelined one
    for name in ("phased", "pipelined", "round_robin"):
        path = runs[name]
        t = _trace(path)
        with open_profile(path) as p:
            x, programs = p.read_pandas("exchanges"), p.read_pandas("programs")
        with pv.open(path) as r:
            k = r.exchange.by_kind().set_index("kind")
        total = t["cycles"].sum()
        exposed = t.loc[t["phase"].isin(["exchange", "stream"]), "cycles"].sum()
        # THEN the kinds' time shares add up to the time line's exchange and stream share
        assert k["time_pct"].sum() == pytest.approx(100 * exposed / total)
        # AND each kind's hidden cycles are its transfer cycles beyond its steps' time in the trace
        runs_of = t[t["step"] >= 0].groupby(["ipu", "step"]).size().rename("executions").reset_index()
        j = x.merge(runs_of, on=["ipu", "step"]).merge(programs[["ipu", "step", "cycles"]], on=["ipu", "step"],
                                                       suffixes=("", "_step"))
        j["hidden"] = (j["cycles"] - np.minimum(j["cycles"], j["cycles_step"])) * j["executions"]
        hidden = j.groupby(j["kind"].astype(str))["hidden"].sum()
        for kind in k.index:
            assert k.loc[kind, "hidden_cycles"] == hidden.get(kind, 0)
            assert k.loc[kind, "exposed_cycles"] + k.loc[kind, "hidden_cycles"] == k.loc[kind, "cycles"]
