"""The memory model's liveness, tensor sharding (the t axis), the phased pipeline and host calls."""

from __future__ import annotations

import json

from tests.engine.conventions import check_profile
from tests.engine.helpers import BALANCED_MODEL, run_cli, run_profile, write_model

CLOCK = 1.33e9


def _bytes(tables, category: str) -> int:
    v = tables["variables"]
    return int(v[v["category"].astype(str) == category]["bytes"].sum())


def test_tensor_sharding_halves_each_ipus_weights_and_adds_inter_ipu_all_reduces(tmp_path):
    # GIVEN four identical stages of three 1024 x 1024 linears (1,049,600 parameters each)
    model = write_model(tmp_path, BALANCED_MODEL)
    whole = run_profile(tmp_path, model, name="t1")
    # WHEN each stage's ops are split over T = 2 IPUs
    halves = run_profile(tmp_path, model, "--tensor-sharding", "2", name="t2")
    # THEN each traced IPU holds half the weights (12 x 1,049,600 x 2 bytes in all, halved)
    assert _bytes(whole, "weights") == 12 * 1_049_600 * 2
    assert _bytes(halves, "weights") == _bytes(whole, "weights") // 2
    # and row-parallel outputs (forward) / column-parallel input gradients (backward) are all-reduced
    # between the shards over IPU-Links: in a pair of linears, one of each
    ex = halves["exchanges"]
    inter = ex[ex["kind"].astype(str) == "inter_ipu"].merge(halves["programs"], on=["ipu", "step"])
    shard_reduces = inter[inter["name"].astype(str).str.endswith("/all_reduce")]
    assert len(shard_reduces) > 0
    assert not whole["programs"]["name"].astype(str).str.endswith("/all_reduce").any()
    # a ring over T=2 moves 2(T-1)/T = 1x the full tensor: a [16, 1024] fp16 output is 32 KiB
    fwd = shard_reduces[shard_reduces["pass"].astype(str) == "forward"]
    assert set(fwd["bytes_x"]) == {16 * 1024 * 2}
    # the run needs 4 stages x 2 shards = 8 IPUs: an IPU-POD16
    assert halves["manifest"]["target"]["system"] == "IPU-POD16"
    check_profile(tmp_path / "t2" / "profile.pop")


def test_recomputation_stashes_checkpoints_not_every_activation(tmp_path):
    args = ("bert-base", "--layers", "4", "--batch-size", "2", "--gradient-accumulation", "9")
    plain = run_profile(tmp_path, *args, "--no-recompute", name="plain")
    recomputed = run_profile(tmp_path, *args, "--recompute", name="recompute")
    # THEN the stash holds only stage inputs and block checkpoints, far less than every activation
    assert _bytes(recomputed, "stash") < _bytes(plain, "stash") / 5
    # and in the backward one block is recomputed at a time: its recomputed activations die before the
    # next block's recomputation starts
    v = recomputed["variables"]
    rec = v[v["name"].astype(str).str.endswith("/recomputed")].merge(
        recomputed["ops"][["op_id", "block"]].drop_duplicates(), on="op_id")
    spans = rec.groupby(["ipu", "block"], observed=True).agg(first=("live_from_step", "min"),
                                                              last=("live_to_step", "max"))
    # (an IPU recomputing one block only proves nothing: some IPU must recompute two or more)
    assert spans.groupby(level="ipu").size().max() >= 2
    for ipu, blocks in spans.groupby(level="ipu"):
        blocks = blocks.sort_values("first")
        assert (blocks["first"].to_numpy()[1:] > blocks["last"].to_numpy()[:-1]).all()


