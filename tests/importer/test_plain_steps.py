"""The profiler's own cost (issue 49): steps timed without the profiler, written into the trace, read by the
import, and what-ifs that answer for the plain run.

- ``PlainSteps`` times the steps of the profiler's wait phase (not the first five: set-up and warming up) and
  writes them once, when the profiler starts;
- the import reads them per rank, refuses a malformed one in a sentence, counts each rank's events;
- a recorded run predicted from its own trace lands on its plain step, inside its range;
- a trace without plain steps has its profiler's cost bounded from its own events, and its range widened
  by that bound, as docs/real-traces.md says.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import popvision_py
from popvision_py.analysis.pipeline import plain
from popvision_py.analysis.pipeline.replay import Replay
from popvision_py.cli import main
from popvision_py.importer import plain_steps
from tests.importer.test_import_without_steps import benchmark_trace


class FakeProfiler:
    """A profiler's schedule as torch.profiler walks it: ``actions[k]`` is step k's action's name."""

    def __init__(self, actions: list[str]) -> None:
        self.actions = actions
        self.k = 0
        self.metadata: list[tuple[str, str]] = []

    @property
    def current_action(self):
        return SimpleNamespace(name=self.actions[min(self.k, len(self.actions) - 1)])

    def step(self) -> None:
        self.k += 1

    def add_metadata_json(self, key: str, value: str) -> None:
        self.metadata.append((key, value))


def test_plain_steps_times_the_wait_phase_and_writes_it_once_when_the_profiler_starts() -> None:
    # GIVEN a schedule of wait=8, warmup=1, active=2 (steps 0-7 off, 8 warming up, 9-10 recorded)
    prof = FakeProfiler(["NONE"] * 8 + ["WARMUP"] + ["RECORD", "RECORD_AND_SAVE"])
    steps = plain_steps.PlainSteps(prof)
    # WHEN a loop of 11 steps runs, ending each with steps.step()
    for _ in range(11):
        steps.step()
    # THEN steps 5-7 are timed (steps 0-4, the set-up and the warming up, are not), and written once, as the
    # profiler warms up
    assert plain_steps.SKIP == 5
    assert steps.steps == [5, 6, 7] and len(steps.step_ns) == 3 and all(ns > 0 for ns in steps.step_ns)
    assert prof.k == 11
    assert [key for key, _ in prof.metadata] == [plain_steps.KEY]
    written = json.loads(prof.metadata[0][1])
    assert written["step_ns"] == steps.step_ns and written["steps"] == [5, 6, 7]
    assert plain_steps.read({plain_steps.KEY: written}) == steps.step_ns
    # AND a loop told to skip one step times steps 1-7
    prof = FakeProfiler(["NONE"] * 8 + ["WARMUP"])
    once = plain_steps.PlainSteps(prof, skip=1)
    for _ in range(9):
        once.step()
    assert once.steps == [1, 2, 3, 4, 5, 6, 7]


def test_a_profiler_without_a_wait_phase_writes_nothing() -> None:
    prof = FakeProfiler(["RECORD"] * 3)
    steps = plain_steps.PlainSteps(prof)
    for _ in range(3):
        steps.step()
    assert steps.step_ns == [] and prof.metadata == []


@pytest.mark.parametrize("value,says", [
    ([1, 2], "an object"),
    ({"step_ns": "fast"}, "a list of at most"),
    ({"step_ns": [5, -3]}, "a step time in nanoseconds"),
    ({"step_ns": [5, 2.5]}, "a step time in nanoseconds"),
])
def test_a_malformed_plain_steps_key_is_refused_in_a_sentence(tmp_path, value, says: str) -> None:
    # GIVEN a trace whose header holds a plain-steps key of the wrong shape
    trace = {plain_steps.KEY: value, **benchmark_trace(gpu=False)}  # a header key: before traceEvents
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(trace))
    # WHEN it is imported, THEN the import stops with one sentence naming the file and the key (exit 2)
    result = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert str(path) in result.output and plain_steps.KEY in result.output and says in result.output


