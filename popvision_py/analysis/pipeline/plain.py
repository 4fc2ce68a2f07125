"""The profiler's own cost: how far an imported pipeline's profiled step is from the step its user runs.

Every event the profiler records costs the training thread time, so the costs a re-timing reuses carry
it, and so would every prediction made from them. A what-if answers for the run without the profiler
(the *plain* run): the re-timing gives the what-if's step relative to the recorded run's (both
re-timed from the same costs, so the profiler's share, carried by the same actions re-ordered, cancels
out), and the recorded run's plain step turns that into milliseconds (``Replay.predict``). The plain
step, as well as the trace tells it (``ProfilerCost``):

- **timed** (the trace holds plain steps: ``popvision_py.importer.plain_steps``, the steps of the
  profiler's ``wait`` phase timed in the same processes just before the recorded ones): their median
  (each step the ranks' mean). Its range is for the run's step over the rest of the run, or in the next
  run: it may lie as many times away from the median as the slowest plain step lay from the fastest,
  either way (``spread_range``). A wait phase of a few seconds sees only part of how the machine's speed
  moves: on benchmarks/replay_fidelity.py's 84 recordings, the median of a run's wait phase lay 5.7%
  from the median of its own steps after the profiler, and 5.5% from its configuration's other
  recordings (medians; up to 28 and 29%); its fastest to its slowest step held those in 68% of the
  recordings, the range here in 93% and 90%;
- **bounded** (no plain steps): the profiled step less the profiler's share. Recording an event costs
  the thread its bookkeeping at the event's start, inside the span it records, and at its end, in the
  gap after it: at most the shortest span the rank recorded plus the shortest gap between its rows
  (each the 5th percentile of its rows). The share is at most ``bound_pct``: the events its busiest rank
  recorded per step (operators, annotations, Python frames with ``with_stack``, memory events with
  ``profile_memory``: every event the trace holds) times that, over the profiled step (at most all of
  it). The point takes off half the part the spans hold (``inside_pct``: the events times the shortest
  span); the range runs from the fastest profiled step with the whole bound off to the slowest with
  none. The bound is loose (on the runs of benchmarks/replay_fidelity.py it is one to five times the
  share measured): a trace with plain steps is what gives a range to plan with;
- **none** (a profile imported before the import read any of this): the profiled step, as measured.

Nothing is fitted: every figure is read from the trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

SHORTEST_QUANTILE = 5  # the shortest recorded rows of a rank: a bound on one event's cost to the profiler


@dataclass(frozen=True)
class ProfilerCost:
    """The recorded run's plain step (ns) with its range, the profiled one, and where the plain step came
    from (``source``: "timed", "bounded" or "none"; ``plain_ns`` NaN: nothing to scale to)."""

    source: str
    profiled_ns: float
    plain_ns: float
    plain_low_ns: float
    plain_high_ns: float
    plain_steps: int = 0
    bound_pct: float = 0.0
    events_per_step: float = 0.0
    event_ns: float = 0.0
    inside_pct: float = 0.0

    @property
    def overhead_pct(self) -> float:
        """How much longer the profiled step is than the plain one (percent of the plain step)."""
        return 100.0 * (self.profiled_ns / self.plain_ns - 1.0) if self.plain_ns > 0 else 0.0

    def how(self) -> str:
        """Where the plain step came from, in a few words."""
        if self.source == "timed":
            return f"timed: {self.plain_steps} steps of the profiler's wait phase"
        if self.source == "bounded":
            return (f"bounded: the profiler's cost at most {self.bound_pct:.1f}% of the step, "
                    f"{self.inside_pct / 2:.1f}% taken off")
        return "the profiled step: the profiler's cost not taken out"

    def range_words(self) -> str:
        """What a what-if's range covers, in a user's words (``Replay.predict``: this, times the what-if re-timed
        with each recorded step's own costs)."""
        each = "times the what-if re-timed with each recorded step's own costs"
        if self.source == "timed":
            return (f"the plain steps' spread either way of their median (the slowest "
                    f"{self.plain_high_ns / self.plain_ns:.2f}x the fastest), {each}")
        if self.source == "bounded":
            return f"the fastest profiled step with the profiler's whole bound off to the slowest with none, {each}"
        return f"the fastest to the slowest profiled step, {each}"

    def sentence(self) -> str:
        """Where the plain step came from, in a user's words."""
        if self.source == "timed":
            return (f"profiled step {self.profiled_ns / 1e6:,.1f} ms, {self.plain_ns / 1e6:,.1f} ms without the "
                    f"profiler ({self.overhead_pct:+.1f}%; timed: {self.plain_steps} steps of the profiler's wait "
                    f"phase, written in the trace)")
        if self.source == "bounded":
            return (f"profiled step {self.profiled_ns / 1e6:,.1f} ms; the trace holds no steps timed without the "
                    f"profiler, so its cost is bounded: at most {self.bound_pct:.1f}% of the step "
                    f"({self.events_per_step:,.0f} events a step on the busiest rank x at most "
                    f"{self.event_ns / 1e3:,.1f} us an event); predictions take {self.inside_pct / 2:.1f}% off (half "
                    f"the part its spans hold), the range all of the bound to none")
        if self.plain_ns > 0:
            return (f"profiled step {self.profiled_ns / 1e6:,.1f} ms; the profiler's cost is not taken out (the "
                    f"profile was imported before the import read it: import the traces again)")
        return "the profiler's cost is not taken out (no trace to read it from)"


NONE = ProfilerCost("none", float("nan"), float("nan"), float("nan"), float("nan"))


def plain_step_ns(plain: list[list[int]]) -> np.ndarray:
    """Each plain step's duration, averaged over the ranks (step j: every rank's j-th), ns."""
    rows = [list(p) for p in plain if p]
    if not rows or len(rows) != len(plain):
        return np.zeros(0)
    n = min(len(p) for p in rows)
    return np.asarray([p[:n] for p in rows], float).mean(axis=0)


def profiler_cost(profiled: np.ndarray, run: Mapping[str, Any], trace: pd.DataFrame, iterations: int) -> ProfilerCost:
    """The plain step of an imported run whose profiled steps (the ranks' mean, those the median step is
    taken over) are ``profiled``, from its manifest's ``import`` (plain steps, events per rank) and its
    trace rows (``iterations`` profiled steps)."""
    profiled = np.asarray(profiled, float)
    median = float(np.median(profiled))
    imported = run.get("import") or {}
    steps = plain_step_ns(imported.get("plain_step_ns") or [])
    if len(steps):
        plain, low, high = spread_range(steps)
        return ProfilerCost("timed", median, plain, low, high, plain_steps=len(steps))
    events = imported.get("events_per_rank") or []
    if not events or iterations < 1:
        return ProfilerCost("none", median, median, float(profiled.min()), float(profiled.max()))
    inside, after = shortest_rows_ns(trace), shortest_rows_ns(trace, "idle")
    per_step = np.asarray(events, float)[: len(inside)] / iterations
    spent = per_step * (inside + after)[: len(per_step)]
    busiest = int(np.argmax(spent))
    share = min(float(spent[busiest]) / median, 1.0)
    held = min(float(per_step[busiest] * inside[busiest]) / median, 1.0)
    return ProfilerCost("bounded", median, median * (1.0 - held / 2), float(profiled.min()) * (1.0 - share),
                        float(profiled.max()), bound_pct=100.0 * share, events_per_step=float(per_step[busiest]),
                        event_ns=float(inside[busiest] + after[busiest]), inside_pct=100.0 * held)


def spread_range(steps: np.ndarray) -> tuple[float, float, float]:
    """The plain step timed (the median of ``steps``) and the range of the next run's: the median divided and
    multiplied by the slowest step over the fastest (a run's level is as uncertain as its steps moved)."""
    plain = float(np.median(steps))
    spread = float(steps.max() / steps.min())
    return plain, plain / spread, plain * spread


def shortest_rows_ns(trace: pd.DataFrame, phase: str | None = None) -> np.ndarray:
    """Per rank (ipu 0, 1, ...), the ``SHORTEST_QUANTILE``-th percentile of its recorded (not idle) rows'
    durations (with ``phase``, of its rows of that phase: "idle", the gaps between them)."""
    chosen = trace["phase"].astype(str).to_numpy()
    busy = trace[chosen == phase] if phase else trace[chosen != "idle"]
    d = (busy["end_cycle"] - busy["start_cycle"]).to_numpy(float)
    ipu = busy["ipu"].to_numpy()
    world = int(trace["ipu"].max()) + 1 if len(trace) else 0
    out = np.zeros(world)
    for r in range(world):  # a handful of ranks: one percentile each
        mine = d[(ipu == r) & (d > 0)]
        out[r] = float(np.percentile(mine, SHORTEST_QUANTILE)) if len(mine) else 0.0
    return out
