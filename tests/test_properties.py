"""Properties every profile keeps, over random valid run configurations (hypothesis).

Each example emulates mnist with a random partition, strategy, mode and options, writes the
profile, reads it back through the format's validation, and checks the invariants the reports
rest on.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import popvision_py as pv
from engine.runner import RunRequest, emulate
from popvision_py.format import open_profile

BLOCKS = ["B1", "B2", "B3", "B4"]


@st.composite
def run_configurations(draw) -> RunRequest:
    """A valid mnist run: contiguous groups of blocks on ascending IPUs, options that satisfy the rules."""
    cuts = sorted(draw(st.sets(st.integers(1, 3), max_size=3)))
    groups = [BLOCKS[a:b] for a, b in zip([0, *cuts], [*cuts, 4])]
    stages = " ".join(f"{','.join(group)}@{ipu}" for ipu, group in enumerate(groups))
    n = len(groups)
    strategy = draw(st.sampled_from(["pipelined", "sharded", "phased"]))
    mode = draw(st.sampled_from(["training", "inference"]))
    # phased stages on distinct IPUs run as a pipeline too, under the same rules
    if strategy != "sharded" and mode == "training":
        accumulation = draw(st.integers(2 * n - 1, 2 * n + 6))
    else:
        accumulation = draw(st.integers(1, 6)) if mode == "training" else 1
    iterations = draw(st.integers(n if mode == "inference" and strategy != "sharded" else 1, n + 3))
    options = {
        "micro_batch_size": draw(st.sampled_from([1, 8, 40, 200])),
        "device_iterations": iterations,
        "gradient_accumulation": accumulation,
        "replication_factor": draw(st.sampled_from([1, 2])),
        "mode": mode,
        "precision": draw(st.sampled_from(["fp16", "fp32"])),
        "recompute": draw(st.booleans()),
    }
    return RunRequest(
        model="mnist", options=options, strategy=strategy, stages=stages,
        offload_optimiser=draw(st.booleans()),
    )


def check_invariants(path) -> None:
    with open_profile(path) as profile:
        tables = {name: profile.read_pandas(name) for name in profile.tables}  # every member decodes

    # bytes and cycles are never negative, anywhere
    for name, frame in tables.items():
        for column in frame.columns:
            if column.endswith(("bytes", "cycles", "cycle")) or column in ("flops",):
                assert (frame[column] >= 0).all(), f"{name}.{column} has negative values"

    # trace intervals on one IPU never overlap: they tile [0, end) and every IPU ends together
    trace = tables["trace"].sort_values(["ipu", "start_cycle"], kind="stable")
    ends = []
    for _, rows in trace.groupby("ipu", sort=True):
        start, end = rows["start_cycle"].to_numpy(), rows["end_cycle"].to_numpy()
        assert start[0] == 0 and (end >= start).all()
        assert (start[1:] == end[:-1]).all(), "trace rows on one IPU overlap or leave a gap"
        ends.append(end[-1])
    assert len(set(ends)) == 1

    report = pv.open(path)
    total = ends[0]
    # busy + idle = total on every IPU
    phases = report.exchange.figures()
    busy_and_idle = (phases.compute_cycles + phases.exchange_cycles + phases.sync_cycles
                     + phases.stream_cycles + phases.idle_cycles)
    assert busy_and_idle == phases.total_cycles == total * trace["ipu"].nunique()

    # categories sum to each tile's total; always-live + not-always-live = total
    tile_memory = tables["tile_memory"]
    sums = tile_memory.groupby(["ipu", "tile"], observed=True)["bytes"].sum()
    by_tile = report.memory.by_tile().set_index(["ipu", "tile"])
    assert (by_tile.loc[sums.index, "total_bytes"] == sums).all()
    assert (by_tile["always_live_bytes"] + by_tile["not_always_live_bytes"] == by_tile["total_bytes"]).all()

    # a tile's peak = always-live + its largest not-always-live step: the liveness table's worst
    # tile at its worst step holds exactly the fullest tile's peak
    liveness = tables["liveness"]
    if len(liveness):
        worst_per_ipu = liveness.groupby("ipu")["worst_tile_bytes"].max()
        fullest_per_ipu = by_tile.groupby(level="ipu")["total_bytes"].max()
        assert (worst_per_ipu == fullest_per_ipu.loc[worst_per_ipu.index]).all()

    # a compute set lasts as long as its slowest tile
    programs = tables["programs"]
    slowest = tables["tile_cycles"].groupby(["ipu", "step"])["cycles"].max()
    compute = programs[programs["type"] == "compute_set"].set_index(["ipu", "step"])["cycles"]
    assert (compute.loc[slowest.index] == slowest).all()

    # throughput is consistent with the time per step
    summary = report.summary.figures()
    assert summary.step_cycles * summary.iterations == pytest.approx(total)
    assert summary.throughput_samples_per_s * summary.step_s == pytest.approx(summary.samples_per_step)
    report.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=run_configurations())
def test_every_valid_run_gives_a_profile_that_keeps_its_invariants(tmp_path_factory, request):
    path = tmp_path_factory.mktemp("run") / "profile.pop"
    request.profile = path
    emulate(request)
    check_invariants(path)


@pytest.mark.parametrize("sample", ["mnist_pipelined", "mnist_sharded", "mnist_offload_optimiser",
                                    "mnist_inference", "bert_base_pipelined", "bert_large_out_of_memory"])
def test_the_sample_profiles_keep_the_invariants(sample):
    from pathlib import Path

    check_invariants(Path(__file__).resolve().parents[1] / "sample_profiles" / sample / "profile.pop")
