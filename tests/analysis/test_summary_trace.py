"""Summary figures and the trace analyzer on the balanced profile, by hand."""

from __future__ import annotations


import numpy as np
import pytest

from popvision_py.analysis.common.tables import PHASES, TraceArrays
from popvision_py.analysis.trace.timeline import STEPS_COLUMNS, TIMELINE_COLUMNS, TimelineIndex, timeline


def test_summary_figures(balanced):
    s = balanced.summary.figures()
    assert (s.model, s.strategy, s.mode, s.num_ipus) == ("synthetic", "pipelined", "training", 2)
    assert s.total_cycles == 1510 and s.iterations == 1 and s.step_cycles == 1510
    assert s.step_s == pytest.approx(1510e-9)
    assert s.samples_per_step == 2 * 4 * 1
    assert s.throughput_samples_per_s == pytest.approx(8 / 1510e-9)
    # per block: forward 100 x 4 tiles x 64 FLOP x 4 micro-batches + backward 200 x ... x 4 + update 10 x 4 x 64
    flops = 2 * (100 * 4 * 64 * 4 + 200 * 4 * 64 * 4 + 10 * 4 * 64)
    assert s.total_flops == flops
    assert s.flop_utilisation_pct == pytest.approx(100 * flops / (1510 * 2 * 4 * 128))
    assert s.fits and s.oom_tiles == 0 and s.worst_tile_bytes == 250


def test_no_problems_found(balanced):
    i = balanced.summary.insights()
    assert list(i["severity"]) == ["info"]


def test_trace_extent_steps_tile_cycles(balanced):
    assert balanced.trace.extent() == (0, 1510)
    s = balanced.trace.steps(0)
    assert list(s.columns) == STEPS_COLUMNS
    assert list(s["executions"]) == [4, 4, 1]
    assert list(balanced.trace.tile_cycles(0, 0)["cycles"]) == [100, 75, 50, 25]


def test_timeline_events_when_few_rows(balanced):
    t = balanced.trace.timeline()
    assert t.level == "events" and list(t.frame.columns) == TIMELINE_COLUMNS
    assert len(t.frame) == 22 and (t.frame["events"] == 1).all()
    assert t.frame.groupby("ipu")["cycles"].sum().tolist() == [1510, 1510]
    w = balanced.trace.timeline(450, 650, ipus=[0])
    assert list(zip(w.frame["start_cycle"], w.frame["end_cycle"])) == [(400, 500), (500, 700)]


def test_timeline_bins_by_hand(balanced):
    # IPU 0: compute 0-200, idle 200-400, compute 400-1200, idle 1200-1300, compute 1300-1510
    t = balanced.trace.timeline(max_bins=5, ipus=[0])
    assert t.level == "bins"
    f = t.frame
    first = f[f["start_cycle"] == 0].set_index("phase")
    assert first.loc["compute", "cycles"] == 200 and first.loc["compute", "events"] == 2
    assert first.loc["idle", "cycles"] == 102 and first.loc["idle", "events"] == 1
    assert f.groupby("start_cycle")["cycles"].sum().tolist() == [302] * 5


def _random_trace(n_rows: int, ipus: int, seed: int = 0) -> TraceArrays:
    rng = np.random.default_rng(seed)
    per = n_rows // ipus
    dur = rng.integers(1, 50, size=(ipus, per))
    end = np.cumsum(dur, axis=1)
    start = end - dur
    z = np.zeros(ipus * per, np.int32)
    return TraceArrays(run=z, iteration=z, micro_batch=z, ipu=np.repeat(np.arange(ipus), per).astype(np.int16),
                       stage=z.astype(np.int16), pass_=np.zeros(ipus * per, np.int8), step=z,
                       phase=rng.integers(0, len(PHASES), ipus * per).astype(np.int8),
                       start=start.ravel().astype(np.int64), end=end.ravel().astype(np.int64))


def test_timeline_bins_match_brute_force():
    # GIVEN 2 million rows on 4 IPUs
    trace = _random_trace(2_000_000, 4)
    index = TimelineIndex(trace)
    lo, hi = 123_456, 9_876_543
    # WHEN a window is binned (its speed is measured by benchmarks/bench_report.py --dashboard, not here)
    t = timeline(index, lo, hi, max_bins=1000)
    # THEN each (IPU, phase) total equals the rows' overlap with the window computed directly
    got = t.frame.groupby(["ipu", "phase"], observed=True)["cycles"].sum()
    overlap = np.clip(np.minimum(trace.end, hi) - np.maximum(trace.start, lo), 0, None)
    for (ipu, phase), cycles in got.items():
        mask = (trace.ipu == ipu) & (trace.phase == PHASES.index(phase))
        assert cycles == overlap[mask].sum()
    # and no (IPU, phase) with cycles in the window is left out: the totals agree too
    assert got.sum() == overlap.sum() > 0
    assert t.frame.groupby(["ipu", "start_cycle"])["cycles"].sum().eq(
        t.frame.groupby(["ipu", "start_cycle"])["end_cycle"].first()
        - t.frame.groupby(["ipu", "start_cycle"])["start_cycle"].first()).all()
