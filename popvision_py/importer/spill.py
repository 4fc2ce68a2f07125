"""Each rank's kept columns on disk, not in memory: the import's memory stays flat whatever the traces' size.

A rank's parts (``parts.RankPart``, one per byte range of events) are appended to an anonymous file
as they come (``SpilledRank.add``), so that the parent holds one part at a time, never a rank. Once
the rank is read, ``SpilledRank.trace`` lays its columns out in a second anonymous file, each
column contiguous, by the rules ``parts.assemble`` applies in memory (the same rows, in the same
order): the spans of every part in order, the training thread's operators (or the GPU's kernels)
and its autograd nodes as unions of intervals, the largest ``Total Allocated`` per 10 µs (or of the
running total of an older trace's ``Bytes`` changes). The unions and the memory's reduction are made a
stretch of time at a time over the parts' sorted runs (``union_runs``, ``bucket_runs``, ``change_runs``),
never over the whole rank at once.

The rank's ``RankTrace`` then holds arrays over a memory map of that file (``RankTrace.spill``). The
plan and the write read them a window at a time; ``release`` hands back the pages they touched
(``MADV_DONTNEED``: resident pages of a mapped file count in the process's memory). The files are
anonymous (``tempfile.TemporaryFile``, in the output's folder): nothing is left behind, whatever ends
the import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from popvision_py.importer.checks import TraceError, header_fields
from popvision_py.importer.parts import (MEMORY_BUCKET_NS, RankPart, RankTrace, autograd_rows, bucket_max, choose,
                                         comm_annotations, gpu_work_dropped, merge_intervals, release_memory,
                                         torch_version, with_trailer)
from popvision_py.importer.kernels import (GPU_ROW, KERNEL_COLUMNS, LAUNCH_ROW, OP_ROW, joined, launch_ops, name_codes,
                                           renamed, sorted_kernels)
from popvision_py.importer.memory_changes import check_memory_kinds, running_memory
from popvision_py.importer.spill_files import (BATCH_ROWS, HELD_BYTES, HELD_RAW_BYTES, Ref, SpillFile, _cuts,
                                               _stretches, release)

# The spans' columns as ``RankTrace`` holds them: its field, the column of ``RankPart.rows``, the dtype.
SPAN_COLUMNS = (("start", 0, np.int64), ("end", 1, np.int64), ("kind", 2, np.int8), ("stage", 3, np.int32),
                ("micro_batch", 4, np.int32), ("peer", 5, np.int32), ("nbytes", 6, np.int64), ("name", 7, np.int32))


def union_runs(runs: list[np.ndarray], out: SpillFile, batch: int = BATCH_ROWS) -> Ref:
    """``merge_intervals`` of the runs' intervals together (each run sorted by start), appended to ``out``, a
    stretch of time at a time: the intervals starting before a cut, from every run, merged. The last merged
    interval is held back, as one starting after the cut may still join it; no other can (it ends before
    the last one starts)."""
    runs = [r for r in runs if len(r)]
    column = out.column(np.int64, (2,))
    held = np.zeros((0, 2), np.int64)
    starts = [r[:, 0] for r in runs]
    for slices in _stretches(starts, _cuts(starts, batch)):
        merged = merge_intervals(np.concatenate([held, *(np.asarray(r[s]) for r, s in zip(runs, slices))]))
        column.extend(merged[:-1])
        held = merged[-1:]
        release(*runs[:1])  # the runs' file: the pages of this stretch
    column.extend(held)
    return column.close()


def bucket_runs(runs: list[tuple[np.ndarray, np.ndarray]], out: SpillFile, scratch: SpillFile,
                batch: int = BATCH_ROWS) -> tuple[Ref, Ref]:
    """``bucket_max`` of the runs' samples together (each run a ``bucket_max``: times rising), a stretch of
    time at a time, cut at a bucket's edge (a bucket's samples all lie in one stretch, in the runs' order);
    appended to ``out`` as (times, bytes), the bytes by way of ``scratch``."""
    runs = [r for r in runs if len(r[0])]
    times = [t for t, _ in runs]
    cuts = sorted({c // MEMORY_BUCKET_NS * MEMORY_BUCKET_NS for c in _cuts(times, batch)})
    ts_column, bytes_column = out.column(np.int64), scratch.column(np.int64)
    for slices in _stretches(times, cuts):
        ts = [np.asarray(t[s]) for (t, _), s in zip(runs, slices)]
        if sum(len(t) for t in ts):
            t, b = bucket_max(np.concatenate(ts), np.concatenate([np.asarray(b[s]) for (_, b), s in zip(runs, slices)]))
            ts_column.extend(t)
            bytes_column.extend(b)
            release(*times[:1])
    ts_ref, scratch_ref = ts_column.close(), bytes_column.close()
    return ts_ref, _copied(scratch, scratch_ref, out, batch)


def _copied(scratch: SpillFile, ref: Ref, out: SpillFile, batch: int, less: int = 0) -> Ref:
    """The int64 column ``ref`` of ``scratch`` (less ``less``) appended to ``out`` ``batch`` rows at a time,
    each batch's pages handed back: a column written beside another one in ``out`` is laid out after it."""
    scratch.freeze()
    values = scratch.array(ref)
    column = out.column(np.int64)
    for at in range(0, len(values), batch):
        column.extend(values[at:at + batch] - less)
        scratch.release()
    return column.close()


