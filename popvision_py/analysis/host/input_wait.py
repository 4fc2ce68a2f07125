"""Host input: how long the IPUs wait for the host's data loaders, read from the profile alone.

Inputs: ``programs`` (the ``host/input_wait`` step on each IPU), the trace's aggregates (how often
each ran) and the manifest. Every IPU waits in the same superstep at the start of a host call, so
the run's wall-clock wait is the longest any IPU waited. A run is *host-bound* when the IPUs wait
at all: the host's loaders, not the IPUs, then set the time of each call. Formulas in
docs/reports.md, "Host input".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Columns, lookup
from popvision_py.analysis.trace.scan import Aggregates, aggregates
from popvision_py.format.schema import HOST_BOUND_PCT, INPUT_WAIT_STEP


@dataclass(frozen=True)
class HostInput:
    """The wait for input over the trace; ``verdict`` says it in one line."""

    host_bound: bool
    host_calls: int
    host_processes: int
    samples_per_call: int
    call_cycles: float  # one host call: the run's time / host calls
    wait_per_call_cycles: float
    input_wait_cycles: int  # wall clock, over the trace
    wait_ipu_cycles: int  # summed over IPUs (what the phase totals count as streaming)
    input_wait_pct: float  # of the run's time
    verdict: str


def host_bound_line(wait_pct: float) -> str:
    """The line ``popvision run`` and the reports print for a host-bound run."""
    return (f"host-bound: the IPUs wait {wait_pct:.1f}% of each host call for input; more host processes "
            f"(--host-processes) or a faster loader would help, more IPUs would not")


def samples_per_call(run: dict[str, Any]) -> int:
    """Samples one host call takes: micro-batch x GA (1 for inference) x device iterations x replicas."""
    return (int(run.get("micro_batch_size", 1) or 1) * int(run.get("gradient_accumulation", 1) or 1)
            * int(run.get("device_iterations", 1) or 1) * int(run.get("replication_factor", 1) or 1))


def host_input(programs: Columns, trace: Aggregates, run: dict[str, Any]) -> HostInput:
    """The IPUs' wait for input: per IPU the wait step's cycles x its executions; the longest is the wall time."""
    agg = aggregates(trace)
    total = int(agg.end_cycle - agg.start_cycle)
    calls = max(int(run.get("runs", 1) or 1), 1)
    rows = np.flatnonzero(programs.strings("name") == INPUT_WAIT_STEP) if len(programs) else np.zeros(0, np.int64)
    runs = lookup(agg.executions, programs["ipu"][rows], programs["step"][rows]).astype(np.int64)
    waited = programs["cycles"][rows].astype(np.int64) * runs
    wall = int(waited.max(initial=0))
    pct = 100.0 * wall / total if total else 0.0
    bound = pct >= HOST_BOUND_PCT
    verdict = host_bound_line(pct) if bound else "not host-bound: the host's data loaders keep up with the IPUs"
    return HostInput(host_bound=bound, host_calls=calls, host_processes=int(run.get("host_processes", 1) or 1),
                     samples_per_call=samples_per_call(run), call_cycles=total / calls,
                     wait_per_call_cycles=wall / calls, input_wait_cycles=wall, wait_ipu_cycles=int(waited.sum()),
                     input_wait_pct=float(pct),
                     verdict=verdict)
