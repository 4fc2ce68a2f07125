"""One rank's rows of every table of the profile, a window of its time at a time.

``timeline.rank_rows_by_window`` cuts the rank's time line a window at a time (each window a few
hundred thousand of the rank's operator gaps); each window's rows become the rows of the trace,
programs and tile_cycles tables at once, and are written and dropped. What needs the whole rank is
kept small until its end: each communication span's first exposed step (its ``exchanges`` row),
each step's memory level (``liveness`` measures every step against the lowest), the time its
communication was hidden. So the import holds one window's rows, not a rank's, whatever its size.
String columns are codes into each rank's words (``coded``), made into Arrow dictionaries a row group at a
time by the writer's batching (``profile.Batched``), never a string per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from popvision_py.format.arrays import arrow
from popvision_py.importer.kernels import KERNEL_KIND
from popvision_py.importer.parts import any_of
from popvision_py.importer.read import KIND, RankTrace, merge_intervals
from popvision_py.importer.spill_files import Growing, blocks
from popvision_py.importer.timeline import LABEL, PASS_NAME, Rows, is_collective, unique_first

PHASE_WORDS = ("idle", "exchange", "compute", "stream")  # stream: a GPU's copies and sets
PASS_WORDS = ("none", *sorted(set(PASS_NAME.values())))
PASS_CODE = np.zeros(max(KIND.values()) + 2, np.int64)  # a span's kind + 1 -> its pass in PASS_WORDS
for _kind, _word in PASS_NAME.items():
    PASS_CODE[_kind + 1] = PASS_WORDS.index(_word)
COMM_KINDS = (KIND["comm_call"], KIND["comm_flight"])
EXCHANGE_LABELS = (LABEL["comm_call"], LABEL["pp_comm"], LABEL["comm_flight"])
EXCHANGE_KIND_WORDS = ("all_reduce", "inter_ipu")
TYPE_WORDS = ("compute_set", "global_exchange", "all_reduce", "stream_copy")
MEMORY_WORDS = ("weights", "activations")  # tile_memory's categories: what stayed allocated, the rest
Table = dict[str, Any]


class Coded:
    """A string column as codes into ``words``, not yet made into Arrow: ``Batched`` joins a table's coded slices of
    many windows and ranks as codes against one vocabulary and makes each row group's column once
    (``Vocabulary.arrow``), where Arrow columns made a slice each would be unified and joined, a slice of a few
    rows at a time (seconds over thousands of ranks)."""

    __slots__ = ("codes", "words")

    def __init__(self, codes: np.ndarray, words: tuple[str, ...]) -> None:
        self.codes, self.words = np.asarray(codes, np.int64), words

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: slice) -> Coded:
        return Coded(self.codes[rows], self.words)


def coded(codes: np.ndarray, words: list[str] | tuple[str, ...]) -> Coded:
    """A string column ``words[codes]``, made into Arrow by the writer's batching (``Coded``); ``words`` a tuple
    where it is made often (a tuple is kept as it is)."""
    return Coded(codes, words if isinstance(words, tuple) else tuple(words))


def first_appearance(codes: np.ndarray, size: int) -> tuple[pa.Array, np.ndarray]:
    """Codes (below ``size``) renumbered in order of first appearance, as Arrow int32 indices, and the old code of
    each new one."""
    n = len(codes)
    first = np.full(size, n, np.int64)
    np.minimum.at(first, codes, np.arange(n))  # each code's first row (n: none)
    # the codes used, by their first row: those of none sort last
    order = np.argsort(first, kind="stable")[:np.count_nonzero(first < n)]
    remap = np.zeros(size, np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(remap[codes])]), order


class Vocabulary:
    """A coded column's words over many slices (``Coded``, each of its own words): each slice's codes as codes
    into the words seen so far (``codes``), a word listed twice one code, and a run of them made into Arrow
    (``arrow``)."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.words: list[str] = []
        self._remaps: dict[tuple[str, ...], np.ndarray] = {}  # a slice's words: each one's code here

    def codes(self, column: Coded) -> np.ndarray:
        remap = self.remap(column.words)
        return remap[column.codes] if len(column.codes) else column.codes

    def remap(self, words: tuple[str, ...]) -> np.ndarray:
        """Each of ``words``' code here."""
        remap = self._remaps.get(words)
        if remap is None:
            remap = np.array([self._code(w) for w in words], np.int32)
            if len(self._remaps) >= 1024:
                self._remaps.clear()
            self._remaps[words] = remap
        return remap

    def _code(self, word: str) -> int:
        code = self.code.get(word)
        if code is None:
            code = self.code[word] = len(self.words)
            self.words.append(word)
        return code

    def arrow(self, codes: np.ndarray) -> pa.DictionaryArray:
        """The column ``words[codes]`` as Arrow dictionary codes, its dictionary the words used in order of first
        appearance (as Arrow's dictionary_encode of the strings makes it), never a string per row."""
        indices, order = first_appearance(codes, len(self.words))
        return pa.DictionaryArray.from_arrays(indices, arrow([self.words[k] for k in order.tolist()]))


