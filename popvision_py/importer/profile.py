"""The ranks' rows as a profile.pop: the same tables the emulator writes, in PyTorch's terms.

- A rank is an IPU of the profile (the ``ipu`` column), with one "tile" (the rank has no tiles), and
  time is in cycles of a 1 GHz clock: one cycle is one nanosecond (``target.clock_hz`` = 1e9).
- A pipeline stage is a stage (``PP:{stage}...`` names it; GPipe and 1F1B run one stage per rank, stage
  r on rank r); without a pipeline (DDP, FSDP) each rank is a stage of its own, holding the model.
- ``ProfilerStep#N`` is an iteration (one optimiser step), a micro-batch a micro-batch; forward and
  backward passes (full, input and weight gradients: the last two named in the step) their passes;
  the optimiser's step the update.
- Each row of a rank's time line (``timeline.rank_rows``) that is not idle is a program step of its
  own, so a step's ``cycles`` are exactly its row's; a transfer wholly hidden behind compute is a
  step of 0 cycles, its whole time in its ``exchanges`` row.
- Memory over time is ``[memory]``'s ``Total Allocated``: ``liveness`` holds the most allocated during
  each step; ``tile_memory`` splits each rank's peak into what stayed allocated all along (as
  ``weights``: parameters, gradients and optimiser state are what a training loop keeps) and the
  rest (as ``activations``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

import pyarrow as pa

from popvision_py.format import ProfileWriter
from popvision_py.format.schema import SCHEMA_VERSION
from popvision_py.format.values import arrow
from popvision_py.importer.read import KIND, RankTrace, TraceError, merge_intervals
from popvision_py.importer.timeline import LABEL, PASS_NAME, Rows, is_collective, peer_ready, rank_rows, unique_first
from popvision_py.version import __version__

CLOCK_HZ = 1e9  # one cycle is one nanosecond
MAX_CYCLES = 2**53 - 1  # the format's largest cycle count
SOURCE = "pytorch-profiler"
TABLES = ("trace", "programs", "exchanges", "liveness", "tile_cycles", "tile_memory")  # written rank by rank


@dataclasses.dataclass
class RecognisedRun:
    """What the import recognised of the run."""

    schedule: str
    stage_rank: dict[int, int]
    micro_batches: int
    iterations: int
    not_inferred: list[str]


def window(traces: list[RankTrace]) -> tuple[int, int]:
    """The time the profile covers: the profiler steps (``ProfilerStep#N``) of every rank, else everything."""
    steps = [(t.start[t.kind == KIND["step"]], t.end[t.kind == KIND["step"]]) for t in traces]
    if all(len(s) for s, _ in steps):
        return int(min(s.min() for s, _ in steps)), int(max(e.max() for _, e in steps))
    lows = [x.min() for t in traces for x in (t.start, t.busy[:, 0] if len(t.busy) else t.start) if len(x)]
    highs = [x.max() for t in traces for x in (t.end, t.busy[:, 1] if len(t.busy) else t.end) if len(x)]
    if not lows:
        return 0, 0
    return int(min(lows)), int(max(highs))


def layout(traces: list[RankTrace]) -> RecognisedRun:
    """The schedule, the stage of each rank, micro-batches and iterations, from the annotations."""
    kinds = np.concatenate([t.kind for t in traces]) if traces else np.zeros(0, np.int8)
    names = {n for t in traces for n in t.names}
    pp = any(n.startswith("PP:") for n in names)
    gpipe = any(n.startswith("Forward ") for n in names)
    chunks = any(n.endswith("_one_chunk") for n in names)
    not_inferred = []
    stage_rank: dict[int, int] = {}
    if pp:
        schedule = "multi-stage pipeline (PP: actions)"
        for t in traces:
            for s in np.unique(t.stage[(t.stage >= 0)]):
                stage_rank.setdefault(int(s), t.rank)
    elif gpipe or chunks:
        schedule = "GPipe" if gpipe else "1F1B"
        stage_rank = {t.rank: t.rank for t in traces}
        not_inferred.append("the stage of each rank: a one-stage-per-rank schedule names no stage, so stage r "
                            "is taken to run on rank r")
    else:
        schedule = "data parallel" if any(k == KIND["comm_call"] for k in kinds) else "single process"
        stage_rank = {t.rank: t.rank for t in traces}
    if not chunks and not gpipe and not pp:
        not_inferred.append("micro-batches: the trace has no pipeline schedule's annotations")
    if chunks and not gpipe and not pp:
        not_inferred.append("which micro-batch a forward or backward is: 1F1B names none; the k-th "
                            "forward_one_chunk (backward_one_chunk) of a step is taken as micro-batch k")
    micro = max((int(t.micro_batch[np.isin(t.kind, [KIND["forward"], KIND["backward"], KIND["backward_input"],
                                                    KIND["backward_weight"]])].max(initial=-1)) for t in traces),
                default=-1) + 1
    iterations = max((int((t.kind == KIND["step"]).sum()) for t in traces), default=0)
    return RecognisedRun(schedule, stage_rank, max(micro, 1), max(iterations, 1), not_inferred)


def _chunk_micro_batches(trace: RankTrace) -> None:
    """1F1B with stack: the k-th forward (backward) chunk of each profiler step is micro-batch k."""
    chunk = (trace.name >= 0) & np.isin(trace.kind, [KIND["forward"], KIND["backward"]]) & (trace.micro_batch < 0)
    named = np.array([n.endswith("_one_chunk") for n in trace.names], bool)
    chunk &= named[trace.name] if len(named) else False
    if not chunk.any():
        return
    steps = np.sort(trace.start[trace.kind == KIND["step"]])
    rows = np.flatnonzero(chunk)
    rows = rows[np.argsort(trace.start[rows], kind="stable")]
    step = np.searchsorted(steps, trace.start[rows], side="right") if len(steps) else np.zeros(len(rows), np.int64)
    for kind in (KIND["forward"], KIND["backward"]):
        pick = trace.kind[rows] == kind
        group = step[pick]
        # position within its step: a running count that restarts at each step
        n = np.arange(len(group))
        starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1] if len(group) else np.zeros(0, np.int64)
        first = np.repeat(starts, np.diff(np.r_[starts, len(group)]))
        trace.micro_batch[rows[pick]] = (n - first).astype(np.int32)


