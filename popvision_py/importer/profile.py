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
- Memory over time is ``[memory]``'s ``Total Allocated`` (PyTorch before 1.10: the running total of its
  ``Bytes`` changes, ``memory_changes``): ``liveness`` holds the most allocated during
  each step; ``tile_memory`` splits each rank's peak into what stayed allocated all along (as
  ``weights``: parameters, gradients and optimiser state are what a training loop keeps) and the
  rest (as ``activations``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa


from popvision_py.format import ProfileWriter
from popvision_py.format.arrays import to_arrow
from popvision_py.format.schema import KERNEL_KINDS, SCHEMA_VERSION
from popvision_py.importer import forked, plain_steps
from popvision_py.importer.parts import ANNOTATION_KINDS, any_of, columns_bytes, release_memory
from popvision_py.importer.kernels import KERNEL_COLUMN
from popvision_py.importer.read import KIND, RankTrace, TraceError
from popvision_py.importer.spill_files import blocks, release
from popvision_py.importer.tables import Coded, Lookup, Vocabulary, coded, rank_tables, sorted_memory
from popvision_py.importer.timeline import WINDOW_BUSY_ROWS, peer_ready, rank_rows_by_window
from popvision_py.version import __version__

PROFILER_OPTIONS = ("record_shapes", "profile_memory", "with_stack")  # flags Kineto writes in the header

CLOCK_HZ = 1e9  # one cycle is one nanosecond
MAX_CYCLES = 2**53 - 1  # the format's largest cycle count
SOURCE = "pytorch-profiler"
TABLES = ("trace", "programs", "exchanges", "liveness", "tile_cycles", "tile_memory")  # written rank by rank
# Rows of each row group of the import's tables, and handed to a table's writer at a time: the writer holds a
# few row groups of each of six tables (their rows, a copy as they are joined, two waiting to be encoded), so
# they are smaller than the format's 2^20. Each halving costs bytes (a 1 GB gpipe import's profile: 6.4 MB at
# 2^20 rows, 7.1 MB at 2^18, 8.6 MB at 2^17) and saves about 15 MB of the write's peak at 1 GB.
ROW_GROUP_ROWS = 1 << 18
SLICE_ROWS = ROW_GROUP_ROWS
# The kernels table's rows are the widest (thirteen columns, six of them named): its row groups are half the others',
# so that what its writer holds is nearer theirs (a 10 GB GPU import's write peaked at 351 MiB with 2^18 rows, 290 at
# 2^17: under the read's peak).
KERNEL_GROUP_ROWS = ROW_GROUP_ROWS >> 1


@dataclasses.dataclass
class RecognisedRun:
    """What the import recognised of the run."""

    schedule: str
    stage_rank: dict[int, int]
    micro_batches: int
    iterations: int
    not_inferred: list[str]


def each(traces: list[RankTrace]) -> Iterator[RankTrace]:
    """The traces one at a time, each one's spilled pages handed back once the next is asked for."""
    for t in traces:
        yield t
        release(t)


def window(traces: list[RankTrace]) -> tuple[int, int]:
    """The time the profile covers: the profiler steps (``ProfilerStep#N``) of every rank, else everything; and
    every GPU kernel of the traces (a GPU runs a step's kernels after the CPU launched them, past its end)."""
    steps = [(t.start[t.kind == KIND["step"]], t.end[t.kind == KIND["step"]]) for t in each(traces)]
    gpu = [gpu_span(t) for t in each(traces)]
    if all(len(s) for s, _ in steps):
        lo, hi = int(min(s.min() for s, _ in steps)), int(max(e.max() for _, e in steps))
        # and the kernels, and the runtime calls that launched them (a step's first launch may come before it)
        lo = min([lo] + [k[0] for k, _ in gpu if k] + [launch[0] for _, launch in gpu if launch])
        hi = max([hi] + [k[1] for k, _ in gpu if k])
        return lo, hi
    lows = [x.min() for t in each(traces) for x in (t.start, t.busy[:, 0] if len(t.busy) else t.start) if len(x)]
    highs = [x.max() for t in each(traces) for x in (t.end, t.busy[:, 1] if len(t.busy) else t.end) if len(x)]
    lows += [span[0] for spans in gpu for span in spans if span]
    highs += [span[1] for spans in gpu for span in spans if span]
    if not lows:
        return 0, 0
    return int(min(lows)), int(max(highs))


def gpu_span(t: RankTrace) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """The first start and last end of the rank's kernels, and of the runtime calls that launched them (None where
    there are none), read a block of kernels at a time: without profiler steps, the profile begins at the first
    launch, so that each kernel's launch lies in it."""
    kernels: list[tuple[int, int]] = []
    launches: list[tuple[int, int]] = []
    at = KERNEL_COLUMN["launch_start"]
    for block in blocks(t.kernels):
        kernels.append((int(block[:, 0].min()), int(block[:, 1].max())))
        launched = block[block[:, at] >= 0]
        if len(launched):
            launches.append((int(launched[:, at].min()), int(launched[:, at + 1].max())))

    def span(found: list[tuple[int, int]]) -> tuple[int, int] | None:
        return (min(a for a, _ in found), max(b for _, b in found)) if found else None

    return span(kernels), span(launches)


def layout(traces: list[RankTrace]) -> RecognisedRun:
    """The schedule, the stage of each rank, micro-batches and iterations, from the annotations."""
    # the names of the spans that may be passes (an annotation of another name, "Forward pass" say, names none)
    names = {t.names[c] for t in each(traces) for c in np.unique(t.name[~any_of(t.kind, ANNOTATION_KINDS)]).tolist()}
    pp = any(n.startswith("PP:") for n in names)
    gpipe = any(n.startswith("Forward ") for n in names)
    chunks = any(n.endswith("_one_chunk") for n in names)
    not_inferred = []
    stage_rank: dict[int, int] = {}
    if pp:
        schedule = "multi-stage pipeline (PP: actions)"
        for t in each(traces):
            for s in np.unique(t.stage[(t.stage >= 0)]):
                stage_rank.setdefault(int(s), t.rank)
    elif gpipe or chunks:
        schedule = "GPipe" if gpipe else "1F1B"
        stage_rank = {t.rank: t.rank for t in traces}
        not_inferred.append("the stage of each rank: a one-stage-per-rank schedule names no stage, so stage r "
                            "is taken to run on rank r")
    else:
        # one rank's trace of a larger world is a data-parallel job too, whether or not it called a collective
        world = max([t.world_size or 1 for t in traces] + [len(traces)])
        schedule = "data parallel" if world > 1 or any((t.kind == KIND["comm_call"]).any() for t in each(traces)) \
            else "single process"
        stage_rank = {t.rank: t.rank for t in traces}
    if not chunks and not gpipe and not pp:
        not_inferred.append("micro-batches: the trace has no pipeline schedule's annotations")
    if chunks and not gpipe and not pp:
        not_inferred.append("which micro-batch a forward or backward is: 1F1B names none; the k-th "
                            "forward_one_chunk (backward_one_chunk) of a step is taken as micro-batch k")
    micro = max((int(t.micro_batch[any_of(t.kind, [KIND["forward"], KIND["backward"], KIND["backward_input"],
                                                    KIND["backward_weight"]])].max(initial=-1)) for t in each(traces)),
                default=-1) + 1
    iterations = max((int((t.kind == KIND["step"]).sum()) for t in each(traces)), default=0)
    stepless = [t.rank for t in each(traces) if not (t.kind == KIND["step"]).any()]
    if stepless:  # ``window`` then spans every event kept: the whole trace is one step
        who = f"rank(s) {', '.join(str(r) for r in stepless)} hold" if len(stepless) < len(traces) else \
            "the trace holds" if len(traces) == 1 else "the traces hold"
        not_inferred.append(f"the profiler steps: {who} no ProfilerStep#N (recorded without a schedule, or without "
                            f"prof.step()), so the whole trace, from the first event the import keeps to the last, "
                            f"is one step")
    return RecognisedRun(schedule, stage_rank, max(micro, 1), max(iterations, 1), not_inferred)


def _chunk_micro_batches(trace: RankTrace) -> None:
    """1F1B with stack: the k-th forward (backward) chunk of each profiler step is micro-batch k."""
    chunk = (trace.name >= 0) & any_of(trace.kind, [KIND["forward"], KIND["backward"]]) & (trace.micro_batch < 0)
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

    @functools.cached_property
    def stage_lookup(self) -> Lookup:
        """``stage_index`` for whole columns, made once for every rank."""
        return Lookup(self.stage_index)

    @functools.cached_property
    def ipu_lookup(self) -> Lookup:
        """``ipu_of_rank`` for whole columns, made once for every rank."""
        return Lookup(self.ipu_of_rank)


def plan_profile(traces: list[RankTrace], device_memory: int | None = None,
                 name: str | None = None) -> tuple[dict, dict, ProfilePlan]:
    """``(target, run, layout)`` for the ranks' traces (ranks in rank order, ipu = position); ``name``
    is the run's name in the reports (the traces' folder by default). Every check that refuses the
    traces is made here, before anything is written."""
    for t in each(traces):
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
    peaks = [_peak(t, lo, hi) for t in each(traces)]
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
        why = "the trace's deviceProperties do not state it" if any(t.gpu for t in traces) else "a CPU trace has none"
        not_inferred.append(f"the device's memory capacity: {why}; memory is shown against the "
                            "largest rank's peak (give --device-memory to set it)")
    memory_recorded = any(len(t.memory_ts) for t in traces)
    if not memory_recorded:
        not_inferred.append("memory: the traces hold no [memory] events, so memory is not recorded (record it with "
                            "torch.profiler.profile(profile_memory=True))")
    if any(t.memory_changes for t in traces):
        not_inferred.append("memory before the trace's first [memory] event: PyTorch before 1.10 records each "
                            "allocation's and free's change (Bytes), not what is allocated, so memory is the sum of "
                            "the changes the trace records, from 0 at its first memory event (or from the least level "
                            "that never goes below 0)")
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
                   "memory_recorded": memory_recorded, "hidden_comm_ns": [],
                   # the traces' clock at the profile's cycle 0: the ranks' CPU timelines (system/) are on that clock
                   "origin_ns": lo},
    }
    run["import"].update(profiler_fields(traces))
    folder = next((t.spill.folder for t in traces if t.spill is not None), None)
    ready = peer_ready(traces, folder)
    release(*traces, *ready)
    return target, run, ProfilePlan(lo, hi, found, stage_index, single_stage, ipu_of_rank, ready)


