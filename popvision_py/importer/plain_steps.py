"""Plain steps: a run's training steps timed without the profiler, written into the trace it records.

A profiled step is slower than the step a user runs without the profiler: every event the profiler
records costs the training thread time (more with ``record_shapes``, ``profile_memory`` and
``with_stack``). The steps of the profiler schedule's ``wait`` phase run with the profiler off, in the
same process, on the same machine, just before the recorded ones: ``PlainSteps`` times them and writes
them into the trace (``prof.add_metadata_json``, a top-level key of the trace's header, ``KEY``), and the
import reads them back (``read``) into the manifest's ``run.import.plain_steps``. The re-timing of an
imported pipeline then predicts the run without the profiler (docs/real-traces.md, "The profiler's own
cost"). One definition of the key and its contents, used by the writer and the reader.

    from torch.profiler import profile, schedule
    from popvision_py.importer.plain_steps import PlainSteps

    with profile(schedule=schedule(wait=13, warmup=1, active=4), on_trace_ready=...) as prof:
        steps = PlainSteps(prof)          # the first SKIP steps (set-up, warming up) are not timed: 8 are
        for batch in loader:
            train_step(batch)
            steps.step()                  # instead of prof.step()

Nothing here imports torch: the profiler is handed in.
"""

from __future__ import annotations

import json
import time
from typing import Any

from popvision_py.importer.checks import TraceError, is_int, wrong

KEY = "popvision_plain_steps"
MAX_STEPS = 100_000
# The loop's first steps left untimed. A process's first step carries its lazy set-up, and the next few are not yet
# its steady state. On a Transformer GPipe run of benchmarks/replay_fidelity.py (2 gloo ranks on the CPU, recorded
# three times each way), the plain steps timed after one skipped step were 9 to 26% slower than the same run's
# steps after the profiler, after six -0.5 to +8.7%; over the benchmark's 84 recordings, +3.0% in the median after
# one, +1.9% after five (docs/real-traces.md, "Predictions against real runs").
SKIP = 5


class PlainSteps:
    """Times each step that runs in ``prof``'s ``wait`` phase (the profiler off) and writes the times into
    the trace when the profiler starts recording. ``skip``: the loop's first steps left untimed (the first
    step of a process carries its lazy set-up: the pipeline's shape inference, the first sends' set-up; the
    next few are not yet its steady state: ``SKIP``). Give the schedule a ``wait`` of ``skip`` plus the
    steps to time."""

    def __init__(self, prof: Any, skip: int = SKIP) -> None:
        self.prof = prof
        self.skip = skip
        self.step_ns: list[int] = []
        self.steps: list[int] = []
        self._index = 0
        self._last = time.perf_counter_ns()

    def step(self) -> None:
        """End a step: time it if the profiler was off during it, then ``prof.step()``; where the profiler
        turns on with this call, write the plain steps timed so far into the trace it starts."""
        now = time.perf_counter_ns()
        was_off = _off(self.prof)
        if was_off and self._index >= self.skip:
            self.step_ns.append(now - self._last)
            self.steps.append(self._index)
        self.prof.step()
        if was_off and not _off(self.prof) and self.step_ns:
            self.prof.add_metadata_json(KEY, json.dumps(self.contents()))
        self._index += 1
        self._last = time.perf_counter_ns()

    def contents(self) -> dict[str, Any]:
        """What the trace's header holds under ``KEY``."""
        return {"step_ns": self.step_ns, "steps": self.steps, "clock": "time.perf_counter_ns"}


def _off(prof: Any) -> bool:
    """Whether the profiler records nothing in its current step (its schedule's ``wait`` phase)."""
    return getattr(prof.current_action, "name", "") == "NONE"


def read(header: dict[str, Any]) -> list[int]:
    """The plain steps' durations (ns) a trace's header holds under ``KEY``; empty where it has none. A
    wrong type or a number out of range is a sentence (``TraceError``), never a default standing in."""
    found = header.get(KEY)
    if found is None:
        return []
    if not isinstance(found, dict):
        raise wrong(f"a {KEY} of", found, "an object (popvision_py.importer.plain_steps writes it)")
    step_ns = found.get("step_ns")
    if not isinstance(step_ns, list) or len(step_ns) > MAX_STEPS:
        raise wrong(f"a {KEY}.step_ns of", step_ns, f"a list of at most {MAX_STEPS:,} step times")
    for ns in step_ns:
        if not (is_int(ns) and 0 < ns < 1 << 62):
            raise wrong(f"a {KEY}.step_ns entry of", ns, "a step time in nanoseconds (an integer above 0)")
    return [int(ns) for ns in step_ns]


__all__ = ["KEY", "PlainSteps", "TraceError", "read"]