@dataclasses.dataclass
class ProfilePlan:
    """What every rank's tables share: the window, the run recognised, the stages' and ranks' numbering."""

    lo: int
    hi: int
    found: RecognisedRun
    stage_index: dict[int, int]
    single_stage: dict[int, int]
    ipu_of_rank: dict[int, int]
    ready: list[np.ndarray]


def plan_profile(traces: list[RankTrace], device_memory: int | None = None,
                 name: str | None = None) -> tuple[dict, dict, ProfilePlan]:
    """``(target, run, layout)`` for the ranks' traces (ranks in rank order, ipu = position); ``name``
    is the run's name in the reports (the traces' folder by default). Every check that refuses the
    traces is made here, before anything is written."""
    for t in traces:
        _chunk_micro_batches(t)
    check_numbers(traces)
    lo, hi = window(traces)
    if hi - lo > MAX_CYCLES:
        raise TraceError(f"The traces span {(hi - lo) / 86400e9:,.0f} days, more than a profile holds (104 days of "
                         f"nanoseconds): give the traces of one run, whose clocks agree.")
    found = layout(traces)
    ipu_of_rank = {t.rank: k for k, t in enumerate(traces)}
    stage_ids = sorted(found.stage_rank)
    stage_index = {s: k for k, s in enumerate(stage_ids)}
    single_stage = {t.rank: stage_index.get(found.stage_rank.get(t.rank, -99), -1) if found.schedule in (
        "GPipe", "1F1B", "data parallel", "single process") else -1 for t in traces}
    peaks = [_peak(t, lo, hi) for t in traces]
    capacity = int(device_memory or _device_memory(traces) or max(max(peaks, default=0), 1))
    stages = [{"stage": stage_index[s], "ipu": ipu_of_rank.get(found.stage_rank[s], 0),
               "blocks": [f"stage {s}" if found.schedule not in ("data parallel", "single process") else "model"]}
              for s in stage_ids]
    if not stages:
        stages = [{"stage": 0, "ipu": 0, "blocks": ["model"]}]
    gpu = any(t.gpu for t in traces)
    target = {"arch": "gpu" if gpu else "cpu", "num_ipus": len(traces), "tiles_per_ipu": 1,
              "bytes_per_tile": capacity, "clock_hz": CLOCK_HZ}
    world = next((t.world_size for t in traces if t.world_size), None)
    torch_version = next((t.torch_version for t in traces if t.torch_version), None)
    not_inferred = list(found.not_inferred)
    if torch_version is None:
        not_inferred.append("the torch version: the trace does not record it")
    if device_memory is None and _device_memory(traces) is None:
        not_inferred.append("the device's memory capacity: a CPU trace has none; memory is shown against the "
                            "largest rank's peak (give --device-memory to set it)")
    not_inferred.append("samples per micro-batch: the trace does not record the batch size (taken as 1)")
    strategy = "pipelined" if found.schedule not in ("data parallel", "single process") else "sharded"
    run = {
        "model": name or Path(os.path.commonpath([os.path.abspath(t.path) for t in traces])).name or "trace",
        "strategy": strategy, "mode": "training", "stages": stages,
        "micro_batch_size": 1, "gradient_accumulation": found.micro_batches,
        "device_iterations": found.iterations, "replication_factor": 1, "runs": 1,
        "source": SOURCE,
        "import": {"files": [t.path for t in traces], "ranks": [t.rank for t in traces], "world_size": world,
                   "torch_version": torch_version, "schedule": found.schedule, "clock": "1 cycle = 1 ns",
                   "events": int(sum(t.events for t in traces)), "not_inferred": not_inferred,
                   "hidden_comm_ns": []},
    }
    return target, run, ProfilePlan(lo, hi, found, stage_index, single_stage, ipu_of_rank, peer_ready(traces))