def profiler_fields(traces: list[RankTrace]) -> dict[str, Any]:
    """What the re-timing needs to take the profiler's own cost out (analysis/pipeline/plain.py): each
    rank's steps timed without the profiler (``plain_steps``' header key, empty where absent), its events,
    and the profiler's options (the header's ``record_shapes``, ``profile_memory``, ``with_stack``)."""
    plain = []
    for t in traces:
        try:
            plain.append(plain_steps.read(t.header))
        except TraceError as exc:
            raise TraceError(f"{t.path} {exc}.") from None
    options = {k: bool(next((t.header.get(k) for t in traces if t.header.get(k) is not None), False))
               for k in PROFILER_OPTIONS}
    return {"plain_step_ns": plain, "events_per_rank": [int(t.events) for t in traces], "profiler_options": options}


def write_profile(path: str | os.PathLike[str], traces: list[RankTrace], device_memory: int | None = None,
                  name: str | None = None, busy_rows: int = WINDOW_BUSY_ROWS,
                  progress: Callable[[], None] = lambda: None, jobs: int | None = None) -> dict:
    """Write the profile of the ranks' traces atomically, rank by rank and a window of each rank's time at a
    time (``busy_rows`` of its busy rows long): each window's rows are cut, written and dropped, so that
    what is held is a window's, whatever the traces' size (the pages of a spilled rank read for a window are
    handed back after it); ``progress`` after each rank. Many small ranks are cut by ``jobs`` processes (all of
    the machine's by default) forked once the plan is made (``forked``), the same rows. Returns the run."""
    target, run, plan = plan_profile(traces, device_memory, name)
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # only now: a bad trace leaves no folder behind
    generator = {"name": "popvision import", "version": __version__, "schema_version": SCHEMA_VERSION}
    with ProfileWriter(path, target=target, run=run, generator=generator, row_group_rows=ROW_GROUP_ROWS) as writer:
        tables = {table: Batched(writer.table(table)) for table in TABLES}
        tables["kernels"] = Batched(writer.table("kernels", KERNEL_GROUP_ROWS))
        # a job of many small ranks: their rows cut by processes forked now, that hold the plan (forked.py)
        for ranks, items in forked.rank_items_in_order(traces, plan, busy_rows, jobs or os.cpu_count() or 1,
                                                       rank_items):
            if isinstance(items, forked.Packed):  # a run of small ranks
                for table, packed in items.tables.items():
                    tables[table].write_packed(packed)
                    release_memory(8 * len(packed.columns) * sum(packed.rows))
                run["import"]["hidden_comm_ns"].extend(items.hidden)
                for _ in ranks:
                    progress()
                continue
            for table, columns in items:
                if table == forked.HIDDEN:  # the rank's end: its tables that needed all of its rows
                    run["import"]["hidden_comm_ns"].append(columns)
                    continue
                tables[table].write(columns)
                # the arrays: freed, and handed back once a few MiB of them have been
                release_memory(columns_bytes(columns))
            progress()
        release_memory()  # the last windows', whatever their bytes
        for batched in tables.values():  # each table's last rows written and encoded before the next's
            batched.close()
        writer.set_run("import", run["import"])
    return run


