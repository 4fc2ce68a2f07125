"""`popvision import` of real traces (GPipe, 1F1B with stack, Interleaved1F1B, DDP, FSDP on gloo ranks),
checked against the raw JSON by the rules docs/real-traces.md states, computed here from first principles."""

from __future__ import annotations

import re

import numpy as np
import pytest

import popvision_py

pytestmark = pytest.mark.slow

PASS_NAMES = re.compile(r"(Forward|Backward) \d+$|PP:\d+(F|B|I|W)\d+$")


# -- interval arithmetic on sorted, disjoint [a, b) lists ---------------------------------------------

def union(spans):
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return [tuple(x) for x in out]


def minus(first, second):
    out, k = [], 0
    for a, b in first:
        while k < len(second) and second[k][1] <= a:
            k += 1
        j, at = k, a
        while j < len(second) and second[j][0] < b:
            if second[j][0] > at:
                out.append((at, second[j][0]))
            at = max(at, second[j][1])
            j += 1
        if at < b:
            out.append((at, b))
    return out


def measure(spans):
    return sum(b - a for a, b in spans)


def ns(ts):
    return int(round(float(ts) * 1000.0))


def spans(events, test):
    return union((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events if e.get("ph") == "X" and test(e))


def main_thread(events):
    return next(e["tid"] for e in events if e.get("name", "").startswith("ProfilerStep#"))


def pass_compute(raw):
    """A rank's time in its passes, by the documented rule: the pass annotations (and autograd's backward
    nodes), less the communication calls, less the moments no operator runs while a transfer is in flight."""
    events = raw["traceEvents"]
    tid = main_thread(events)
    mine = [e for e in events if e.get("tid") == tid]
    passes = spans(mine, lambda e: e.get("cat") == "user_annotation" and PASS_NAMES.match(e["name"])
                   or e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::evaluate_function: "))
    calls = spans(mine, lambda e: e.get("cat") == "cpu_op" and e["name"].startswith("c10d::"))
    operators = spans(mine, lambda e: e.get("cat") == "cpu_op")
    flight = spans(events, lambda e: e.get("cat") == "user_annotation" and e["name"].startswith("gloo:"))
    waiting = minus(flight, operators)
    return measure(minus(minus(passes, calls), waiting))


def profile_rows(report, ipu):
    trace = report.profile.read_pandas("trace")
    return trace[trace["ipu"] == ipu]


# -- pipelines ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "interleaved"])
def test_the_heavy_stage_is_the_bottleneck(recorded, kind):
    run = recorded(kind)
    with popvision_py.open(run.profile) as report:
        figures = report.stages.figures()
        insights = report.summary.insights()
    heavy = run.meta["heavy_stage"]
    assert figures.bottleneck_stage == heavy
    assert figures.imbalance > 1.1
    rank = int(run.meta["stage_to_rank"][str(heavy)])
    assert f"stage {heavy} (rank {rank}) is the bottleneck" in " ".join(insights["finding"])
    assert set(insights["command"]) == {""}  # nothing to run: these are PyTorch runs


def test_gpipe_pass_time_per_rank_equals_the_traces_own_spans(recorded):
    run = recorded("gpipe")
    with popvision_py.open(run.profile) as report:
        for rank in range(run.meta["world_size"]):
            rows = profile_rows(report, rank)
            in_passes = rows[(rows["phase"] == "compute") & rows["pass"].isin(["forward", "backward"])]
            assert int((in_passes["end_cycle"] - in_passes["start_cycle"]).sum()) == pass_compute(run.raw(rank))


def test_gpipe_bubble_is_at_least_its_ideal(recorded):
    run = recorded("gpipe")
    stages, micro = run.meta["num_stages"], run.meta["micro_batches"]
    ideal = 100.0 * (stages - 1) / (micro + stages - 1)
    with popvision_py.open(run.profile) as report:
        figures = report.stages.figures()
        trace = report.profile.read_pandas("trace")
    assert figures.ideal_bubble_pct == pytest.approx(ideal)
    assert figures.bubble_pct >= ideal
    # its ranks run no supersteps: none are re-timed (the critical path re-times an imported run's stages)
    assert np.isnan(figures.balanced_step_cycles) and np.isnan(figures.balance_gain_pct)
    # the bubble is the ranks' idle share, as the trace rows say
    idle = trace[trace["phase"] == "idle"]
    total = trace.groupby("ipu")["end_cycle"].max().sum()
    assert figures.bubble_pct == pytest.approx(100.0 * (idle["end_cycle"] - idle["start_cycle"]).sum() / total)


def test_the_memory_peak_is_the_traces_largest_total_allocated(recorded):
    run = recorded("gpipe")
    raws = [run.raw(r) for r in range(run.meta["world_size"])]
    steps = [e for raw in raws for e in raw["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    lo = min(ns(e["ts"]) for e in steps)
    hi = max(ns(e["ts"]) + ns(e["dur"]) for e in steps)
    with popvision_py.open(run.profile) as report:
        by_ipu = report.memory.by_ipu().set_index("ipu")["total_bytes"]
    for rank, raw in enumerate(raws):
        samples = [(ns(e["ts"]), e["args"]["Total Allocated"]) for e in raw["traceEvents"]
                   if e.get("name") == "[memory]"]
        before = [b for t, b in samples if t < lo]
        peak = max([b for t, b in samples if lo <= t < hi] + before[-1:])
        assert by_ipu[rank] == peak


def test_1f1b_with_stack_numbers_each_ranks_micro_batches(recorded):
    run = recorded("1f1b")
    micro = run.meta["micro_batches"]
    with popvision_py.open(run.profile) as report:
        assert report.run["import"]["schedule"] == "1F1B"
        assert any("1F1B names none" in line for line in report.run["import"]["not_inferred"])
        trace = report.profile.read_pandas("trace")
    passes = trace[(trace["phase"] == "compute") & trace["pass"].isin(["forward", "backward"])]
    for (ipu, iteration, pass_), rows in passes.groupby(["ipu", "iteration", "pass"], observed=True):
        assert set(rows["micro_batch"]) == set(range(micro)), (ipu, iteration, pass_)


def test_interleaved_stages_sit_on_the_ranks_their_actions_name(recorded):
    run = recorded("interleaved")
    with popvision_py.open(run.profile) as report:
        stages = {s["stage"]: s["ipu"] for s in report.run["stages"]}
        figures = report.stages.figures()
    assert stages == {int(s): r for s, r in run.meta["stage_to_rank"].items()}
    ranks, per_rank, micro = run.meta["world_size"], 2, run.meta["micro_batches"]
    assert figures.ideal_bubble_pct == pytest.approx(100.0 * (ranks - 1) / (per_rank * micro + ranks - 1))


# -- data parallel -----------------------------------------------------------------------------------

def test_ddp_all_reduces_are_the_exchange_with_the_traces_sizes(recorded):
    run = recorded("ddp")
    with popvision_py.open(run.profile) as report:
        exchanges = report.profile.read_pandas("exchanges")
        comm = report.exchange.communication()
    for rank in range(run.meta["world_size"]):
        events = run.raw(rank)["traceEvents"]
        lo = min(ns(e["ts"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
        # the bytes travel with the gloo spans (float32: 4 bytes an element); their c10d calls carry none
        flights = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("gloo:")
                   and ns(e["ts"]) + ns(e["dur"]) > lo]
        assert {e["name"] for e in flights} >= {"gloo:all_reduce"}
        expected = sum(4 * int(np.prod(e["args"]["Input Dims"][0])) for e in flights)
        mine = exchanges[exchanges["ipu"] == rank]
        assert int(mine["bytes"].sum()) == expected
        assert set(mine.loc[mine["bytes"] > 0, "kind"].astype(str)) == {"all_reduce"}
    assert (comm["exposed_comm_cycles"] > 0).all() and (comm["hidden_comm_cycles"] >= 0).all()


def test_fsdp_imports_with_its_collectives(recorded):
    run = recorded("fsdp")
    with popvision_py.open(run.profile) as report:
        programs = report.profile.read_pandas("programs")
        assert report.run["import"]["world_size"] == 2
        assert len(report.summary.insights())
    names = set(programs["name"].astype(str))
    assert {"c10d::_allgather_base_", "gloo:all_gather"} <= names


def intersect(first, second):
    return minus(first, minus(first, second))


def test_hidden_communication_is_compute_while_a_transfer_is_under_way(recorded):
    run = recorded("gpipe")
    with popvision_py.open(run.profile) as report:
        comm = report.exchange.communication().set_index("rank")
        trace = report.profile.read_pandas("trace")
    raws = [run.raw(r) for r in range(run.meta["world_size"])]
    lo = min(ns(e["ts"]) for raw in raws for e in raw["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    for rank, raw in enumerate(raws):
        events = raw["traceEvents"]
        under_way = spans(events, lambda e: e.get("cat") == "cpu_op" and e["name"].startswith("c10d::")
                          or e.get("cat") == "user_annotation" and e["name"].startswith("gloo:"))
        rows = trace[(trace["ipu"] == rank) & (trace["phase"] == "compute")]
        computing = union((lo + a, lo + b) for a, b in zip(rows["start_cycle"], rows["end_cycle"]))
        assert comm.loc[rank, "hidden_comm_cycles"] == measure(intersect(computing, under_way))
        assert comm.loc[rank, "hidden_comm_cycles"] <= comm.loc[rank, "compute_cycles"]