def rank_tables(t: RankTrace, ipu: int, plan: ProfilePlan) -> tuple[dict[str, dict[str, Any]], int]:
    """One rank's rows of every table (string columns as dictionary codes), and the nanoseconds its
    communication was hidden behind compute."""
    rows = rank_rows(t, (plan.lo, plan.hi), plan.ready[ipu])
    tables: dict[str, dict[str, Any]] = {}
    _rank_tables(t, ipu, rows, plan, tables)
    return tables, _hidden(t, rows)


def write_profile(path: str | os.PathLike[str], traces: list[RankTrace], device_memory: int | None = None,
                  name: str | None = None) -> dict:
    """Write the profile of the ranks' traces atomically, rank by rank: each rank's rows are cut and written,
    then dropped, so that what is held is the largest rank's, not every rank's. Returns the run."""
    target, run, plan = plan_profile(traces, device_memory, name)
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # only now: a bad trace leaves no folder behind
    generator = {"name": "popvision import", "version": __version__, "schema_version": SCHEMA_VERSION}
    with ProfileWriter(path, target=target, run=run, generator=generator) as writer:
        tables = {table: writer.table(table) for table in TABLES}
        for ipu, t in enumerate(traces):
            rows, hidden = rank_tables(t, ipu, plan)
            for table, columns in rows.items():
                tables[table].write(columns)
            run["import"]["hidden_comm_ns"].append(hidden)
        writer.set_run("import", run["import"])
    return run