def test_a_trace_without_plain_steps_imports_with_none() -> None:
    assert plain_steps.read({"schemaVersion": 1}) == []


# -- the bound, on rows timed on paper -------------------------------------------------------------------------


def test_without_plain_steps_the_profilers_cost_is_bounded_by_events_times_the_shortest_span_and_gap() -> None:
    # GIVEN two ranks, two profiled steps of 100 ms, rank 0 recording 1,000 events and rank 1 4,000; rank 0's
    # recorded rows last 10 us (x 19) and 1 ms with gaps of 2 us after each, rank 1's 5 us (x 19) and 2 ms with
    # gaps of 1 us
    rows = []
    for ipu, short, long, gap in ((0, 10_000, 1_000_000, 2_000), (1, 5_000, 2_000_000, 1_000)):
        t = 0
        for d in [short] * 19 + [long]:
            rows.append({"ipu": ipu, "phase": "compute", "start_cycle": t, "end_cycle": t + d})
            rows.append({"ipu": ipu, "phase": "idle", "start_cycle": t + d, "end_cycle": t + d + gap})
            t += d + gap
    trace = pd.DataFrame(rows)
    run = {"import": {"plain_step_ns": [[], []], "events_per_rank": [1_000, 4_000]}}
    # WHEN the cost is asked of a run whose profiled steps took 96, 100 and 110 ms (the median 100 ms)
    cost = plain.profiler_cost(np.array([96e6, 100e6, 110e6]), run, trace, iterations=2)
    # THEN each rank's event costs at most its 5th-percentile span plus its 5th-percentile gap (12 us, 6 us):
    # rank 0 spends 500 x 12 us = 6 ms a step, rank 1 2,000 x 6 us = 12 ms: the bound is 12% of the step, of
    # which rank 1's spans hold 2,000 x 5 us = 10 ms (10%)
    assert cost.source == "bounded"
    assert cost.event_ns == pytest.approx(6_000) and cost.events_per_step == pytest.approx(2_000)
    assert cost.bound_pct == pytest.approx(12.0) and cost.inside_pct == pytest.approx(10.0)
    # the plain step takes half the spans' part off the median; its range runs from the fastest step with the
    # whole bound off to the slowest with none
    assert (cost.plain_ns, cost.plain_low_ns, cost.plain_high_ns) == pytest.approx((95e6, 96e6 * 0.88, 110e6))
    assert "at most 12.0% of the step" in cost.sentence()


def test_timed_plain_steps_are_the_plain_step_and_its_range() -> None:
    # GIVEN two ranks' plain steps: rank 0 80, 90, 100 ms; rank 1 82, 88, 104 ms (means 81, 89, 102)
    run = {"import": {"plain_step_ns": [[80e6, 90e6, 100e6], [82e6, 88e6, 104e6]], "events_per_rank": [1, 1]}}
    cost = plain.profiler_cost(np.array([100e6]), run, pd.DataFrame(), iterations=1)
    # THEN the plain step is 89 ms; the slowest step is 102 / 81 times the fastest, and the range runs as many times
    # either way of the median: 89 x 81 / 102 = 70.7 ms to 89 x 102 / 81 = 112.1 ms; against a 100 ms profiled step
    # the profiler's cost is +12.4%
    assert cost.source == "timed" and cost.plain_steps == 3
    assert (cost.plain_ns, cost.plain_low_ns, cost.plain_high_ns) == pytest.approx((89e6, 89e6 * 81 / 102,
                                                                                    89e6 * 102 / 81))
    assert cost.overhead_pct == pytest.approx(100 * (100 / 89 - 1))


# -- a recorded run ------------------------------------------------------------------------------------------


def _plain_ms(meta: dict) -> np.ndarray:
    """Each plain step of a recorded run, the ranks' mean, as meta.json has them (ms)."""
    return np.asarray(meta["plain_step_ns"], float).mean(axis=0) / 1e6