def change_runs(runs: list[tuple[np.ndarray, np.ndarray]], out: SpillFile, scratch: SpillFile,
                batch: int = BATCH_ROWS) -> tuple[Ref, Ref]:
    """``bucket_max`` of ``memory_changes.changed_levels`` of the runs' changes together (each run a part's
    (times, Bytes), sorted by time stably: the rank's changes in the parts' order, sorted stably, are each
    stretch's changes, in the runs' order, sorted stably), a stretch of time at a time cut at a bucket's edge,
    the level carried from one to the next; appended to ``out`` as ``bucket_runs`` appends (times, bytes), the
    bytes by way of ``scratch``, raised there to the least level that never goes below 0."""
    runs = [r for r in runs if len(r[0])]
    times = [t for t, _ in runs]
    cuts = sorted({c // MEMORY_BUCKET_NS * MEMORY_BUCKET_NS for c in _cuts(times, batch)})
    ts_column, bytes_column = out.column(np.int64), scratch.column(np.int64)
    level = lowest = 0
    for slices in _stretches(times, cuts):
        ts = [np.asarray(t[s]) for t, s in zip(times, slices)]
        if sum(len(t) for t in ts):
            at = np.concatenate(ts)
            order = np.argsort(at, kind="stable")
            levels = running_memory(np.concatenate([np.asarray(b[s]) for (_, b), s in zip(runs, slices)])[order],
                                    level)
            level, lowest = int(levels[-1]), min(lowest, int(levels.min()))
            t, b = bucket_max(at[order], levels)
            ts_column.extend(t)
            bytes_column.extend(b)
            release(*times[:1])
    ts_ref, scratch_ref = ts_column.close(), bytes_column.close()
    return ts_ref, _copied(scratch, scratch_ref, out, batch, less=lowest)


@dataclass
class _PartRefs:
    """Where one part's arrays lie in the rank's raw file."""

    rows: Ref
    on_gpu: Ref
    names: np.ndarray  # the part's name codes -> the rank's
    kernels: Ref
    busy: dict[Any, Ref]
    backward: dict[Any, Ref]
    memory: dict[int, tuple[Ref, Ref]]
    gpu_rows: Ref  # sorted by start and stream (``kernels.sorted_kernels``), names the rank's codes
    launches: Ref  # by start (names the rank's codes), then each one's place among the rank's launches
    ops: Ref  # by start, names the rank's codes


class SpilledRank:
    """A rank's parts, appended to an anonymous file in ``folder`` as they come (``add``, in order), then laid
    out as the rank's ``RankTrace`` (``trace``): what ``parts.Merger`` and ``parts.assemble`` make in memory,
    the same columns, never holding more than a part, or ``batch`` rows, at a time."""

    def __init__(self, folder: Path, batch: int | None = None) -> None:
        self.folder, self.batch = folder, batch or BATCH_ROWS
        self.raw = SpillFile(folder, HELD_RAW_BYTES)
        self.parts: list[_PartRefs] = []
        self.names: dict[str, int] = {}
        self.gpu_names: dict[str, int] = {}
        self.events = 0
        self.threads: dict[Any, int] = {}
        self.busy_tids: dict[Any, None] = {}
        self.backward_tids: dict[Any, None] = {}
        self.step_threads: dict[Any, None] = {}
        self.step_pid: int | None = None
        self.gpu = False
        self.launches = 0  # launches so far: each one's place among the rank's, to keep ties in the parts' order
        self.trailer: dict[str, Any] = {}  # the distributedInfo after the events, if any
        self.on_gpu = False
        self.devices: dict[int, None] = {}
        self.change_devices: dict[int, None] = {}  # devices with Bytes changes (PyTorch before 1.10)
        self.changes: list[dict[int, tuple[Ref, Ref]]] = []  # each part's: per device (ts, Bytes), sorted by ts

    def add(self, part: RankPart) -> None:
        """Append a part (the next of the rank's, in order)."""
        codes = np.array([self.names.setdefault(n, len(self.names)) for n in part.names], np.int64)
        gpu_codes = np.array([self.gpu_names.setdefault(n, len(self.gpu_names)) for n in part.gpu_names] + [-1],
                             np.int64)  # then -1 (a kernel without a group) kept -1
        raw = self.raw
        self.parts.append(_PartRefs(
            rows=raw.append(part.rows), on_gpu=raw.append(part.on_gpu), names=codes,
            kernels=raw.append(part.kernels), busy={t: raw.append(v) for t, v in part.busy.items()},
            backward={t: raw.append(v) for t, v in part.backward.items()},
            memory={d: (raw.append(t), raw.append(b)) for d, (t, b) in part.memory.items()},
            gpu_rows=raw.append(sorted_kernels(renamed(renamed(part.gpu_rows, 4, gpu_codes), 7, gpu_codes))),
            launches=raw.append(_by_start(np.column_stack([renamed(part.launches, 3, gpu_codes), np.arange(
                self.launches, self.launches + len(part.launches), dtype=np.int64)]), 1)),
            ops=raw.append(_by_start(renamed(part.ops, 3, gpu_codes)))))
        self.launches += len(part.launches)
        self.changes.append({d: _sorted_run(raw, t, b) for d, (t, b) in part.changes.items()})
        self.change_devices.update(dict.fromkeys(part.changes))
        self.events += part.events
        for tid, n in part.threads.items():
            self.threads[tid] = self.threads.get(tid, 0) + n
        self.busy_tids.update(dict.fromkeys(part.busy))
        self.backward_tids.update(dict.fromkeys(part.backward))
        self.step_threads.update(dict.fromkeys(part.step_threads))
        if self.step_pid is None:
            self.step_pid = part.step_pid
        self.gpu |= part.gpu
        self.trailer = self.trailer or part.trailer
        self.on_gpu |= bool(part.on_gpu.any())
        self.devices.update(dict.fromkeys(part.memory))
        if len(self.parts) % 16 == 0:
            release_memory()  # the parts' churn (each made, spilled and dropped)

    def trace(self, path: str, header: dict[str, Any]) -> RankTrace:
        """The rank's ``RankTrace``, its arrays over the memory map of its columns' file (``parts.assemble``'s
        rules; a ``TraceError`` naming the file where its header is refused)."""
        header = with_trailer(header, self.trailer)
        try:
            _, rank, world = header_fields(header)
        except TraceError as exc:
            raise TraceError(f"{path} {exc}.") from None
        check_memory_kinds(path, self.devices, self.change_devices)
        self.raw.freeze()
        raw, out, parts = self.raw, SpillFile(self.folder, shared=True), self.parts
        names = list(self.names)
        choice = choose(self.gpu, self.threads, list(self.step_threads), self.backward_tids,
                        {**self.devices, **self.change_devices})
        if choice.kernels:
            busy = union_runs([raw.array(p.kernels) for p in parts], out, self.batch)
        else:
            busy = union_runs([raw.array(p.busy[choice.main]) for p in parts if choice.main in p.busy], out,
                              self.batch)
        raw.release()
        # autograd's nodes as spans, after every part's (``assemble``): unioned into a scratch file first
        scratch = self._scratch()
        nodes_ref = union_runs([raw.array(p.backward[t]) for t in choice.backward for p in parts if t in p.backward],
                               scratch, self.batch)
        scratch.freeze()
        nodes = scratch.array(nodes_ref)
        if len(nodes) and "autograd" not in names:
            names.append("autograd")
        annotation = comm_annotations(names)  # once a rank: its names grow with the steps (ProfilerStep#N)
        # a column at a time, each a pass over the spans; a rank of at most a batch of them (a job of thousands of
        # ranks) is cut once, not once a column
        spans = sum(p.rows.shape[0] for p in parts) + len(nodes)
        held = list(self._kept_blocks(nodes, names, annotation)) if spans <= self.batch else None
        refs = {}
        for field_name, at, dtype in SPAN_COLUMNS:
            column = out.column(dtype)
            for kept in held if held is not None else self._kept_blocks(nodes, names, annotation):
                column.extend(kept[:, at])
            refs[field_name] = column.close()
        del held
        del nodes
        memory = None
        changed = choice.memory in self.change_devices
        if changed:
            try:
                memory = change_runs([(raw.array(c[choice.memory][0]), raw.array(c[choice.memory][1]))
                                      for c in self.changes if choice.memory in c], out, self._scratch(),
                                     self.batch)
            except TraceError as exc:
                raise TraceError(f"{path} {exc}.") from None
        elif choice.memory is not None:
            memory = bucket_runs([(raw.array(p.memory[choice.memory][0]), raw.array(p.memory[choice.memory][1]))
                                  for p in parts if choice.memory in p.memory], out, self._scratch(),
                                 self.batch)
        # the GPU's own timeline, sorted and joined to its launches and their operators a stretch of time at a time
        kernels, kernel_names = spill_timeline([raw.array(p.gpu_rows) for p in parts],
                                               [raw.array(p.launches) for p in parts],
                                               [raw.array(p.ops) for p in parts] if self.gpu else [],
                                               list(self.gpu_names), out, self.folder, self.batch)
        raw.release()
        out.freeze()
        self.raw = self.parts = None  # type: ignore[assignment]  # the raw file goes with its map
        columns = {name: out.array(ref) for name, ref in refs.items()}
        kernels = out.array(kernels)
        memory_ts, memory_bytes = (out.array(memory[0]), out.array(memory[1])) if memory else (
            np.zeros(0, np.int64), np.zeros(0, np.int64))
        trace = RankTrace(
            path=str(path), header={k: v for k, v in header.items() if k != "traceEvents"}, rank=rank,
            world_size=world, main_thread=choice.main, **columns, names=names, busy=out.array(busy),
            memory_ts=memory_ts, memory_bytes=memory_bytes, events=self.events, gpu=self.gpu,
            torch_version=torch_version(header), pid=self.step_pid, kernels=kernels, kernel_names=kernel_names,
            memory_changes=changed)
        trace.spill = out
        out.release()
        release_memory(raw.size + out.size)  # its parts and the copies of its columns laid out: made and dropped
        return trace

    def _scratch(self) -> SpillFile:
        """A file used and dropped within ``trace``: held in memory while small."""
        return SpillFile(self.folder, HELD_BYTES)

    def _kept_blocks(self, nodes: np.ndarray, names: list[str], annotation: np.ndarray) -> Iterator[np.ndarray]:
        """``_span_blocks``' rows, less a GPU trace's spans not kept (``gpu_work_dropped``)."""
        for block, on_gpu in self._span_blocks(nodes, names):
            yield block if not self.gpu else block[~gpu_work_dropped(block[:, 2], on_gpu, block[:, 7], annotation,
                                                                     self.on_gpu)]

    def _span_blocks(self, nodes: np.ndarray, names: list[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The rank's spans (``RankPart.rows``, names the rank's codes) a part at a time, then autograd's
        nodes, ``batch`` rows at a time; each with its ``on_gpu``."""
        for p in self.parts:
            rows = self.raw.array(p.rows)
            on_gpu = self.raw.array(p.on_gpu)
            for at in range(0, len(rows), self.batch):
                block = np.array(rows[at:at + self.batch])
                if len(block):
                    block[:, 7] = p.names[block[:, 7]]
                yield block, np.array(on_gpu[at:at + self.batch])
                self.raw.release()
        if len(nodes):
            code = names.index("autograd")
            for at in range(0, len(nodes), self.batch):
                piece = nodes[at:at + self.batch]
                yield autograd_rows(piece, code), np.zeros(len(piece), bool)
                release(nodes)


TRACE_ARRAYS = ("start", "end", "kind", "stage", "micro_batch", "peer", "nbytes", "name", "busy", "memory_ts",
                "memory_bytes", "kernels")  # a RankTrace's arrays


def spilled(trace: RankTrace, folder: Path) -> RankTrace:
    """A rank read whole in memory (a worker's ``ranges.read_whole``), its arrays laid out in a shared spill file in
    ``folder`` and mapped, as ``SpilledRank.trace`` leaves them: what the parent holds of it is its pages read."""
    out = SpillFile(folder, shared=True)
    refs = out.append_all([np.asarray(getattr(trace, name)) for name in TRACE_ARRAYS])
    out.freeze()
    for name, ref in zip(TRACE_ARRAYS, refs):
        setattr(trace, name, out.array(ref))
    trace.spill = out
    out.release()
    return trace


def _by_start(rows: np.ndarray, column: int = 0) -> np.ndarray:
    """Rows sorted by their start (``column``; ties in the order given): a run to merge."""
    return rows[np.argsort(rows[:, column], kind="stable")]


def _block(runs: list[np.ndarray], slices: list[slice], width: int) -> np.ndarray:
    """The rows of each run's slice, one run after the other (``width`` columns, none at all)."""
    return np.concatenate([np.zeros((0, width), np.int64), *(np.asarray(r[s]) for r, s in zip(runs, slices))])


def launches_with_ops(launch_runs: list[np.ndarray], op_runs: list[np.ndarray], code: np.ndarray, scratch: SpillFile,
                      batch: int = BATCH_ROWS) -> list[Ref]:
    """``kernels.launch_ops`` of the runs' launches (each run by start: LAUNCH_ROW columns, then each one's place
    among the rank's) over the runs' operators (each by start: OP_ROW columns), a stretch of time at a time:
    the launches starting in it, over the operators starting in it and those of the stretches before still
    open (an operator holding a call began before it and ends after it: by the cut, it is open or starts
    after). Names mapped through ``code``; appended to ``scratch``, a run a stretch, each sorted by correlation id
    and place."""
    launch_runs, op_runs = [r for r in launch_runs if len(r)], [r for r in op_runs if len(r)]
    keys = [r[:, 1] for r in launch_runs] + [r[:, 0] for r in op_runs]
    cuts = _cuts(keys, batch)
    held = np.zeros((0, OP_ROW), np.int64)  # operators open at the last cut, in the order they came
    refs = []
    for at, launches, ops in zip([*cuts, None], _stretches([r[:, 1] for r in launch_runs], cuts),
                                 _stretches([r[:, 0] for r in op_runs], cuts)):
        ops = np.concatenate([held, _block(op_runs, ops, OP_ROW)])
        found = launch_ops(_block(launch_runs, launches, LAUNCH_ROW + 1), ops)
        for column in (3, 4, 5):  # the launch's, its operator's and its module's names
            found = renamed(found, column, code)
        if len(found):
            refs.append(scratch.append(found[np.lexsort((found[:, -1], found[:, 0]))]))
        held = ops[ops[:, 1] > at] if at is not None else held
        release(*launch_runs[:1], *op_runs[:1])
    return refs


def merged_launches(runs: list[np.ndarray], folder: Path, batch: int = BATCH_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The runs' launches (each sorted by correlation id, then place: ``launches_with_ops``'s) as one run so
    sorted, a stretch of ids at a time: the ids, and the rest of each one's columns but its place, over two
    scratch files."""
    runs = [r for r in runs if len(r)]
    width = runs[0].shape[1] if runs else len(KERNEL_COLUMNS) - GPU_ROW + 2
    ids, rest = SpillFile(folder, HELD_BYTES), SpillFile(folder, HELD_BYTES)
    id_column, rest_column = ids.column(np.int64), rest.column(np.int64, (width - 2,))
    keys = [r[:, 0] for r in runs]
    for slices in _stretches(keys, _cuts(keys, batch)):
        block = _block(runs, slices, width)
        block = block[np.lexsort((block[:, -1], block[:, 0]))]
        id_column.extend(block[:, 0])
        rest_column.extend(block[:, 1:-1])
        release(*runs[:1])
    id_ref, rest_ref = id_column.close(), rest_column.close()
    ids.freeze()
    rest.freeze()
    return ids.array(id_ref), rest.array(rest_ref)


def spill_timeline(kernel_runs: list[np.ndarray], launch_runs: list[np.ndarray], op_runs: list[np.ndarray],
                   names: list[str], out: SpillFile, folder: Path, batch: int = BATCH_ROWS) -> tuple[Ref, list[str]]:
    """A rank's ``RankTrace.kernels`` appended to ``out``, and their names, from its parts' runs (``SpilledRank.add``'s:
    names the rank's codes into ``names``): what ``kernels.gpu_timeline`` makes of the same rows, never holding
    more than a stretch of them. The launches are joined to their operators (``launches_with_ops``) and merged by
    correlation id (``merged_launches``); then the kernels, a stretch of time at a time, are sorted, renamed and
    joined to them. Ties keep the parts' order and each part's own, as one sort of them all does. A stretch is a
    quarter of ``batch`` rows: a kernel's row and its sorted and joined copies are four times a span's."""
    code, sorted_names = name_codes(names)
    batch = max(batch // 4, 1)
    scratch = SpillFile(folder, HELD_BYTES)
    refs = launches_with_ops(launch_runs, op_runs, code, scratch, batch)
    scratch.freeze()
    keys, launches = merged_launches([scratch.array(ref) for ref in refs], folder, batch)
    del scratch
    runs = [r for r in kernel_runs if len(r)]
    column = out.column(np.int64, (len(KERNEL_COLUMNS),))
    starts = [r[:, 0] for r in runs]
    for slices in _stretches(starts, _cuts(starts, batch)):
        block = renamed(renamed(_block(runs, slices, GPU_ROW), 4, code), 7, code)
        column.extend(joined(sorted_kernels(block), keys, launches))
        release(*runs[:1], keys, launches)
    return column.close(), sorted_names


def _sorted_run(raw: SpillFile, ts: np.ndarray, change: np.ndarray) -> tuple[Ref, Ref]:
    """A part's changes appended to ``raw`` sorted by time, stably: a run for ``change_runs``."""
    order = np.argsort(ts, kind="stable")
    return raw.append(ts[order]), raw.append(change[order])
