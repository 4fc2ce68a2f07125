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
latency and every IPU waits for the host's data loaders if they are slower than the rest of the
call (``schedule``); then device_iterations iterations follow. A run is built from *parts*,
each a sequence of supersteps timed once and repeated: the host call's superstep; for training,
one iteration, repeated device_iterations times; for pipelined inference, the fill, one superstep
of the steady state (every stage busy, one micro-batch further on per repeat), then the flush; for
sharded inference, one micro-batch's supersteps. Repeats differ only in their time and iteration
index, and runs repeat identically, so the trace is replayed from these templates with offsets, in
NumPy, in batches: it never sits in memory whole, whatever the number of iterations. (Inference
over stages sharing IPUs runs every micro-batch inside one superstep per stage: that part is built
whole, once per run.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from popvision_py.format import schema as S
from popvision_py.format.schema import PASSES, PHASES

from engine.compiler import Compiled, cost_model

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


def _numpy_dtype(arrow: pa.DataType) -> np.dtype:
    """The NumPy dtype of a boolean or numeric Arrow type (not ``to_pandas_dtype``, which imports pandas
    on pyarrow 15: 0.2-0.4 s the emulator does without)."""
    kind = ("b" if pa.types.is_boolean(arrow) else "i" if pa.types.is_signed_integer(arrow)
            else "u" if pa.types.is_unsigned_integer(arrow) else "f" if pa.types.is_floating(arrow) else None)
    if kind is None:
        raise TypeError(f"{arrow} is not a boolean or numeric Arrow type")
    return np.dtype(bool) if kind == "b" else np.dtype(f"{kind}{arrow.bit_width // 8}")


# The trace's columns in the schema's types (pass and phase: their dictionary indices into PASSES and PHASES).
TRACE_DTYPES = {c.name: _numpy_dtype(c.type.index_type if pa.types.is_dictionary(c.type) else c.type)
                for c in S.TABLES["trace"].columns}


@dataclass
class Superstep:
    """What each IPU runs in one superstep: ipu -> [(segment key, micro-batch, iteration)]."""

    work: dict[int, list[tuple[object, int, int]]]
    iteration: int


Rows = dict[str, np.ndarray]  # the trace's columns but "run", in the schema's dtypes


@dataclass
class Part:
    """A sequence of supersteps timed once and run ``repeats`` times back to back; repeat k adds k
    to the iteration of every row (one iteration, or one micro-batch of inference, further on)."""

    rows: list[Rows]  # per IPU: rows from the part's start, sorted by start
    cycles: int  # one repeat
    repeats: int
    supersteps: int  # one repeat


@dataclass
class Schedule:
    """One run (host call) as parts (see the module docstring); runs repeat identically, ``units`` times."""

    parts: list[Part]
    units: int  # runs
    busy_cycles: np.ndarray  # (ipus,) busy cycles per run (not idle, not the superstep syncs)
    input_wait_cycles: int = 0  # per run: what the IPUs wait for the host's data loaders
    host_input_cycles: int = 0  # per run: what the data loaders take to prepare the call's samples

    @property
    def unit_cycles(self) -> int:
        """Cycles of one run."""
        return sum(p.cycles * p.repeats for p in self.parts)

    @property
    def total_cycles(self) -> int:
        return self.unit_cycles * self.units

    @property
    def supersteps(self) -> int:
        """Supersteps of one run."""
        return sum(p.supersteps * p.repeats for p in self.parts)

    @property
    def rows_per_unit(self) -> int:
        return sum(p.repeats * len(r["step"]) for p in self.parts for r in p.rows)


def build_supersteps(compiled: Compiled) -> list[tuple[list[Superstep], int]]:
    """The supersteps of one run as parts: (supersteps, repeats), see ``Part``."""
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
            # The pipeline is as deep as its IPUs: consecutive stages on one IPU run one after another
            # in its superstep, forwards in stage order, then backwards in reverse.
            depth = plan.pipeline_depth
            rank = {s.index: plan.pipeline_rank(s) for s in stages}
            for t in range(m_count + 2 * depth - 2):
                work: dict[int, list] = {}
                for s in stages:
                    f = t - rank[s.index]
                    if 0 <= f < m_count:
                        work.setdefault(s.ipu, []).extend(_with_load(loads, s.ipu, (s.index, "forward"), f, 0))
                for s in reversed(stages):
                    b = t - (2 * depth - 2 - rank[s.index])
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
        # A host call runs device_iterations identical iterations: one is the part repeated.
        parts = [(steps, o.device_iterations)]
    else:
        m_count = o.device_iterations
        if plan.pipelined:
            # Superstep t runs stage s on micro-batch t - s: the fill (t < n - 1), the steady state
            # (every stage busy; superstep n - 1 repeated, one micro-batch further on each time),
            # the flush (t >= device iterations). Device iterations >= n (checked by the plan).
            rank = {s.index: plan.pipeline_rank(s) for s in stages}
            n = plan.pipeline_depth

            def superstep(t: int) -> Superstep:
                work: dict[int, list] = {}
                for s in stages:
                    f = t - rank[s.index]
                    if 0 <= f < m_count:
                        work.setdefault(s.ipu, []).extend(_with_load(loads, s.ipu, (s.index, "forward"), 0, f))
                return Superstep(work, min(t, m_count - 1))

            parts = [([superstep(t) for t in range(n - 1)], 1), ([superstep(n - 1)], m_count - n + 1),
                     ([superstep(t) for t in range(m_count, m_count + n - 1)], 1)]
        elif plan.strategy == "sharded":
            # One micro-batch's pass through the stages, repeated for each micro-batch.
            parts = [([Superstep({s.ipu: _with_load(loads, s.ipu, (s.index, "forward"), 0, 0)}, 0) for s in stages],
                      m_count)]
        else:
            for s in stages:
                work = _phase_load(loads, s.ipu, (s.index, "forward"))
                work += [((s.index, "forward"), 0, m) for m in range(m_count)]
                steps.append(Superstep({s.ipu: work}, 0))
            parts = [(steps, 1)]
    # Each host call starts with the host's own latency on the IPUs the host feeds, then every IPU
    # waits for the data loaders if they are slower than the call (``schedule`` sets that wait).
    if any("host_call" in prog.segments for prog in compiled.programs):
        host = {prog.ipu: [("host_call", -1, 0)] * ("host_call" in prog.segments) + [("input_wait", -1, 0)]
                for prog in compiled.programs}
        parts.insert(0, ([Superstep(host, 0)], 1))
    return [(steps, repeats) for steps, repeats in parts if steps and repeats > 0]


def _with_load(loads: set, ipu: int, key: tuple[int, str], micro_batch: int, iteration: int) -> list:
    """The pass, preceded by its weight load when the weights live off chip."""
    return _phase_load(loads, ipu, key, iteration) + [(key, micro_batch, iteration)]


def _phase_load(loads: set, ipu: int, key: tuple[int, str], iteration: int = 0) -> list:
    """The segment streaming the pass's weights in, if it has one."""
    return [((key[0], f"{key[1]}/load"), -1, iteration)] if (ipu, key) in loads else []


def schedule(compiled: Compiled) -> Schedule:
    """Time each part of one run and build the trace rows of its supersteps.

    The wait for the host's data loaders depends on the rest of the call: every part is timed with
    no wait, the wait follows from their cycles (``CostModel.input_wait_cycles``), and the host
    call's part is timed again with it (``set_input_wait`` writes it into the programs)."""
    set_input_wait(compiled, 0)
    segs = _segment_table(compiled)
    supersteps = build_supersteps(compiled)
    timed = [_time(compiled, segs, steps) for steps, _ in supersteps]
    call = sum(cycles * repeats for (_, cycles, _), (_, repeats) in zip(timed, supersteps))
    costs = cost_model(compiled.plan)
    host_cycles = costs.host_input_cycles(compiled.plan.training)
    host = next((k for k, (steps, _) in enumerate(supersteps)
                 if any(key == "input_wait" for step in steps for items in step.work.values() for key, _, _ in items)),
                None)
    training = compiled.plan.training
    wait = (costs.input_wait_cycles(host_cycles, call) + costs.epoch_start_cycles(training, call)
            if host is not None else 0)
    if wait:
        set_input_wait(compiled, wait)
        timed[host] = _time(compiled, _segment_table(compiled), supersteps[host][0])
    parts, busy = [], np.zeros(compiled.plan.num_ipus, dtype=np.int64)
    for (rows, cycles, part_busy), (steps, repeats) in zip(timed, supersteps):
        parts.append(Part(rows, cycles, repeats, len(steps)))
        busy += repeats * part_busy
    return Schedule(parts, compiled.plan.options.runs, busy, input_wait_cycles=wait, host_input_cycles=host_cycles)


def set_input_wait(compiled: Compiled, cycles: int) -> None:
    """Give every IPU's input-wait step (``host/input_wait``) ``cycles``."""
    for prog in compiled.programs:
        if "input_wait" in prog.segments:
            first, _ = prog.segments["input_wait"]
            prog.cycles[first] = int(cycles)


@dataclass
class Segment:
    """A run of program steps executed back to back: their trace columns, timed from the segment's start."""

    ids: np.ndarray
    cycles: np.ndarray
    offsets: np.ndarray  # each step's start within the segment
    duration: int
    stage: np.ndarray
    pass_: np.ndarray  # indices into PASSES
    phase: np.ndarray  # indices into PHASES


def _segment_table(compiled: Compiled) -> list[dict[object, Segment]]:
    """Per IPU: segment key -> Segment."""
    segs = []
    for prog in compiled.programs:
        cycles = np.asarray(prog.cycles, dtype=np.int64)
        stage = np.asarray(prog.stage, dtype=np.int32)
        pass_ = np.array([PASS_INDEX[p] for p in prog.pass_], dtype=np.int32)
        phase = np.array([PHASE_INDEX[PHASE_OF_TYPE[t]] for t in prog.type], dtype=np.int32)
        table = {}
        keys = dict(prog.segments)
        keys["update"] = prog.update_segment
        for key, (first, end) in keys.items():
            c = cycles[first:end]
            offsets = np.concatenate(([0], np.cumsum(c)[:-1])) if len(c) else c
            table[key] = Segment(np.arange(first, end, dtype=np.int64), c, offsets, int(c.sum()), stage[first:end],
                                 pass_[first:end], phase[first:end])
        segs.append(table)
    return segs


def _time(compiled: Compiled, segs: list[dict], supersteps: list[Superstep]) -> tuple[list[Rows], int, np.ndarray]:
    """Rows of a sequence of supersteps starting at cycle 0, per IPU sorted by start; their length
    in cycles; busy cycles per IPU."""
    ipus = compiled.plan.num_ipus
    sync = np.array([prog.cycles[prog.sync_step] for prog in compiled.programs], dtype=np.int64)
    count = len(supersteps)
    busy = np.zeros((count, ipus), dtype=np.int64)
    for t, step in enumerate(supersteps):
        for ipu, items in step.work.items():
            busy[t, ipu] = sum(segs[ipu][key].duration for key, _, _ in items)
    sync_len = int(sync.max())
    length = busy.max(axis=1) + sync_len
    start = np.concatenate(([0], np.cumsum(length)[:-1])).astype(np.int64)

    # Segment executions, grouped by (ipu, segment) so each group broadcasts over its steps.
    groups: dict[tuple[int, object], list[tuple[int, int, int]]] = {}
    for t, step in enumerate(supersteps):
        for ipu, items in step.work.items():
            offset = 0
            for key, micro_batch, iteration in items:
                groups.setdefault((ipu, key), []).append((int(start[t]) + offset, micro_batch, iteration))
                offset += segs[ipu][key].duration
    parts: list[Rows] = []
    for (ipu, key), execs in groups.items():
        seg = segs[ipu][key]
        n = len(seg.ids)
        if not n or not seg.duration:  # a segment that takes no time (no input wait) leaves no rows
            continue
        e = np.asarray(execs, dtype=np.int64)
        starts = (e[:, 0:1] + seg.offsets[None, :]).ravel()
        k = len(execs)
        parts.append({
            "iteration": np.repeat(e[:, 2], n),
            "micro_batch": np.repeat(e[:, 1], n),
            "ipu": np.full(k * n, ipu),
            "stage": np.tile(seg.stage, k),
            "pass": np.tile(seg.pass_, k),
            "step": np.tile(seg.ids, k),
            "phase": np.tile(seg.phase, k),
            "start_cycle": starts,
            "end_cycle": starts + np.tile(seg.cycles, k),
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
    rows = {k: v[order].astype(TRACE_DTYPES[k]) for k, v in rows.items()}
    bounds = np.searchsorted(rows["ipu"], np.arange(ipus + 1))
    per_ipu = [{k: v[bounds[i]:bounds[i + 1]] for k, v in rows.items()} for i in range(ipus)]
    return per_ipu, int(length.sum()), busy.sum(axis=0)


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


def trace_batches(sched: Schedule, max_rows: int = 1 << 20) -> Iterator[Rows]:
    """The whole trace, in batches of at most about ``max_rows`` rows (or one repeat of a part, if
    larger), in the table's order: run by run, IPU by IPU, by start. A batch is an IPU's rows of a
    part repeated for a chunk of repeats with time and iteration offsets: the columns that do not
    change are tiled once and shared by every batch."""
    ipus = len(sched.parts[0].rows) if sched.parts else 0
    offsets = np.cumsum([0] + [p.cycles * p.repeats for p in sched.parts])
    tiled: dict[tuple[int, int], tuple[int, dict[str, np.ndarray]]] = {}
    for run in range(sched.units):
        base = run * sched.unit_cycles
        for ipu in range(ipus):
            for index, part in enumerate(sched.parts):
                rows = part.rows[ipu]
                n = len(rows["step"])
                if not n:
                    continue
                if (ipu, index) not in tiled:
                    chunk = max(1, min(part.repeats, max_rows // n))
                    tiled[(ipu, index)] = chunk, {k: np.tile(v, chunk) for k, v in rows.items()
                                                  if k not in ("start_cycle", "end_cycle", "iteration")}
                chunk, constant = tiled[(ipu, index)]
                for first in range(0, part.repeats, chunk):
                    k = np.arange(first, min(first + chunk, part.repeats), dtype=np.int64)
                    size = len(k) * n
                    batch = {name: col[:size] for name, col in constant.items()}
                    shift = (base + offsets[index] + k * part.cycles)[:, None]
                    batch["start_cycle"] = (rows["start_cycle"][None, :] + shift).ravel()
                    batch["end_cycle"] = (rows["end_cycle"][None, :] + shift).ravel()
                    batch["iteration"] = (rows["iteration"][None, :] + k.astype(np.int32)[:, None]).ravel()
                    batch["run"] = np.full(size, run, dtype=np.int32)
                    yield batch


def templates(sched: Schedule) -> Iterator[tuple[Rows, int]]:
    """Each IPU's rows of one repeat of each part, with how often they occur in the trace (the part's
    repeats x the runs). Repeats differ only in their time and iteration, so any sum over the
    trace that depends on neither (cycles by phase, rows by program step) is these rows' sum
    times that count: what the run's summary takes, without building the trace again."""
    for part in sched.parts:
        for rows in part.rows:
            if len(rows["step"]):
                yield rows, part.repeats * sched.units


def span(sched: Schedule) -> tuple[int, int]:
    """The trace's first start and last end cycle, as ``trace_batches`` writes them (0, 0 if it is empty)."""
    offsets = np.cumsum([0] + [p.cycles * p.repeats for p in sched.parts])
    starts, ends = [], []
    last_run = (sched.units - 1) * sched.unit_cycles
    for index, part in enumerate(sched.parts):
        for rows in part.rows:
            if len(rows["step"]):
                starts.append(int(offsets[index]) + int(rows["start_cycle"].min()))
                ends.append(last_run + int(offsets[index]) + (part.repeats - 1) * part.cycles
                            + int(rows["end_cycle"].max()))
    return (min(starts), max(ends)) if starts and sched.units else (0, 0)