@pytest.mark.slow
def test_the_import_reads_each_ranks_plain_steps_and_events(recorded) -> None:
    run = recorded("gpipe")
    with popvision_py.open(run.profile) as report:
        imported = report.run["import"]
    # the plain steps each rank wrote, in rank order, as the recorder kept them
    assert imported["plain_step_ns"] == run.meta["plain_step_ns"]
    assert [len(p) for p in imported["plain_step_ns"]] == [run.meta["plain_steps"]] * run.meta["world_size"]
    # every event of each rank's file counted
    assert imported["events_per_rank"] == [len(run.raw(r)["traceEvents"]) for r in range(run.meta["world_size"])]
    assert imported["profiler_options"] == {"record_shapes": True, "profile_memory": True, "with_stack": False}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpipe", "interleaved"])
def test_the_run_predicted_from_its_own_trace_lands_on_its_plain_step(recorded, kind: str) -> None:
    # GIVEN a recorded run and its plain steps (the ranks' mean step, median over the steps)
    run = recorded(kind)
    plain_ms = float(np.median(_plain_ms(run.meta)))
    with popvision_py.open(run.profile) as report:
        rp = report.critical_path.replay()
    # WHEN it is predicted as recorded, and with twice the micro-batches
    p = rp.predict()
    twice = rp.predict(micro_batches=2 * rp.m.micro_batches)
    # THEN the run itself lands on its plain step, inside a range at least as many times either way of it as its
    # slowest plain step is of its fastest (the re-timed steps may widen it, never narrow it)
    steps = _plain_ms(run.meta)
    spread = steps.max() / steps.min()
    assert rp.m.profiler.source == "timed" and rp.m.profiler.plain_ns / 1e6 == pytest.approx(plain_ms)
    assert p.step_ns / 1e6 == pytest.approx(plain_ms)
    assert p.low_ns / 1e6 <= plain_ms / spread * (1 + 1e-9) and plain_ms * spread * (1 - 1e-9) <= p.high_ns / 1e6
    # and a what-if is the plain step times the what-if's re-timed step over the recorded run's (the
    # profiler's cost, in both, cancels)
    assert twice.step_ns == pytest.approx(plain_ms * 1e6 * twice.profiled_ns / rp.profiled_baseline_ns())
    assert twice.low_ns <= twice.step_ns <= twice.high_ns


@pytest.mark.slow
def test_a_trace_without_plain_steps_widens_the_range_by_the_bound(recorded) -> None:
    # GIVEN a recorded run re-timed as a trace without plain steps would be, and as one imported before the
    # import read the profiler's cost (the profiled steps, as measured)
    run = recorded("gpipe")
    with popvision_py.open(run.profile) as report:
        m = report.critical_path.measured()
        imported = {k: v for k, v in report.run["import"].items() if k not in ("plain_step_ns", "events_per_rank")}
        trace = report.profile.read_pandas("trace")
    iterations = m.steps["iteration"].nunique()
    bounded = plain.profiler_cost(m.measured_steps_ns(), {"import": {**imported, "plain_step_ns": [[]] * 4,
                                  "events_per_rank": report.run["import"]["events_per_rank"]}}, trace, iterations)
    measured = plain.profiler_cost(m.measured_steps_ns(), {"import": imported}, trace, iterations)
    assert (bounded.source, measured.source) == ("bounded", "none")
    # WHEN both predict 12 micro-batches
    p = Replay(replace(m, profiler=bounded)).predict(micro_batches=12)
    q = Replay(replace(m, profiler=measured)).predict(micro_batches=12)
    # THEN the point takes half the spans' part off; the range runs from the whole bound off to none
    b, inside = bounded.bound_pct / 100, bounded.inside_pct / 100
    assert 0 < inside < b <= 1
    assert p.step_ns == pytest.approx(q.step_ns * (1 - inside / 2))
    assert p.low_ns == pytest.approx(q.low_ns * (1 - b)) and p.high_ns == pytest.approx(q.high_ns)