def rank_items(t: RankTrace, ipu: int, plan: ProfilePlan, busy_rows: int) -> Iterator[tuple[str, Any]]:
    """The rank's rows of every table, in the order they are written: its kernels a row group's at a time, then its
    time line a window at a time (``busy_rows`` of its busy rows long), each as (table, columns); last
    (``forked.HIDDEN``, the nanoseconds its communication was hidden). The pages of a spilled rank read for a
    window are handed back once its rows are taken."""
    for block in kernel_rows(t, ipu, plan.lo):
        yield "kernels", block
    rows = rank_rows_by_window(t, (plan.lo, plan.hi), plan.ready[ipu], busy_rows)
    for window in rank_tables(t, ipu, plan, _peak(t, plan.lo, plan.hi), rows):
        hidden = window.pop("hidden_comm_ns", None)  # the rank's end: its tables that needed all of its rows
        yield from window.items()
        release(t, plan.ready[ipu])
        if hidden is not None:
            yield forked.HIDDEN, hidden


def kernel_rows(t: RankTrace, ipu: int, lo: int) -> Iterator[dict[str, Any]]:
    """The rank's rows of the ``kernels`` table (its GPU's kernels, copies and sets, times from ``lo``), a row group's
    (``KERNEL_GROUP_ROWS``) at a time."""
    c = KERNEL_COLUMN
    kernel_names = tuple(t.kernel_names)
    names = (*kernel_names, "")  # -1 (none): the empty name
    for k in blocks(t.kernels, min(SLICE_ROWS, KERNEL_GROUP_ROWS)):
        launched = k[:, c["launch_start"]] >= 0

        def named(column: str, k: np.ndarray = k) -> Coded:
            return coded(np.where(k[:, c[column]] >= 0, k[:, c[column]], len(kernel_names)), names)

        yield {"ipu": np.full(len(k), ipu, np.int64), "stream": k[:, c["stream"]],
               "kind": coded(k[:, c["kind"]], KERNEL_KINDS), "name": coded(k[:, c["name"]], kernel_names),
               "start_cycle": k[:, c["start"]] - lo, "end_cycle": k[:, c["end"]] - lo,
               "correlation": k[:, c["correlation"]], "bytes": k[:, c["bytes"]], "group": named("group"),
               "launch_start_cycle": np.where(launched, k[:, c["launch_start"]] - lo, -1),
               "launch_end_cycle": np.where(launched, k[:, c["launch_end"]] - lo, -1),
               "launch_name": named("launch_name"), "op": named("op"), "module": named("module")}