class Lookup:
    """A mapping of ints as sorted keys and their values, made once and applied to whole columns (``mapped``):
    the profile's stage and rank numberings are the same for every rank, and as long as the ranks."""

    def __init__(self, mapping: dict[int, int]) -> None:
        self.keys = np.asarray(sorted(mapping), np.int64)
        self.to = np.asarray([mapping[k] for k in self.keys.tolist()], np.int64)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """``mapping[v]`` for each of ``values``, -1 for a value it lacks."""
        values = np.asarray(values, np.int64)
        if not len(self.keys):
            return np.full(len(values), -1, np.int64)
        at = np.minimum(np.searchsorted(self.keys, values), len(self.keys) - 1)
        return np.where(self.keys[at] == values, self.to[at], -1)


def mapped(values: np.ndarray, mapping: dict[int, int] | Lookup) -> np.ndarray:
    """``mapping[v]`` for each of ``values``, -1 for a value it lacks: by its sorted keys, never by an array
    as long as the largest key (a trace's stage or rank numbers are its own)."""
    return (mapping if isinstance(mapping, Lookup) else Lookup(mapping))(values)


class RankTables:
    """A rank's tables, built window by window (``window``), then completed (``finish``).

    ``plan`` is the profile's ``ProfilePlan`` (the window, the stages' numbering, the peers' readiness).
    """

    def __init__(self, t: RankTrace, ipu: int, plan: Any, peak: int) -> None:
        self.t, self.ipu, self.plan, self.peak = t, ipu, plan, peak
        # rows of no span: the thread's operators (a GPU's kernels), and a GPU's copies and sets
        self.names = (*t.names, "kernels" if len(t.kernels) else "operators", "copies and sets")
        self.collective = np.array([is_collective(w) for w in t.names] + [False, False], bool)  # per distinct name
        self.steps_done = 0  # program steps (live rows) so far
        self.last_start = plan.lo  # the start of the latest live row
        self.levels = Growing(t.spill.folder if t.spill is not None else None)  # each live step's memory level
        self.hidden_ns = 0
        self.step_starts = np.sort(t.start[t.kind == KIND["step"]])  # iteration: the profiler step a row starts in
        # communication: every transfer's bytes and peer (a transfer in flight carries its call's), its first
        # step; each held for the transfers only (``comm``, in the order of the rank's spans), not for every span
        kind = t.kind
        self.comm = np.flatnonzero(any_of(kind, COMM_KINDS) & (t.end > plan.lo))
        flight = kind[self.comm] == KIND["comm_flight"]
        calls, flights = self.comm[~flight], self.comm[flight]
        self.peer = t.peer[self.comm].astype(np.int64)
        self.nbytes = t.nbytes[self.comm].astype(np.int64)
        if len(flights):
            order = np.argsort(t.start[calls], kind="stable")
            k = np.searchsorted(t.start[calls][order], t.start[flights], side="right") - 1
            parent = np.where(k >= 0, calls[order][np.maximum(k, 0)] if len(calls) else -1, -1)
            self.peer[flight] = np.where(parent >= 0, t.peer[np.maximum(parent, 0)] if len(calls) else -1, -1)
            self.nbytes[~flight] = 0
        self.first_step = np.full(len(self.comm), -1, np.int64)  # each transfer's first exposed step
        everything = any_of(kind, COMM_KINDS)
        self.in_flight = merge_intervals(np.stack([t.start[everything], t.end[everything]], axis=1))
        if len(t.kernels):  # a GPU's communication is its communication kernels, not the CPU's calls
            self.in_flight = communication(t.kernels)
        self.in_flight_sum = np.concatenate([[0], np.cumsum(self.in_flight[:, 1] - self.in_flight[:, 0])])
        self.memory_ts, self.memory_bytes = sorted_memory(t)

    def window(self, rows: Rows) -> dict[str, Table]:
        """The trace, programs and tile_cycles rows of a window's rows (span: indices into the rank's spans)."""
        t, plan, ipu = self.t, self.plan, self.ipu
        n = len(rows.start)
        label, span = rows.label.astype(np.int64), rows.span
        has = span >= 0
        sp = np.maximum(span, 0)
        idle = label == LABEL["idle"]
        live = ~idle
        exchange = any_of(label, EXCHANGE_LABELS)
        copying = label == LABEL["memory"]
        kind = np.where(has, t.kind[sp], -1) if len(t.kind) else np.full(n, -1)
        # stage: the action's (PP:), through the profile's stage numbering; else the rank's own
        named = np.where(has, t.stage[sp], -1) if len(t.stage) else np.full(n, -1)
        stage = mapped(named, plan.stage_lookup)
        stage = np.where(idle, -1, np.where(stage < 0, plan.single_stage[t.rank], stage))
        micro = np.where(has & any_of(label, (LABEL["pass"], LABEL["pp_comm"])), t.micro_batch[sp], -1) \
            if len(t.micro_batch) else np.full(n, -1)
        micro = np.where(micro < plan.found.micro_batches, micro, -1)
        # the pass (PASS_WORDS' code), by the span's kind, for pass and update rows only
        pass_ = np.where(any_of(label, (LABEL["pass"], LABEL["update"])), PASS_CODE[kind + 1], 0)
        steps = self.step_starts
        iteration = (np.clip(np.searchsorted(steps, rows.start, side="right") - 1, 0, plan.found.iterations - 1)
                     if len(steps) else np.zeros(n, np.int64))
        step = np.full(n, -1, np.int64)
        live_count = int(live.sum())
        step[live] = self.steps_done + np.arange(live_count)  # every row not idle is a program step of its own
        trace = {
            "run": np.zeros(n, np.int64), "iteration": iteration.astype(np.int64),
            "micro_batch": micro.astype(np.int64), "ipu": np.full(n, ipu, np.int64), "stage": stage.astype(np.int64),
            "pass": coded(pass_, PASS_WORDS), "step": step,
            "phase": coded(np.where(idle, 0, np.where(exchange, 1, np.where(copying, 3, 2))), PHASE_WORDS),
            "start_cycle": rows.start - plan.lo, "end_cycle": rows.end - plan.lo}
        # a transfer's bytes go to the first step where it is exposed
        nbytes = np.zeros(live_count, np.int64)
        seen, first = unique_first(span[live & has])
        at_comm = np.minimum(np.searchsorted(self.comm, seen), max(len(self.comm) - 1, 0))  # each one's transfer
        is_new = (self.comm[at_comm] == seen) & (self.first_step[at_comm] < 0) if len(self.comm) else \
            np.zeros(len(seen), bool)
        new = seen[is_new]
        if len(new):
            at = step[live & has][first[is_new]]
            self.first_step[at_comm[is_new]] = at
            np.add.at(nbytes, at - self.steps_done, self.nbytes[at_comm[is_new]])
        unnamed = np.where(copying, len(t.names) + 1, len(t.names))
        name_id = np.where(has, t.name[sp], unnamed) if len(t.name) else unnamed
        types = np.where(exchange, np.where(self.collective[name_id], 2, 1), np.where(copying, 3, 0))[live]
        cycles = (rows.end - rows.start)[live]
        programs = {
            "ipu": np.full(live_count, ipu, np.int64), "step": self.steps_done + np.arange(live_count),
            "type": coded(types, TYPE_WORDS), "name": coded(name_id[live], self.names),
            "op_id": np.full(live_count, -1, np.int64), "stage": stage[live].astype(np.int64),
            "pass": coded(pass_[live], PASS_WORDS), "tiles": np.ones(live_count, np.int64), "bytes": nbytes,
            "cycles": cycles}
        computing = np.flatnonzero(types == 0)  # each compute step on the rank's one tile
        tile_cycles = {
            "ipu": np.full(len(computing), ipu, np.int64), "step": self.steps_done + computing.astype(np.int64),
            "tile": np.zeros(len(computing), np.int64), "cycles": cycles[computing],
            "vertices": np.ones(len(computing), np.int64)}  # one kernel: one vertex
        if live_count:  # the samples from the last before the window to its end
            a = max(int(np.searchsorted(self.memory_ts, rows.start[0], side="left")) - 1, 0)
            b = int(np.searchsorted(self.memory_ts, rows.end[-1], side="left")) + 1
            self.levels.extend(levels(self.memory_ts[a:b], self.memory_bytes[a:b], rows.start[live], rows.end[live]))
        if live_count:
            self.last_start = int(rows.start[live][-1])
        self.hidden_ns += self._hidden(rows)
        self.steps_done += live_count
        return {"trace": trace, "programs": programs, "tile_cycles": tile_cycles}

    def _hidden(self, rows: Rows) -> int:
        """Nanoseconds in which the rank computed while a transfer was under way: its communication hidden
        behind compute (overlapping transfers counted once)."""
        merged = self.in_flight
        computing = any_of(rows.label, (LABEL["pass"], LABEL["update"], LABEL["busy"]))
        a, b = rows.start[computing], rows.end[computing]
        if not len(merged) or not len(a):
            return 0
        # rows are disjoint and sorted: the transfers' cover inside each compute row, by prefix sums
        return int((_cover_until(merged, self.in_flight_sum, b) - _cover_until(merged, self.in_flight_sum, a)).sum())

    def finish(self) -> dict[str, Table]:
        """The rank's exchanges (a transfer never exposed on a new step of 0 cycles after the others), the
        programs rows of those steps, the liveness of every step of its time line and the rank's tile_memory.

        A step of a hidden transfer has no liveness: it is no row of the time line, and numbered after them all,
        not at its time (a DDP step of 400 gradient buckets: 400 such steps a profiler step). Its row was the
        level when the last step began, a flat tail that was most of the Liveness page's axis (99% of it at 1,600
        layers); that level still counts towards the lowest, so the weights and activations are unchanged."""
        t, ipu, comm = self.t, self.ipu, self.comm
        sends = np.array(["send" in n for n in t.names] + [False], bool)[t.name[comm]]
        collective = self.collective[t.name[comm]]
        other = mapped(self.peer, self.plan.ipu_lookup)
        other = np.where(other >= 0, other, ipu)  # a peer outside the traces given: the rank itself
        at = self.first_step.copy()
        hidden = at < 0
        k = int(hidden.sum())
        at[hidden] = self.steps_done + np.arange(k)
        exchanges = {
            "ipu": np.full(len(comm), ipu, np.int64), "step": at.astype(np.int64),
            "kind": coded(np.where(collective, 0, 1), EXCHANGE_KIND_WORDS),
            "src_ipu": np.where(sends, ipu, other), "dst_ipu": np.where(sends, other, ipu),
            "bytes": self.nbytes, "cycles": (t.end[comm] - t.start[comm]).astype(np.int64)}
        programs = {
            "ipu": np.full(k, ipu, np.int64), "step": self.steps_done + np.arange(k),
            "type": coded(np.where(collective[hidden], 2, 1), TYPE_WORDS),
            "name": coded(t.name[comm[hidden]].astype(np.int64), self.names),
            "op_id": np.full(k, -1, np.int64), "stage": np.full(k, -1, np.int64),
            "pass": coded(np.zeros(k, np.int64), PASS_WORDS), "tiles": np.ones(k, np.int64),
            "bytes": self.nbytes[hidden], "cycles": np.zeros(k, np.int64)}
        # memory: each step's level (the most allocated while it ran, else what was allocated when it began)
        # against the lowest, and the rank's peak split into what stayed allocated throughout and the rest
        level = self.levels.result()
        total = len(level)
        lowest = [int(level.min())] if total else []
        if k:  # what was allocated when the last step began: the lowest may be it
            at_last = np.array([self.last_start], np.int64)
            before = int(np.searchsorted(self.memory_ts, self.last_start, side="left"))  # the sample before it
            near = slice(max(before - 1, 0), before + 1)
            lowest.append(int(levels(self.memory_ts[near], self.memory_bytes[near], at_last, at_last)[0]))
        baseline = min(min(lowest, default=0), self.peak)
        liveness = {  # made a slice at a time as it is written: one array of the rank's steps, not six
            "ipu": LazyColumn(total, lambda a, b: np.full(b - a, ipu, np.int64)),
            "step": LazyColumn(total, lambda a, b: np.arange(a, b, dtype=np.int64)),
            "always_live_bytes": LazyColumn(total, lambda a, b: np.full(b - a, baseline, np.int64)),
            "not_always_live_bytes": LazyColumn(total, lambda a, b: level[a:b] - baseline),
            "worst_tile": LazyColumn(total, lambda a, b: np.zeros(b - a, np.int64)),
            "worst_tile_bytes": level}
        tile_memory = {
            "ipu": np.full(2, ipu, np.int64), "tile": np.zeros(2, np.int64),
            "category": coded(np.array([0, 1]), MEMORY_WORDS), "always_live": np.array([True, False]),
            "bytes": np.array([baseline, self.peak - baseline], np.int64)}
        return {"exchanges": exchanges, "programs": programs, "liveness": liveness, "tile_memory": tile_memory}