def _hidden(t: RankTrace, rows: Rows) -> int:
    """Nanoseconds in which the rank computed while a transfer was under way: its communication hidden
    behind compute (overlapping transfers counted once)."""
    comm = np.isin(t.kind, [KIND["comm_call"], KIND["comm_flight"]])
    merged = merge_intervals(np.stack([t.start[comm], t.end[comm]], axis=1))
    computing = np.isin(rows.label, [LABEL["pass"], LABEL["update"], LABEL["busy"]])
    a, b = rows.start[computing], rows.end[computing]
    if not len(merged) or not len(a):
        return 0
    # rows are disjoint and sorted: the transfers' cover inside each compute row, by prefix sums
    covered = np.concatenate([[0], np.cumsum(merged[:, 1] - merged[:, 0])])
    return int((_cover_until(merged, covered, b) - _cover_until(merged, covered, a)).sum())


def _cover_until(merged: np.ndarray, covered: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Nanoseconds of the disjoint sorted intervals ``merged`` before each time in ``at``."""
    k = np.searchsorted(merged[:, 0], at, side="right")  # intervals starting at or before ``at``
    last = np.maximum(k - 1, 0)
    inside = np.where(k > 0, np.clip(at - merged[last, 0], 0, merged[last, 1] - merged[last, 0]), 0)
    return covered[last] * (k > 0) + inside


def _device_memory(traces: list[RankTrace]) -> int | None:
    """The GPU's memory from ``deviceProperties`` (``totalGlobalMem``), where the trace has it."""
    for t in traces:
        for device in t.header.get("deviceProperties") or []:
            if isinstance(device, dict) and isinstance(device.get("totalGlobalMem"), int):
                return int(device["totalGlobalMem"])
    return None


def category(codes: np.ndarray, words: list[str]) -> pa.DictionaryArray:
    """A string column as dictionary codes: ``words[codes]``, its dictionary in order of first appearance
    (as Arrow's dictionary_encode of the strings would make it), never a string per row."""
    codes = np.asarray(codes, np.int64)
    distinct = {w: k for k, w in enumerate(dict.fromkeys(words))}
    word_code = np.array([distinct[w] for w in words], np.int64) if words else np.zeros(0, np.int64)
    codes = word_code[codes] if len(codes) else codes
    first = np.full(len(distinct), len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))  # each code's first row
    used = np.flatnonzero(first < len(codes))
    order = used[np.argsort(first[used], kind="stable")]
    remap = np.zeros(len(distinct), np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    unique = list(distinct)
    return pa.DictionaryArray.from_arrays(arrow(remap[codes]), arrow([unique[k] for k in order.tolist()]))


PHASE_WORDS = ["idle", "exchange", "compute"]
PASS_WORDS = ["none", *sorted(set(PASS_NAME.values()))]
PASS_CODE = np.zeros(max(KIND.values()) + 2, np.int64)  # a span's kind + 1 -> its pass in PASS_WORDS
for _kind, _word in PASS_NAME.items():
    PASS_CODE[_kind + 1] = PASS_WORDS.index(_word)
TYPE_WORDS = ["compute_set", "global_exchange", "all_reduce"]


def _rank_tables(t: RankTrace, ipu: int, rows: Rows, plan: ProfilePlan, tables: dict[str, dict[str, Any]]) -> None:
    """One rank's rows of every table, into ``tables``."""
    lo, found = plan.lo, plan.found
    n = len(rows.start)
    label, span = rows.label.astype(np.int64), rows.span
    has = span >= 0
    sp = np.maximum(span, 0)
    idle = label == LABEL["idle"]
    live = ~idle
    exchange = np.isin(label, [LABEL["comm_call"], LABEL["pp_comm"], LABEL["comm_flight"]])
    kind = np.where(has, t.kind[sp], -1) if len(t.kind) else np.full(n, -1)
    # stage: the action's (PP:), through the profile's stage numbering; else the rank's own
    named = np.where(has, t.stage[sp], -1) if len(t.stage) else np.full(n, -1)
    stage = mapped(named, plan.stage_index)
    stage = np.where(idle, -1, np.where(stage < 0, plan.single_stage[t.rank], stage))
    micro = np.where(has & np.isin(label, [LABEL["pass"], LABEL["pp_comm"]]), t.micro_batch[sp], -1) \
        if len(t.micro_batch) else np.full(n, -1)
    micro = np.where(micro < found.micro_batches, micro, -1)
    # the pass (PASS_WORDS' code), by the span's kind, for pass and update rows only
    pass_ = np.where(np.isin(label, [LABEL["pass"], LABEL["update"]]), PASS_CODE[kind + 1], 0)
    steps = np.sort(t.start[t.kind == KIND["step"]])  # iteration: the profiler step a row starts in
    iteration = (np.clip(np.searchsorted(steps, rows.start, side="right") - 1, 0, found.iterations - 1)
                 if len(steps) else np.zeros(n, np.int64))
    step = np.full(n, -1, np.int64)
    step[live] = np.arange(int(live.sum()))  # every row that is not idle is a program step of its own
    tables["trace"] = {
        "run": np.zeros(n, np.int64), "iteration": iteration.astype(np.int64), "micro_batch": micro.astype(np.int64),
        "ipu": np.full(n, ipu, np.int64), "stage": stage.astype(np.int64), "pass": category(pass_, PASS_WORDS),
        "step": step, "phase": category(np.where(idle, 0, np.where(exchange, 1, 2)), PHASE_WORDS),
        "start_cycle": rows.start - lo, "end_cycle": rows.end - lo}
    # program steps: the live rows, then a step of 0 cycles for each transfer never exposed
    names = [*t.names, "operators"]  # busy rows (no span) are the thread's operators
    collective = np.array([is_collective(w) for w in t.names] + [False], bool)  # per distinct name
    name_id = np.where(has, t.name[sp], len(t.names)) if len(t.name) else np.full(n, len(t.names))
    transfers, new_names, new_types = _transfers(t, ipu, lo, step[live & has], span[live & has], int(live.sum()),
                                                 plan.ipu_of_rank)
    types = np.where(exchange, np.where(collective[name_id], 2, 1), 0)[live]
    cycles = np.concatenate([(rows.end - rows.start)[live], np.zeros(len(new_names), np.int64)])
    total = len(cycles)
    nbytes = np.zeros(total, np.int64)
    np.add.at(nbytes, transfers["step"], transfers["bytes"])
    tables["programs"] = {
        "ipu": np.full(total, ipu, np.int64), "step": np.arange(total),
        "type": category(np.concatenate([types, new_types]), TYPE_WORDS),
        "name": category(np.concatenate([name_id[live], new_names]), names),
        "op_id": np.full(total, -1, np.int64),
        "stage": np.concatenate([stage[live], np.full(len(new_names), -1)]).astype(np.int64),
        "pass": category(np.concatenate([pass_[live], np.zeros(len(new_names), np.int64)]), PASS_WORDS),
        "tiles": np.ones(total, np.int64), "bytes": nbytes, "cycles": cycles}
    tables["exchanges"] = transfers
    computing = np.flatnonzero(types == 0)  # each compute step on the rank's one tile
    tables["tile_cycles"] = {
        "ipu": np.full(len(computing), ipu, np.int64), "step": computing.astype(np.int64),
        "tile": np.zeros(len(computing), np.int64), "cycles": cycles[computing],
        "vertices": np.ones(len(computing), np.int64)}  # one kernel: one vertex
    _memory_tables(t, ipu, rows, plan, live, total, tables)


def _peak(t: RankTrace, lo: int, hi: int) -> int:
    """The rank's peak: the largest sample of the profiled window, or the level it began at (samples taken
    while the rank idled count too: they are allocations of its other threads)."""
    inside = (t.memory_ts >= lo) & (t.memory_ts < hi)
    return int(max(int(t.memory_bytes[inside].max(initial=0)),
                   int(_levels(t.memory_ts, t.memory_bytes, np.array([lo]), np.array([lo]))[0])))


def _memory_tables(t: RankTrace, ipu: int, rows: Rows, plan: ProfilePlan, live: np.ndarray, total: int,
                   tables: dict[str, dict[str, Any]]) -> None:
    """Each step's level (the most allocated while it ran, else what was allocated when it began), and
    the rank's peak split into what stayed allocated throughout and the rest."""
    last = rows.start[live][-1] if live.any() else plan.lo
    starts = np.concatenate([rows.start[live], np.full(total - int(live.sum()), last)])
    ends = np.concatenate([rows.end[live], starts[int(live.sum()):]])
    level = _levels(t.memory_ts, t.memory_bytes, starts, ends)
    peak = _peak(t, plan.lo, plan.hi)
    baseline = min(int(level.min()) if len(level) else 0, peak)
    tables["liveness"] = {
        "ipu": np.full(total, ipu, np.int64), "step": np.arange(total),
        "always_live_bytes": np.full(total, baseline, np.int64),
        "not_always_live_bytes": (level - baseline).astype(np.int64),
        "worst_tile": np.zeros(total, np.int64), "worst_tile_bytes": level.astype(np.int64)}
    tables["tile_memory"] = {
        "ipu": np.full(2, ipu, np.int64), "tile": np.zeros(2, np.int64),
        "category": np.array(["weights", "activations"], object), "always_live": np.array([True, False]),
        "bytes": np.array([baseline, peak - baseline], np.int64)}


def _transfers(t: RankTrace, ipu: int, lo: int, row_steps: np.ndarray, row_spans: np.ndarray, steps_here: int,
               ipu_of_rank: dict[int, int]) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """The rank's ``exchanges`` rows: one per communication span, on the first program step where it is
    exposed, or on a new step of 0 cycles (wholly hidden). A transfer in flight (``gloo:`` / ``nccl:``)
    carries the bytes and the peer of the call that started it (the latest call before it), and that
    call then carries none, so no byte is counted twice. Returns the rows and the new steps' names and types."""
    kind = t.kind
    comm = np.flatnonzero(np.isin(kind, [KIND["comm_call"], KIND["comm_flight"]]) & (t.end > lo))
    flight = kind[comm] == KIND["comm_flight"]
    calls, flights = comm[~flight], comm[flight]
    peer = t.peer.astype(np.int64).copy()
    nbytes = t.nbytes.astype(np.int64).copy()
    if len(flights):
        order = np.argsort(t.start[calls], kind="stable")
        k = np.searchsorted(t.start[calls][order], t.start[flights], side="right") - 1
        parent = np.where(k >= 0, calls[order][np.maximum(k, 0)] if len(calls) else -1, -1)
        peer[flights] = np.where(parent >= 0, t.peer[np.maximum(parent, 0)] if len(calls) else -1, -1)
        nbytes[calls] = 0
    sends = np.array(["send" in n for n in t.names] + [False], bool)[t.name[comm]]
    collective = np.array([is_collective(n) for n in t.names] + [False], bool)[t.name[comm]]
    other = mapped(peer[comm], ipu_of_rank)
    other = np.where(other >= 0, other, ipu)  # a peer outside the traces given: the rank itself
    # the first exposed step of each span, else a new 0-cycle step after the rank's others
    seen, first = unique_first(row_spans)
    where = np.searchsorted(seen, comm)
    exposed = ((where < len(seen)) & (seen[np.minimum(where, len(seen) - 1)] == comm) if len(seen)
               else np.zeros(len(comm), bool))
    at = np.where(exposed, row_steps[first[np.minimum(where, len(seen) - 1)]] if len(seen) else -1, -1)
    hidden = ~exposed
    at[hidden] = steps_here + np.arange(int(hidden.sum()))
    rows = {
        "ipu": np.full(len(comm), ipu, np.int64), "step": at.astype(np.int64),
        "kind": category(np.where(collective, 0, 1), ["all_reduce", "inter_ipu"]),
        "src_ipu": np.where(sends, ipu, other), "dst_ipu": np.where(sends, other, ipu),
        "bytes": nbytes[comm], "cycles": (t.end[comm] - t.start[comm]).astype(np.int64),
    }
    new_names = t.name[comm[hidden]].astype(np.int64)
    new_types = np.where(collective[hidden], 2, 1)
    return rows, new_names, new_types


def mapped(values: np.ndarray, mapping: dict[int, int]) -> np.ndarray:
    """``mapping[v]`` for each of ``values``, -1 for a value it lacks: by its sorted keys, never by an array
    as long as the largest key (a trace's stage or rank numbers are its own)."""
    values = np.asarray(values, np.int64)
    if not mapping:
        return np.full(len(values), -1, np.int64)
    keys = np.asarray(sorted(mapping), np.int64)
    to = np.asarray([mapping[k] for k in keys.tolist()], np.int64)
    at = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    return np.where(keys[at] == values, to[at], -1)


def check_numbers(traces: list[RankTrace]) -> None:
    """Micro-batch and stage numbers bounded by what the traces hold: a schedule numbers a rank's
    micro-batches from 0, so a rank's largest is below its passes; and a pipeline of W ranks runs at most
    W stages for each stage a rank holds. A number beyond is not a real run's (and would size the profile)."""
    world = max([len(traces)] + [t.world_size for t in traces if t.world_size])
    for t in traces:
        passes = np.isin(t.kind, [KIND["forward"], KIND["backward"], KIND["backward_input"], KIND["backward_weight"]])
        largest = int(t.micro_batch[passes].max(initial=-1))
        if largest >= int(passes.sum()):
            raise TraceError(f"{t.path} names micro-batch {largest:,} but holds {int(passes.sum()):,} passes: a "
                             f"schedule numbers micro-batches from 0, so it is not a real run's.")
        stages = np.unique(t.stage[t.stage >= 0])
        if len(stages) and int(stages[-1]) >= world * len(stages):
            raise TraceError(f"{t.path} names stage {int(stages[-1]):,} but its ranks ({world:,}) hold at most "
                             f"{world * len(stages):,} stages of {len(stages)} per rank: it is not a real run's.")


def _levels(ts: np.ndarray, total: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [start, end): the most ``total`` sampled inside it, or the last sample before it (0 if none)."""
    if len(starts) == 0:
        return np.zeros(0, np.int64)
    if len(ts) == 0:
        return np.zeros(len(starts), np.int64)
    order = np.argsort(ts, kind="stable")
    ts, total = ts[order], total[order]
    before = np.searchsorted(ts, starts, side="left") - 1
    level = np.where(before >= 0, total[np.maximum(before, 0)], 0)
    first = np.searchsorted(ts, starts, side="left")
    last = np.searchsorted(ts, ends, side="left")
    inside = last > first
    if inside.any():
        # the running maximum within each [first, last): reduceat over the samples' segments
        idx = np.flatnonzero(inside)
        level[idx] = np.maximum(level[idx], _segment_max(total, first[idx], last[idx]))
    return level.astype(np.int64)


def _segment_max(values: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """max(values[first[i]:last[i]]) for non-empty, possibly overlapping segments: a sparse table."""
    n = len(values)
    table = [values]
    width = 1
    while width * 2 <= n:
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    length = last - first
    level = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(len(first), values.dtype)
    for k in np.unique(level):
        pick = level == k
        row = table[k]
        out[pick] = np.maximum(row[first[pick]], row[last[pick] - (1 << k)])
    return out