def test_exchange_buffers_live_only_over_their_exchange_and_compute_set(tmp_path):
    tables = run_profile(tmp_path, "mnist")
    v, p = tables["variables"], tables["programs"]
    buffers = v[v["category"].astype(str) == "exchange_buffers"]
    assert len(buffers) > 0
    # live from the op pass's exchange to the compute set that reads it: the next step, or three
    # steps on when a norm's statistics (compute set, sync, exchange) come between
    steps = p[["ipu", "step", "type", "name"]]
    first = buffers[["ipu", "live_from_step"]].merge(steps, left_on=["ipu", "live_from_step"], right_on=["ipu", "step"])
    last = buffers[["ipu", "live_to_step"]].merge(steps, left_on=["ipu", "live_to_step"], right_on=["ipu", "step"])
    assert len(first) == len(last) == len(buffers)
    assert (first["type"].astype(str) == "exchange").all() and (last["type"].astype(str) == "compute_set").all()
    assert (first["name"].astype(str).str.removesuffix("/exchange") == last["name"].astype(str)).all()
    span = buffers["live_to_step"] - buffers["live_from_step"]
    assert span.isin([1, 4]).all() and (span == 4).any()  # mnist's loss runs a softmax


def test_bert_large_default_fits_with_headroom():
    result = run_cli("run", "bert-large", "-q", "--json")
    summary = json.loads(result.output)
    assert summary["fits"] and summary["oom_tiles"] == 0
    assert 0.7 < summary["worst_tile_bytes"] / summary["bytes_per_tile"] < 0.95


def test_each_host_call_pays_its_latency_once(tmp_path):
    # GIVEN mnist (10 device iterations per host call) run twice per profile
    # with a data loader that keeps up (else the call's latency hides behind the loader: mnist is host-bound)
    fast_host = ("--input", "synthetic")
    base = run_profile(tmp_path, "mnist", "--runs", "2", *fast_host, name="base")
    slow = run_profile(tmp_path, "mnist", "--runs", "2", "--assume", "host_call_latency_s=0.02", *fast_host,
                       name="slow")
    p = base["programs"]
    calls = p[p["name"].astype(str) == "host/call"]
    # THEN the IPUs the host feeds (images to IPU 0, labels to IPU 3) make the call, once per run, as a
    # stream phase, side by side in the same superstep
    assert list(calls["ipu"]) == [0, 3]
    rows = base["trace"].merge(calls[["ipu", "step"]], on=["ipu", "step"])
    assert len(rows) == 2 * 2 and set(rows["phase"].astype(str)) == {"stream"}
    # the images themselves cross the host link in the per-micro-batch stream copies: 40 x 28 x 28 fp16
    inputs = p[p["name"].astype(str) == "input/from_host"]
    assert list(inputs["bytes"]) == [40 * 784 * 2]
    # and 5 ms more latency per call than the default 15 ms lengthens the run by 2 x 5 ms
    extra = slow["trace"]["end_cycle"].max() - base["trace"]["end_cycle"].max()
    assert extra == 2 * (int(0.02 * CLOCK) - int(0.015 * CLOCK))


def test_gpt3_175b_runs_the_blogs_mapping_with_overlapped_weight_streaming(tmp_path):
    tables = run_profile(tmp_path, "gpt", "--preset", "gpt3-175b", "--no-ranges")  # the mapping, not its ranges
    run, target = tables["manifest"]["run"], tables["manifest"]["target"]
    # p = 8 stages x t = 8 shards x r = 4 replicas = an IPU-POD256
    assert len(run["stages"]) == 8 and run["tensor_sharding"] == 8 and run["replication_factor"] == 4
    assert target["system"] == "IPU-POD256" and run["strategy"] == "phased"
    # weights stream per op; the exposed part of each transfer is never longer than the transfer
    ex = tables["exchanges"].merge(tables["programs"], on=["ipu", "step"], suffixes=("", "_step"))
    loads = ex[ex["name"].astype(str).str.endswith("/weights_from_remote")]
    assert (loads["cycles_step"] <= loads["cycles"]).all()
    assert (loads["cycles_step"] < loads["cycles"]).any()
    check_profile(tmp_path / "p" / "profile.pop")