class LazyColumn:
    """A column of ``n`` rows made a slice at a time (``make(start, stop)``), as a writer slices it."""

    def __init__(self, n: int, make: Any) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.n)
        return self.make(start, max(start, stop))


def rank_tables(t: RankTrace, ipu: int, plan: Any, peak: int, rows: Iterator[Rows]) -> Iterator[dict[str, Table]]:
    """The rank's rows of every table, a window at a time (``rows``: its time line's windows, in order);
    the last holds ``hidden_comm_ns`` (the nanoseconds its communication was hidden) beside the tables."""
    tables = RankTables(t, ipu, plan, peak)
    for window_rows in rows:
        yield tables.window(window_rows)
    yield {**tables.finish(), "hidden_comm_ns": tables.hidden_ns}


def sorted_memory(t: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """The rank's memory samples in time order: as they are (both readers keep them so), else sorted."""
    ts = t.memory_ts
    if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):
        return ts, t.memory_bytes
    order = np.argsort(ts, kind="stable")
    return ts[order], t.memory_bytes[order]


def communication(kernels: np.ndarray) -> np.ndarray:
    """The union of a GPU's communication kernels' time (``kernels``: a rank's ``RankTrace.kernels``, sorted by
    start), read a block at a time: each block's merged with the last interval of the blocks before, which is
    held back, as a later kernel may still join it (no other can: it ends before the last one starts)."""
    merged = [np.zeros((0, 2), np.int64)]
    held = merged[0]
    for block in blocks(kernels):
        union = merge_intervals(np.concatenate([held, block[block[:, 3] == KERNEL_KIND["communication"], :2]]))
        merged.append(union[:-1])
        held = union[-1:]
    return np.concatenate([*merged, held])


def _cover_until(merged: np.ndarray, covered: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Nanoseconds of the disjoint sorted intervals ``merged`` before each time in ``at``."""
    k = np.searchsorted(merged[:, 0], at, side="right")  # intervals starting at or before ``at``
    last = np.maximum(k - 1, 0)
    inside = np.where(k > 0, np.clip(at - merged[last, 0], 0, merged[last, 1] - merged[last, 0]), 0)
    return covered[last] * (k > 0) + inside


def levels(ts: np.ndarray, total: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
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