HELD_SLICES = 64  # a table's slices held at most, joined into one past this (``Batched``)
COMPACT_ROWS = 256  # ... counting the slices of fewer rows than this: larger ones are joined once, into a row group


class Batched:
    """A table's rows handed to its writer a slice at a time (it holds a slice, not the window), the slices of
    consecutive windows and ranks joined up to a row group's: a rank's few rows are not a batch each, whose
    casting and checking costs the same whatever its rows (a millisecond or two: seconds over thousands of
    ranks). The slices joined are those the writer would hold until it writes a row group of them, so that its
    row groups are the same. A string column handed over as codes (``tables.Coded``) is held as codes into one
    vocabulary of the table's (``tables.Vocabulary``) and made into Arrow once a row group, the column that
    joining a slice's Arrow column each would give; a column of other Arrow arrays is joined chunk by chunk, as
    the writer joins them."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.slices: list[dict[str, Any]] = []
        self.rows = 0
        self.small = 0  # slices of fewer than COMPACT_ROWS rows held since the last join
        self.joined = 0  # the slices at the front that joins made
        self.vocabulary: dict[str, Vocabulary] = {}  # each coded column's

    def write(self, columns: dict[str, Any]) -> None:
        columns = {k: self._codes(k, v) if isinstance(v, Coded) else v for k, v in columns.items()}
        n = len(next(iter(columns.values())))
        for at in range(0, max(n, 1), SLICE_ROWS):
            piece = {k: v[at:at + SLICE_ROWS] for k, v in columns.items()}
            rows = len(next(iter(piece.values())))
            self.slices.append(piece)
            self.rows += rows
            self.small += rows < COMPACT_ROWS
            if self.rows >= self.table.row_group_rows:
                self.flush()
            elif self.small >= HELD_SLICES:
                self._compact()

    def write_packed(self, packed: forked.PackedTable) -> None:
        """A run of ranks' items of this table (``forked.PackedTable``), as ``write`` would take them one by one: the
        same slices where a row group fills (so the same row groups), the rest one slice, not one an item."""
        names = packed.uniform()
        rows = np.asarray(packed.rows, np.int64)
        if names is None or (rows > SLICE_ROWS).any():
            for columns in packed.items():
                self.write(columns)
            return
        columns = {name: self._packed_codes(name, packed) if name in packed.words[0] else packed.columns[name]
                   for name in names}
        ends = np.cumsum(rows)
        item = at = 0  # the first item not yet handed over, and its first row
        while item < len(rows):
            filled = np.flatnonzero(self.rows + ends[item:] - at >= self.table.row_group_rows)
            last = item + int(filled[0]) if len(filled) else len(rows) - 1  # the item a row group fills at, or the last
            end = int(ends[last])
            self.slices.append({name: v[at:end] for name, v in columns.items()})
            self.rows += end - at
            self.small += end - at < COMPACT_ROWS
            item, at = last + 1, end
            if self.rows >= self.table.row_group_rows:
                self.flush()
            elif self.small >= HELD_SLICES:
                self._compact()

    def _packed_codes(self, name: str, packed: forked.PackedTable) -> np.ndarray:
        """A coded column of a run of items as codes into this table's vocabulary: each item's codes through its own
        words' remap, all at once."""
        vocabulary = self._vocabulary(name)
        remaps = [vocabulary.remap(words[name]) for words in packed.words]
        offsets = np.cumsum([0] + [len(r) for r in remaps[:-1]])
        codes = packed.columns[name]
        if not len(codes):
            return codes
        return np.concatenate(remaps)[codes + np.repeat(offsets, packed.rows)]

    def _codes(self, name: str, column: Coded) -> np.ndarray:
        return self._vocabulary(name).codes(column)

    def _vocabulary(self, name: str) -> Vocabulary:
        """A coded column's vocabulary, made on first use."""
        vocabulary = self.vocabulary.get(name)
        if vocabulary is None:
            vocabulary = self.vocabulary[name] = Vocabulary()
        return vocabulary

    def _compact(self) -> None:
        """The slices held since the last join joined into one, each Arrow column's dictionaries unified: a rank's
        slice of a few rows costs kilobytes of objects, which thousands of ranks would hold until a row group's rows
        come. What earlier joins made is kept as it is (joining it again each time copied a row group's rows some
        sixty times: a sixth of a 4,096-rank write) until there are ``HELD_SLICES`` of those too: at most twice
        that many slices are held, and a row is copied about twice before its row group is joined."""
        self.small = 0
        try:
            self.slices[self.joined:] = [_unified(_joined(self.slices[self.joined:]))]
            if len(self.slices) >= HELD_SLICES:
                self.slices = [_unified(_joined(self.slices))]
            self.joined = len(self.slices)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass  # kept as they are: the writer casts them slice by slice

    def close(self) -> None:
        """The slices held written, and the table closed: its last row group encoded now, not with every other
        table's when the profile is closed."""
        self.flush()
        self.table.close()

    def flush(self) -> None:
        """Hand the slices held to the writer (at the end, or a row group's rows)."""
        slices, self.slices, self.rows, self.small, self.joined = self.slices, [], 0, 0, 0
        if not slices:
            return
        try:
            joined = _joined(slices)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):  # columns the writer casts slice by slice
            for piece in slices:
                self.table.write(self._decoded(piece))
            return
        self.table.write(self._decoded(joined))

    def _decoded(self, columns: dict[str, Any]) -> dict[str, Any]:
        """The coded columns made into Arrow (``Vocabulary.arrow``)."""
        return {k: self.vocabulary[k].arrow(v) if k in self.vocabulary else v for k, v in columns.items()}


