"""Pipelined, sharded and inference schedules: the arithmetic of fill, main and flush."""

from __future__ import annotations

import pytest

from tests.engine.helpers import BALANCED_MODEL, busy_rows, run_profile, write_model


def _pipeline_idle_share(tables) -> float:
    """Idle / (idle + busy) over the forward/backward part of the run (syncs and update left out)."""
    trace = tables["trace"]
    busy = busy_rows(trace)
    idle = trace[trace["phase"].astype(str) == "idle"]
    # idle rows of the update superstep: after the last backward row of the iteration
    last_bwd = busy.groupby("iteration")["end_cycle"].max()
    idle = idle[idle["start_cycle"] < idle["iteration"].map(last_bwd)]
    # and of the host call's superstep: before the iteration's first forward row
    first_fwd = busy.groupby("iteration")["start_cycle"].min()
    idle = idle[idle["start_cycle"] >= idle["iteration"].map(first_fwd)]
    busy_cycles = (busy["end_cycle"] - busy["start_cycle"]).sum()
    idle_cycles = (idle["end_cycle"] - idle["start_cycle"]).sum()
    return idle_cycles / (idle_cycles + busy_cycles)


@pytest.mark.parametrize("ga", [8, 32])
def test_balanced_pipeline_idle_share_is_the_fill_flush_bubble(tmp_path, ga):
    # GIVEN four identical stages on four IPUs and M micro-batches per weight update
    model = write_model(tmp_path, BALANCED_MODEL)
    # WHEN it trains pipelined
    tables = run_profile(tmp_path, model, "--gradient-accumulation", str(ga), "--device-iterations", "2")
    # THEN each IPU idles for N-1 of the M+N-1 stage-slots (fill and flush): (N-1)/(M+N-1)
    n = 4
    expected = (n - 1) / (ga + n - 1)
    assert _pipeline_idle_share(tables) == pytest.approx(expected, abs=0.03)


def test_more_gradient_accumulation_amortises_fill_and_flush(tmp_path):
    model = write_model(tmp_path, BALANCED_MODEL)
    shares = [
        _pipeline_idle_share(run_profile(tmp_path, model, "--gradient-accumulation", str(ga), name=f"ga{ga}"))
        for ga in (7, 14, 28, 56)
    ]
    assert shares == sorted(shares, reverse=True)
    # (N-1)/(M+N-1): 3/10 at GA 7 down to 3/59 at GA 56
    assert shares[0] == pytest.approx(3 / 10, abs=0.03)
    assert shares[-1] == pytest.approx(3 / 59, abs=0.02)


def test_pipeline_runs_ga_plus_2n_minus_2_supersteps_per_iteration(tmp_path):
    # GIVEN mnist's default 4-IPU pipeline, GA 10 and 10 device iterations
    tables = run_profile(tmp_path, "mnist")
    trace, programs = tables["trace"], tables["programs"]
    sync_steps = programs[programs["name"].astype(str) == "pipeline/sync"][["ipu", "step"]]
    syncs = trace.merge(sync_steps, on=["ipu", "step"])
    # THEN every IPU syncs once per superstep: (GA + 2N - 2) pipeline cycles + 1 update, per iteration,
    # plus the host call's superstep once per run
    per_ipu = syncs.groupby("ipu").size()
    assert (per_ipu == (10 + 2 * 4 - 2 + 1) * 10 + 1).all()
    # and each micro-batch runs forward then backward on every IPU, 10 x 10 of them
    fwd = busy_rows(trace)
    first = fwd.groupby(["ipu", "iteration", "micro_batch", "pass"], observed=True).size()
    assert len(first) == 4 * 10 * 10 * 2


def test_sharded_execution_keeps_one_ipu_busy_at_a_time(tmp_path):
    tables = run_profile(tmp_path, "mnist", "--strategy", "sharded")
    busy = busy_rows(tables["trace"]).sort_values("start_cycle")
    # THEN no two IPUs' forward/backward work overlaps in time
    starts, ends, ipus = busy["start_cycle"].to_numpy(), busy["end_cycle"].to_numpy(), busy["ipu"].to_numpy()
    other = ipus[1:] != ipus[:-1]
    assert (starts[1:][other] >= ends[:-1][other]).all()
    assert set(ipus) == {0, 1, 2, 3}


def test_sharded_is_slower_than_pipelined_for_the_same_work(tmp_path):
    # a host whose data loader keeps up, so that the device's time shows (mnist is host-bound)
    fast_host = ("--input", "synthetic")
    pipelined = run_profile(tmp_path, "mnist", *fast_host, name="pipe")["trace"]["end_cycle"].max()
    sharded = run_profile(tmp_path, "mnist", "--strategy", "sharded", *fast_host,
                          name="shard")["trace"]["end_cycle"].max()
    assert sharded > pipelined


def test_inference_pipeline_has_no_backward_and_n_stages(tmp_path):
    tables = run_profile(tmp_path, "mnist", "--mode", "inference")
    trace = tables["trace"]
    assert set(trace["pass"].astype(str)) <= {"forward", "none"}
    assert tables["manifest"]["run"]["gradient_accumulation"] == 1
    # device iterations 100 micro-batches through 4 stages: 100 + 4 - 1 supersteps, after the host call's
    programs = tables["programs"]
    sync = programs[programs["name"].astype(str) == "pipeline/sync"][["ipu", "step"]]
    assert (trace.merge(sync, on=["ipu", "step"]).groupby("ipu").size() == 1 + 103).all()
