"""The BSP scheduler: when each IPU runs each segment of its program, and the trace that results.

A run is a sequence of *supersteps*. In each, every IPU runs zero or more of its segments back to
back (a stage's forward or backward for one micro-batch, or the weight update), waits (idle) for
the slowest IPU, then all IPUs sync. So the slowest IPU sets each superstep's length:

* pipelined training over N stages: superstep t runs stage s's forward of micro-batch t-s and its
  backward of micro-batch t-(2N-2-s); GA + 2N - 2 supersteps (fill, main, flush), then the update;
* pipelined inference: stage s runs micro-batch t-s; device iterations + N - 1 supersteps per run;
* sharded: one stage pass of one micro-batch per superstep, so one IPU busy at a time;
* phased over stages on distinct IPUs: scheduled as the pipeline above (each stage streams its
  phases' weights itself, see the compiler);
* phased over stages sharing IPUs: one phase per superstep: its weights streamed in once, then every
  micro-batch of the step.

A host call (a run) starts with a superstep in which the IPUs fed by the host pay the host call's
latency and input transfer; then device_iterations iterations follow. Runs repeat identically, so
one run is scheduled and its trace rows are replayed with a time offset, in NumPy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from popvision_py.format.schema import PASSES, PHASES

from engine.compiler import Compiled

PHASE_OF_TYPE = {
    "compute_set": "compute",
    "exchange": "exchange",
    "global_exchange": "exchange",
    "all_reduce": "exchange",
    "sync": "sync",
    "stream_copy": "stream",
    "remote_buffer_copy": "stream",
}
PASS_INDEX = {p: i for i, p in enumerate(PASSES)}
PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
TRACE_COLUMNS = ("run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase", "start_cycle", "end_cycle")


@dataclass
class Superstep:
    """What each IPU runs in one superstep: ipu -> [(segment key, micro-batch, iteration)]."""

    work: dict[int, list[tuple[object, int, int]]]
    iteration: int


@dataclass
class Schedule:
    """One repeating unit of the run (an iteration when training, a run for inference)."""

    unit_cycles: int
    units: int  # how many times the unit repeats
    unit_is_iteration: bool  # training: one unit = one iteration; inference: one unit = one run
    rows: dict[str, np.ndarray]  # trace rows of one unit, sorted by (ipu, start)
    supersteps: int
    busy_cycles: np.ndarray  # (ipus,) busy cycles per unit (not idle, not the superstep syncs)

    @property
    def total_cycles(self) -> int:
        return self.unit_cycles * self.units


def build_supersteps(compiled: Compiled) -> list[Superstep]:
    """The supersteps of one unit (see the module docstring)."""
    plan = compiled.plan
    stages = plan.stages
    n = len(stages)
    o = plan.options
    steps: list[Superstep] = []
    # segments that stream a stage's weights in before a pass: (ipu, (stage, pass))
    loads = {(prog.ipu, (k[0], k[1].removesuffix("/load"))) for prog in compiled.programs
             for k in prog.segments if isinstance(k, tuple) and k[1].endswith("/load")}
    if plan.training:
        m_count = o.gradient_accumulation
        if plan.pipelined:
            for t in range(m_count + 2 * n - 2):
                work: dict[int, list] = {}
                for s in stages:
                    f, b = t - s.index, t - (2 * n - 2 - s.index)
                    if 0 <= f < m_count:
                        work.setdefault(s.ipu, []).extend(_with_load(loads, s.ipu, (s.index, "forward"), f, 0))
                    if 0 <= b < m_count:
                        work.setdefault(s.ipu, []).extend(_with_load(loads, s.ipu, (s.index, "backward"), b, 0))
                steps.append(Superstep(work, 0))
        elif plan.strategy == "sharded":
            for m in range(m_count):
                for s in stages:
                    steps.append(Superstep({s.ipu: _with_load(loads, s.ipu, (s.index, "forward"), m, 0)}, 0))
                for s in reversed(stages):
                    steps.append(Superstep({s.ipu: _with_load(loads, s.ipu, (s.index, "backward"), m, 0)}, 0))
        else:
            # Phased: a phase loads its weights once, then runs every micro-batch through them.
            for pass_, order in (("forward", stages), ("backward", tuple(reversed(stages)))):
                for s in order:
                    work = _phase_load(loads, s.ipu, (s.index, pass_))
                    work += [((s.index, pass_), m, 0) for m in range(m_count)]
                    steps.append(Superstep({s.ipu: work}, 0))
        steps.append(Superstep({ipu: [("update", -1, 0)] for ipu in range(plan.num_ipus)}, 0))
        # The unit is one host call: device_iterations iterations.
        steps = [Superstep({ipu: [(k, m, it) for k, m, _ in items] for ipu, items in s.work.items()}, it)
                 for it in range(o.device_iterations) for s in steps]
    else:
        m_count = o.device_iterations
        if plan.pipelined:
            for t in range(m_count + n - 1):
                work = {}
                for s in stages:
                    f = t - s.index
                    if 0 <= f < m_count:
                        work.setdefault(s.ipu, []).extend(_with_load(loads, s.ipu, (s.index, "forward"), 0, f))
                steps.append(Superstep(work, min(t, m_count - 1)))
        elif plan.strategy == "sharded":
            for m in range(m_count):
                for s in stages:
                    steps.append(Superstep({s.ipu: _with_load(loads, s.ipu, (s.index, "forward"), 0, m)}, m))
        else:
            for s in stages:
                work = _phase_load(loads, s.ipu, (s.index, "forward"))
                work += [((s.index, "forward"), 0, m) for m in range(m_count)]
                steps.append(Superstep({s.ipu: work}, 0))
    # Each host call starts with the host's own latency and the transfer of the call's inputs, on
    # the IPUs the host feeds; the others wait.
    host = {prog.ipu: [("host_call", -1, 0)] for prog in compiled.programs if "host_call" in prog.segments}
    return ([Superstep(host, 0)] if host else []) + steps


def _with_load(loads: set, ipu: int, key: tuple[int, str], micro_batch: int, iteration: int) -> list:
    """The pass, preceded by its weight load when the weights live off chip."""
    pre = [((key[0], f"{key[1]}/load"), -1, iteration)] if (ipu, key) in loads else []
    return pre + [(key, micro_batch, iteration)]


def _phase_load(loads: set, ipu: int, key: tuple[int, str]) -> list:
    return [((key[0], f"{key[1]}/load"), -1, 0)] if (ipu, key) in loads else []


def schedule(compiled: Compiled) -> Schedule:
    """Time one unit of the run and build its trace rows."""
    plan = compiled.plan
    o = plan.options
    ipus = plan.num_ipus
    supersteps = build_supersteps(compiled)
    # Per IPU: segment key -> (step ids, step cycles, offsets within the segment, duration)
    segs: list[dict[object, tuple[np.ndarray, np.ndarray, np.ndarray, int]]] = []
    for prog in compiled.programs:
        cycles = np.asarray(prog.cycles, dtype=np.int64)
        table = {}
        keys = dict(prog.segments)
        keys["update"] = prog.update_segment
        for key, (first, end) in keys.items():
            ids = np.arange(first, end, dtype=np.int64)
            c = cycles[first:end]
            offsets = np.concatenate(([0], np.cumsum(c)[:-1])) if len(c) else c
            table[key] = (ids, c, offsets, int(c.sum()))
        segs.append(table)
    sync = np.array([prog.cycles[prog.sync_step] for prog in compiled.programs], dtype=np.int64)

    count = len(supersteps)
    busy = np.zeros((count, ipus), dtype=np.int64)
    for t, step in enumerate(supersteps):
        for ipu, items in step.work.items():
            busy[t, ipu] = sum(segs[ipu][key][3] for key, _, _ in items)
    sync_len = int(sync.max())
    length = busy.max(axis=1) + sync_len
    start = np.concatenate(([0], np.cumsum(length)[:-1]))

    # Segment executions, grouped by (ipu, segment) so each group broadcasts over its steps.
    groups: dict[tuple[int, object], list[tuple[int, int, int]]] = {}
    for t, step in enumerate(supersteps):
        for ipu, items in step.work.items():
            offset = 0
            for key, micro_batch, iteration in items:
                groups.setdefault((ipu, key), []).append((int(start[t]) + offset, micro_batch, iteration))
                offset += segs[ipu][key][3]
    parts: list[dict[str, np.ndarray]] = []
    for (ipu, key), execs in groups.items():
        ids, c, offsets, _ = segs[ipu][key]
        if not len(ids):
            continue
        e = np.asarray(execs, dtype=np.int64)
        starts = (e[:, 0:1] + offsets[None, :]).ravel()
        prog = compiled.programs[ipu]
        step_pass = np.array([PASS_INDEX[prog.pass_[i]] for i in ids], dtype=np.int32)
        step_phase = np.array([PHASE_INDEX[PHASE_OF_TYPE[prog.type[i]]] for i in ids], dtype=np.int32)
        step_stage = np.array([prog.stage[i] for i in ids], dtype=np.int32)
        k = len(execs)
        parts.append({
            "iteration": np.repeat(e[:, 2], len(ids)),
            "micro_batch": np.repeat(e[:, 1], len(ids)),
            "ipu": np.full(k * len(ids), ipu),
            "stage": np.tile(step_stage, k),
            "pass": np.tile(step_pass, k),
            "step": np.tile(ids, k),
            "phase": np.tile(step_phase, k),
            "start_cycle": starts,
            "end_cycle": starts + np.tile(c, k),
        })
    # Idle (waiting for the slowest IPU) and the superstep's sync, on every IPU.
    t_idx = np.repeat(np.arange(count), ipus)
    ipu_idx = np.tile(np.arange(ipus), count)
    busy_end = start[t_idx] + busy.ravel()
    sync_start = start[t_idx] + length[t_idx] - sync_len
    iters = np.array([s.iteration for s in supersteps], dtype=np.int64)[t_idx]
    gap = sync_start > busy_end
    parts.append(_fixed(iters[gap], ipu_idx[gap], -1, "idle", busy_end[gap], sync_start[gap]))
    sync_steps = np.array([p.sync_step for p in compiled.programs], dtype=np.int64)
    parts.append(_fixed(iters, ipu_idx, sync_steps[ipu_idx], "sync", sync_start, start[t_idx] + length[t_idx]))
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort((rows["start_cycle"], rows["ipu"]))
    rows = {k: v[order] for k, v in rows.items()}
    return Schedule(int(length.sum()), o.runs, False, rows, count, busy.sum(axis=0))


def _fixed(iteration: np.ndarray, ipu: np.ndarray, step: np.ndarray | int, phase: str, start: np.ndarray,
           end: np.ndarray) -> dict[str, np.ndarray]:
    n = len(start)
    return {
        "iteration": iteration,
        "micro_batch": np.full(n, -1),
        "ipu": ipu,
        "stage": np.full(n, -1),
        "pass": np.full(n, PASS_INDEX["none"]),
        "step": np.broadcast_to(np.asarray(step), (n,)).copy(),
        "phase": np.full(n, PHASE_INDEX[phase]),
        "start_cycle": start,
        "end_cycle": end,
    }


def trace_batches(sched: Schedule, compiled: Compiled, max_rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
    """The whole trace in batches of about ``max_rows`` rows: the unit replayed with time offsets."""
    o = compiled.plan.options
    unit = sched.rows
    per_unit = len(unit["start_cycle"])
    chunk = max(1, max_rows // max(per_unit, 1))
    for first in range(0, sched.units, chunk):
        k = np.arange(first, min(first + chunk, sched.units), dtype=np.int64)
        shift = np.repeat(k * sched.unit_cycles, per_unit)
        batch = {name: np.tile(col, len(k)) for name, col in unit.items()}
        batch["start_cycle"] = batch["start_cycle"] + shift
        batch["end_cycle"] = batch["end_cycle"] + shift
        if sched.unit_is_iteration:
            unit_index = np.repeat(k, per_unit)
            batch["run"] = unit_index // o.device_iterations
            batch["iteration"] = unit_index % o.device_iterations
        else:
            batch["run"] = np.repeat(k, per_unit)
        yield batch