def _unified(columns: dict[str, Any]) -> dict[str, Any]:
    """Each Arrow column of chunks made one array, their dictionaries unified."""
    return {k: v.unify_dictionaries().combine_chunks() if isinstance(v, pa.ChunkedArray) else v
            for k, v in columns.items()}


def _joined(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """The slices' columns one after the other: NumPy numbers concatenated, anything else as Arrow chunks."""
    if len(slices) == 1:
        return slices[0]
    out: dict[str, Any] = {}
    for name in slices[0]:
        values = [s[name] for s in slices]
        if all(isinstance(v, np.ndarray) and v.dtype.kind in "iufb" for v in values):
            out[name] = np.concatenate(values)
            continue
        arrays = [to_arrow(v) for v in values]
        out[name] = pa.chunked_array([c for a in arrays for c in (a.chunks if isinstance(a, pa.ChunkedArray)
                                                                   else [a])])
    return out


def _device_memory(traces: list[RankTrace]) -> int | None:
    """The GPU's memory from ``deviceProperties`` (``totalGlobalMem``), where the trace has it."""
    for t in traces:
        for device in t.header.get("deviceProperties") or []:
            if isinstance(device, dict) and isinstance(device.get("totalGlobalMem"), int):
                return int(device["totalGlobalMem"])
    return None


def _peak(t: RankTrace, lo: int, hi: int) -> int:
    """The rank's peak: the largest sample of the profiled window, or the level it began at (samples taken
    while the rank idled count too: they are allocations of its other threads)."""
    ts, total = sorted_memory(t)
    a, b = np.searchsorted(ts, [lo, hi], side="left")
    return int(max(int(total[a:b].max(initial=0)), int(total[a - 1]) if a > 0 else 0))


def check_numbers(traces: list[RankTrace]) -> None:
    """Micro-batch and stage numbers bounded by what the traces hold: a schedule numbers a rank's
    micro-batches from 0, so a rank's largest is below its passes; and a pipeline of W ranks runs at most
    W stages for each stage a rank holds. A number beyond is not a real run's (and would size the profile)."""
    world = max([len(traces)] + [t.world_size for t in traces if t.world_size])
    for t in each(traces):
        passes = any_of(t.kind, [KIND["forward"], KIND["backward"], KIND["backward_input"], KIND["backward_weight"]])
        largest = int(t.micro_batch[passes].max(initial=-1))
        if largest >= int(passes.sum()):
            raise TraceError(f"{t.path} names micro-batch {largest:,} but holds {int(passes.sum()):,} passes: a "
                             f"schedule numbers micro-batches from 0, so it is not a real run's.")
        stages = np.unique(t.stage[t.stage >= 0])
        if len(stages) and int(stages[-1]) >= world * len(stages):
            raise TraceError(f"{t.path} names stage {int(stages[-1]):,} but its ranks ({world:,}) hold at most "
                             f"{world * len(stages):,} stages of {len(stages)} per rank: it is not a real run's.")
