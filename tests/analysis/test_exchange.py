"""Exchange figures on the exchange-heavy profile (tests/synthetic.exchange_heavy_pipeline), by hand.

Per micro-batch: IPU 0 streams 1,000 bytes from the host (50 cycles) and sends 8,000 bytes to IPU 1
(500 cycles) after its forward; IPU 1 sends 8,000 bytes back after its backward. At the update both
load 4,000 bytes of optimiser state from streaming memory (200 cycles). 7 syncs of 20 cycles.
Step: 650 + 800 + 850 + 850 + 800 + 200 + 6 x 20 + (210 + 20) = 4,500 cycles; 9,000 IPU-cycles.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import popvision_py as pv
from popvision_py.analysis.common.tables import Columns
from popvision_py.analysis.ipu.exchange import (BANDWIDTH_COLUMNS, BY_KIND_COLUMNS, COSTLIEST_COLUMNS, MATRIX_COLUMNS,
                                                Executed, matrix)
from tests import synthetic

MNIST = Path(__file__).resolve().parents[2] / "sample_profiles" / "mnist_pipelined" / "profile.pop"


def test_figures(exchange_heavy):
    f = exchange_heavy.exchange.figures()
    assert f.total_cycles == 9000
    assert (f.compute_cycles, f.exchange_cycles, f.sync_cycles, f.stream_cycles, f.idle_cycles) == (
        2420, 4000, 280, 600, 1700)
    assert f.exchange_pct == pytest.approx(100 * 4000 / 9000)
    assert exchange_heavy.summary.figures().step_cycles == 4500


def test_by_kind(exchange_heavy):
    k = exchange_heavy.exchange.by_kind().set_index("kind")
    assert list(exchange_heavy.exchange.by_kind().columns) == BY_KIND_COLUMNS
    assert list(k.index) == ["internal", "inter_ipu", "host", "remote_buffer", "all_reduce"]
    assert tuple(k.loc["inter_ipu", ["executions", "bytes", "cycles"]]) == (8, 64000, 4000)
    assert tuple(k.loc["host", ["executions", "bytes", "cycles"]]) == (4, 4000, 200)
    assert tuple(k.loc["remote_buffer", ["executions", "bytes", "cycles"]]) == (2, 8000, 400)
    assert k.loc["inter_ipu", "time_pct"] == pytest.approx(100 * 4000 / 9000)
    assert k.loc["all_reduce", "executions"] == 0


def test_matrix(exchange_heavy):
    m = exchange_heavy.exchange.matrix()
    assert list(m.columns) == MATRIX_COLUMNS
    got = {(r.src_ipu, r.dst_ipu): (r.bytes, r.cycles) for r in m.itertuples()}
    assert got == {(-2, 0): (4000, 200), (-2, 1): (4000, 200), (-1, 0): (4000, 200), (0, 1): (32000, 2000),
                   (1, 0): (32000, 2000)}


def test_bandwidth(exchange_heavy):
    b = exchange_heavy.exchange.bandwidth().set_index("kind")
    assert list(exchange_heavy.exchange.bandwidth().columns) == BANDWIDTH_COLUMNS
    # 64,000 bytes in 4,000 cycles at 1 GHz = 16 GB/s of 100 GB/s
    assert b.loc["inter_ipu", "achieved_bytes_per_s"] == pytest.approx(16e9)
    assert b.loc["inter_ipu", "efficiency_pct"] == pytest.approx(16.0)
    assert b.loc["host", "efficiency_pct"] == pytest.approx(50.0)  # 20 GB/s of 40
    assert b.loc["remote_buffer", "efficiency_pct"] == pytest.approx(100.0)
    assert b.loc["internal", "peak_bytes_per_s"] == pytest.approx(4 * 4 * 1e9)
    assert math.isnan(b.loc["internal", "achieved_bytes_per_s"])


def test_costliest(exchange_heavy):
    c = exchange_heavy.exchange.costliest(2)
    assert list(c.columns) == COSTLIEST_COLUMNS
    assert list(c["name"]) == ["S0/fwd/exchange", "S1/bwd/exchange"]
    assert list(c["total_cycles"]) == [2000, 2000] and list(c["executions"]) == [4, 4]


def test_exchange_bound_insight(exchange_heavy):
    i = exchange_heavy.summary.insights()
    row = i[i["topic"] == "exchange"].iloc[0]
    # (4,000 + 280 + 600) / (9,000 - 1,700) busy IPU-cycles; inter-IPU 4,000 / 7,300
    assert "66.8% of busy time" in row["finding"] and "inter_ipu dominates with 54.8%" in row["finding"]
    # AND the costliest step's cycles say what they sum: 4 executions of 500 cycles in the trace's one step
    assert exchange_heavy.summary.figures().iterations == 1
    assert "the costliest step is S0/fwd/exchange on IPU 0 (2,000 cycles in 4 executions)" in row["finding"]
    # the fix: one stage fewer, so no micro-batch crosses an IPU-Link; the memory fits on one IPU
    assert row["suggestion"].startswith("Use 1 stage(s) instead of 2")
    blocks = ",".join(exchange_heavy.stages.blocks()["block"])
    assert f"--stages {blocks}@0 " in row["command"] and "fits" in row["effect"]


def test_missing_optional_target_keys_degrade_to_nan(tmp_path):
    # GIVEN a target without bandwidths or FLOP peaks
    path = synthetic.write_pipeline_profile(
        tmp_path / "bare.pop", [100, 100], exchange_bytes=100, exchange_cycles=10,
        target={k: None for k in ("ipu_link_bytes_per_s", "host_link_bytes_per_s", "streaming_memory_bytes_per_s",
                                  "exchange_bytes_per_cycle_per_tile", "flops_per_cycle_per_tile", "sync_cycles")},
        run={"runs": None, "precision": None, "recompute": None, "tensor_locations": None})
    r = pv.open(path)
    # THEN efficiency and FLOP utilisation are NaN, nothing raises
    b = r.exchange.bandwidth().set_index("kind")
    assert b.loc["inter_ipu", "achieved_bytes_per_s"] == pytest.approx(100 / 10e-9)
    assert math.isnan(b.loc["inter_ipu", "efficiency_pct"])
    assert math.isnan(r.summary.figures().flop_utilisation_pct)
    assert len(r.summary.insights())


def test_a_host_call_spanning_many_steps_is_given_a_step_at_a_time():
    # GIVEN the mnist sample: one host call of 10 steps, its host transfer the costliest exchange step
    with pv.open(MNIST) as r:
        steps = r.summary.figures().iterations
        step_cycles = r.summary.figures().step_cycles
        top = r.exchange.costliest(1).iloc[0]
        finding = r.summary.insights().set_index("topic").loc["exchange", "finding"]
    assert (steps, top["name"], top["executions"]) == (10, "host/call", 1)
    # THEN the finding says its cycles are one execution over the 10 steps, and gives a step's share, which
    # is less than the step it is part of (the whole, 19,950,000 cycles, alone would seem to contradict it)
    per_step = top["total_cycles"] / steps
    assert (f"host/call on IPU 0 ({top['total_cycles']:,} cycles in 1 execution over the trace's 10 steps, "
            f"about {per_step:,.0f} cycles a step)") in finding
    assert per_step < step_cycles < top["total_cycles"]


def test_matrix_of_many_ranks_holds_the_pairs_that_occur():
    # GIVEN transfers between ranks 0 and 4,095 (a grid of 4,098 x 4,098 endpoints), the host's and a ring's pair
    # twice, and one of no bytes and no cycles
    src, dst = [4095, 0, 0, -1, 7, 3], [0, 1, 1, 4095, 8, 4]
    nbytes, cycles = [10, 20, 5, 7, 0, 1], [1, 2, 3, 4, 0, 0]
    kind = pa.array(["inter_ipu"] * 6).dictionary_encode()
    done = Executed(Columns(pa.table({"ipu": [0] * 6, "step": range(6), "src_ipu": src, "dst_ipu": dst, "kind": kind,
                                      "bytes": nbytes, "cycles": cycles})), np.ones(6, np.int64),
                    np.array(nbytes, np.int64), np.array(cycles, np.int64), np.zeros(6, np.int64))
    # WHEN its matrix is made
    m = matrix(done)
    # THEN it holds each pair that moved something, summed, sorted by source then destination
    rows = list(zip(*(np.asarray(m[c]).tolist() for c in MATRIX_COLUMNS)))
    assert rows == [(-1, 4095, 7, 4), (0, 1, 25, 5), (3, 4, 1, 0), (4095, 0, 10, 1)]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 12, 20])
def test_the_costliest_steps_are_the_first_n_of_every_row_sorted_by_cost_then_ipu_then_step(n):
    from popvision_py.analysis.common.tables import StepIndex
    from popvision_py.analysis.ipu.exchange import costliest

    # GIVEN 12 transfers of two IPUs' steps whose totals tie at the third and fourth costliest (30 cycles, three
    # rows) and at 0 (four rows)
    ipu = np.array([0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1])
    step = np.array([5, 2, 7, 1, 3, 4, 0, 0, 2, 6, 3, 1])
    total = np.array([10, 30, 50, 30, 0, 40, 0, 30, 0, 20, 0, 5], np.int64)
    names = [f"s{i}" for i in range(8)]
    programs = Columns(pa.table({"ipu": np.repeat([0, 1], 8), "step": np.tile(np.arange(8), 2),
                                 "name": pa.array(names * 2).dictionary_encode()}))
    x = Columns(pa.table({"ipu": ipu, "step": step, "kind": pa.array(["inter_ipu"] * 12).dictionary_encode(),
                          "src_ipu": ipu, "dst_ipu": 1 - ipu, "bytes": total, "cycles": total}))
    done = Executed(x, np.ones(12, np.int64), total, total, total)
    # WHEN the n costliest are asked for
    got = costliest(done, StepIndex(programs), n)
    # THEN they are the first n of all the rows sorted by total (the most first), then IPU, then step
    want = sorted(range(12), key=lambda r: (-total[r], ipu[r], step[r]))[:n]
    assert list(zip(np.asarray(got["ipu"]).tolist(), np.asarray(got["step"]).tolist())) == \
        [(int(ipu[r]), int(step[r])) for r in want]
    assert list(got["name"]) == [f"s{step[r]}" for r in want]
