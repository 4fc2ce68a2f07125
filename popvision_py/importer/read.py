"""One rank's PyTorch profiler trace, streamed: the events the import needs, as columns.

A trace is the Chrome-trace JSON that ``torch.profiler`` (Kineto) writes, one file per rank, plain or
gzipped. Its header (``schemaVersion``, ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``,
...) comes before the ``traceEvents`` array; the events are parsed a stretch at a time, so memory does
not grow with the file: each stretch of events is reduced to the few columns below and dropped. What
is kept grows with the pipeline's actions, the communication calls and the gaps between operators,
not with the operators themselves:

- ``spans``: annotations (``user_annotation``: ``ProfilerStep#N``, ``Forward {i}``, ``PP:...``,
  ``Optimizer.step#...``), the pipeline stage's ``forward_one_chunk`` / ``backward_one_chunk`` Python
  frames (traces recorded ``with_stack``), communication calls (``c10d::...`` operators, which block
  the calling thread) and communication in flight (``gloo:...`` / ``nccl:...`` spans, and GPU kernels
  whose name starts with ``nccl``); and every other annotation, for the GPU's figures alone
  (``analysis.imported.bound``): the training loop's DataLoader fetches
  (``enumerate(DataLoader)#...__next__``: ``input``), the CPU's other ``user_annotation`` spans
  (``annotation``) and the GPU track's ``gpu_user_annotation`` spans (``gpu_annotation``);
- ``busy``: the union of the operators' time on the rank's main thread (or of its GPU kernels), merged
  interval by interval;
- ``memory``: ``[memory]`` instants, reduced to the largest ``Total Allocated`` per 10 µs (PyTorch before
  1.10 records each allocation's change, ``Bytes``, alone: those are kept as read and cumulated once the
  rank is read, ``memory_changes``).

Older PyTorch (1.8 to 1.12) named categories otherwise (``Kernel``, ``Operator``...): each is read as
today's (``parts.current_category``).

Times are integers of nanoseconds on one clock for every rank: ``ts`` is microseconds from
``baseTimeNanoseconds`` where the trace has it (current PyTorch) and absolute microseconds otherwise
(older traces, whose ``ts`` is already on the wall clock).

Two readers apply these rules (``parts``): ``ranges`` decodes byte ranges of events at a time with
msgspec, in parallel (``read_rank``), and ``read_stream`` streams the events one at a time with ijson.
The fast one hands a trace it does not take as it stands to the streaming one, whose sentences
say what is wrong with a refused trace.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from popvision_py.importer import ranges
from popvision_py.importer.checks import MAX_DEPTH, Depth, TraceError, header_fields, is_int, is_number, wrong
from popvision_py.importer.parts import (AUTOGRAD, BATCH_EVENTS, COMM_FLIGHT, GPU_CATS, HEAD_BYTES, KIND, KINDS,
                                         MAX_PLAIN, MAX_RATIO, MAX_US, STEP, RankPart, RankTrace, Spans, args_of,
                                         assemble, bucket_max, classify, merge_intervals, open_trace, parse_header)
from popvision_py.importer.kernels import (GPU_ROW, KERNEL_KIND, LAUNCH_ROW, MODULE, OP_ROW, RUNTIME_CATS, comm_bytes,
                                           correlation_of, group_of, kernel_bytes, kernel_kind, stream_of, thread_key)
from popvision_py.importer.parts import TAIL_BYTES, current_category, trailer_of

__all__ = ["KIND", "KINDS", "RankTrace", "TraceError", "merge_intervals", "read_rank", "read_stream"]


class _Recorder:
    """A file object for ijson that keeps the first bytes it hands out (for the header), and refuses a
    stream nested deeper than ``MAX_DEPTH`` or a gzip stream that inflates like a bomb, before ijson
    builds anything of it."""

    def __init__(self, raw: BinaryIO, packed: BinaryIO | None = None) -> None:
        self.raw = raw
        self.packed = packed  # the compressed file under a gzip stream: its position is the bytes read
        self.head = bytearray()
        self.tail = b""  # the last TAIL_BYTES read (``parts.trailer_of``)
        self.read_bytes = 0
        self.depth = Depth()

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.raw.read(size)
        except (OSError, EOFError, zlib.error) as exc:  # gzip: a damaged or truncated stream
            raise TraceError(f"cannot be decompressed ({exc})") from None
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self.read_bytes += len(data)
        self.tail = (self.tail + data)[-TAIL_BYTES:] if data else self.tail
        if self.packed is not None and self.read_bytes > MAX_PLAIN and self.read_bytes > MAX_RATIO * self.packed.tell():
            raise TraceError(f"inflates to more than {MAX_RATIO} times its gzipped size (a real trace: about 20; "
                             f"a decompression bomb?); to import it anyway, gunzip it first")
        if self.depth.feed(data) > MAX_DEPTH:
            raise TraceError(f"nests JSON values more than {MAX_DEPTH} deep (a profiler trace: under 10)")
        return data



class _Union:
    """A growing union of [start, end) intervals, merged batch by batch as they come (never one
    interval list re-merged per event: merging every batch into the whole would be quadratic)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int]] = []
        self.chunks: list[np.ndarray] = []

    def add(self, start: int, end: int) -> None:
        self.pending.append((start, end))
        if len(self.pending) >= BATCH_EVENTS:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.chunks.append(merge_intervals(np.asarray(self.pending, np.int64)))
            self.pending = []
        if len(self.chunks) >= 16:
            self.chunks = [merge_intervals(np.concatenate(self.chunks))]

    def intervals(self) -> np.ndarray:
        self._flush()
        return merge_intervals(np.concatenate(self.chunks)) if self.chunks else np.zeros((0, 2), np.int64)

    def __bool__(self) -> bool:
        return bool(self.pending or self.chunks)


def read_rank(path: str | Path, spill: Path | None = None) -> RankTrace:
    """Read one rank's trace into a ``RankTrace`` (by byte ranges, in this process, its columns spilled to a
    file in ``spill`` where given; the streaming parser, in memory, where the fast path does not take the
    trace); a ``TraceError`` naming the file if it cannot."""
    path = Path(path)
    try:
        return ranges.read_fast(path, spill)
    except ranges.Fallback:
        return read_stream(path)


def read_stream(path: str | Path) -> RankTrace:
    """Stream one rank's trace into a ``RankTrace`` with ijson, event by event; a ``TraceError`` naming the file
    if it cannot (each sentence of a refused trace is this reader's)."""
    import ijson

    path = Path(path)
    try:
        raw, packed = open_trace(path)
    except OSError as exc:
        raise TraceError(f"{path} cannot be read: {exc.strerror or exc}.") from None
    recorder = _Recorder(raw, packed)
    spans = Spans()
    kernels = _Union()  # the GPU's kernels, memcpys and memsets (not NCCL's)
    # [memory] samples per device type (0 CPU, 1 CUDA): a GPU trace's memory is its GPU's
    mem_ts: dict[int, list[int]] = {0: [], 1: []}
    mem_bytes: dict[int, list[int]] = {0: [], 1: []}
    mem_reduced: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {0: [], 1: []}
    changes: dict[int, tuple[list[int], list[int]]] = {}  # per device type: (ts, Bytes) of PyTorch before 1.10
    threads: dict[Any, int] = {}
    events = 0
    header: dict[str, Any] | None = None
    base_ns: int | None = None
    step_threads: dict[Any, None] = {}  # in order (the set is made of them in this order)
    step_pid: int | None = None
    thread_busy: dict[Any, _Union] = {}  # each thread's operators
    gpu = False  # the trace has device tracks (kernels, memcpys, memsets)
    backward: dict[Any, _Union] = {}  # autograd nodes per thread
    gpu_rows: list[tuple[int, ...]] = []  # the GPU's own timeline: parts.GPU_ROW columns
    gpu_names: dict[str, int] = {}
    launches: list[tuple[int, ...]] = []  # the runtime calls launching them: parts.LAUNCH_ROW columns
    ops: list[tuple[int, ...]] = []  # the CPU's operators and modules those calls run in: parts.OP_ROW columns

    def ns(ts: Any, name: str) -> int:
        if not is_number(ts):
            raise wrong("an event whose ts is", ts, "a time in microseconds", name)
        if not abs(ts) < MAX_US:
            raise TraceError(f"has a time stamp out of range ({ts!r} microseconds)")
        return int(round(ts * 1000.0)) + (base_ns or 0)

    try:
        with raw:
            for event in ijson.items(recorder, "traceEvents.item", use_float=True):
                if header is None:
                    header = parse_header(bytes(recorder.head))
                    base_ns = header_fields(header)[0]
                events += 1
                if not isinstance(event, dict):
                    raise wrong(f"an entry of traceEvents (number {events}) that is", event, "an event (an object)")
                ph, name, cat = event.get("ph"), event.get("name"), event.get("cat")
                if not isinstance(ph, str):
                    raise wrong("an event whose ph is", ph, "a phase (\"X\", \"i\", ...)", name)
                if ph != "X" and ph != "i":
                    continue  # metadata, flows, counters: nothing the import reads
                if not isinstance(name, str):
                    raise wrong(f"an event (ph {ph!r}) whose name is", name, "a string")
                if ph == "i":
                    if name != "[memory]":
                        continue
                    args = args_of(event)
                    total = args.get("Total Allocated")
                    device = args.get("Device Type", 0)
                    if "Total Allocated" not in args and "Bytes" in args:  # PyTorch before 1.10: the change alone
                        _change(changes, args["Bytes"], device, lambda: ns(event.get("ts"), name))
                        continue
                    if not is_number(total):
                        raise wrong("a [memory] event whose Total Allocated is", total, "a size in bytes")
                    if not is_int(device):
                        raise wrong("a [memory] event whose Device Type is", device, "a device type (0 CPU, 1 CUDA)")
                    if device in (0, 1):  # other devices' memory is not the rank's
                        if not 0 <= total < 1 << 62:
                            raise TraceError(f"has a [memory] event whose Total Allocated is out of range ({total!r})")
                        mem_ts[device].append(ns(event.get("ts"), name))
                        mem_bytes[device].append(int(total))
                        if len(mem_ts[device]) >= BATCH_EVENTS:
                            mem_reduced[device].append(bucket_max(mem_ts[device], mem_bytes[device]))
                            mem_ts[device], mem_bytes[device] = [], []
                    continue
                if cat is not None and not isinstance(cat, str):
                    raise wrong("an event whose cat is", cat, "a category's name", name)
                cat = current_category(cat, name)
                start = ns(event.get("ts"), name)
                dur = event.get("dur")
                if not is_number(dur):
                    raise wrong("an event whose dur is", dur, "a duration in microseconds", name)
                if not 0 <= dur < MAX_US:
                    raise TraceError(f"has an event whose duration is negative or out of range ({name!r} at ts "
                                     f"{event.get('ts')})")
                end = start + int(round(dur * 1000.0))
                tid = event.get("tid")
                if tid is not None and not (is_int(tid) or isinstance(tid, str)):
                    raise wrong("an event whose tid is", tid, "a thread's id", name)
                if cat in GPU_CATS:
                    gpu = True
                    args = args_of(event)
                    kind = kernel_kind(cat, name)
                    group = group_of(args) if kind == KERNEL_KIND["communication"] else None
                    gpu_rows.append((start, end, stream_of(args, tid), kind, gpu_names.setdefault(name, len(gpu_names)),
                                     correlation_of(args), kernel_bytes(kind, args),
                                     -1 if group is None else gpu_names.setdefault(group, len(gpu_names))))
                    if COMM_FLIGHT.match(name):  # an NCCL kernel moves data: communication, not compute
                        spans.add(start, end, "comm_flight", -1, -1, -1, comm_bytes(args), name)
                    else:
                        kernels.add(start, end)
                    continue
                if cat in RUNTIME_CATS:
                    correlation = correlation_of(args_of(event))
                    if correlation >= 0:
                        launches.append((correlation, start, end, gpu_names.setdefault(name, len(gpu_names)),
                                         thread_key(tid)))
                    continue
                if cat == "cpu_op" or cat == "python_function" and name.startswith(MODULE):  # what launches run in
                    ops.append((start, end, thread_key(tid), gpu_names.setdefault(name, len(gpu_names)),
                                int(cat == "python_function")))
                if cat == "cpu_op" and name.startswith(AUTOGRAD):
                    backward.setdefault(tid, _Union()).add(start, end)
                else:
                    spans.gpu_track = cat == "gpu_user_annotation"
                    classify(spans, name, "user_annotation" if spans.gpu_track else cat, start, end, event)
                if cat == "cpu_op":  # the thread runs an operator (annotations only name what it runs)
                    threads[tid] = threads.get(tid, 0) + 1
                    thread_busy.setdefault(tid, _Union()).add(start, end)
                elif cat == "user_annotation" and STEP.match(name):
                    step_threads.setdefault(tid)
                    pid = event.get("pid")
                    if pid is not None and not (is_int(pid) and 0 <= pid < 1 << 62 or isinstance(pid, str)):
                        raise wrong("an event whose pid is", pid, "a process's id", name)
                    if step_pid is None and is_int(pid):
                        step_pid = pid
    except TraceError as exc:
        raise TraceError(f"{path} {exc}.") from None
    except ijson.common.IncompleteJSONError as exc:
        if recorder.read_bytes == 0:
            raise TraceError(f"{path} is empty.") from None
        reason = _reason(exc)
        what = "ends before its JSON does (truncated?)" if "incomplete" in reason.lower() or "premature" in \
            reason.lower() else f"is not valid JSON ({reason})"
        raise TraceError(f"{path} {what}.") from None
    except (ijson.common.JSONError, UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path} is not valid JSON ({_reason(exc)}).") from None
    if header is None:
        try:
            header = parse_header(bytes(recorder.head))
        except TraceError as exc:
            raise TraceError(f"{path} {exc}.") from None
        if events == 0 and recorder.read_bytes == 0:
            raise TraceError(f"{path} is empty.")
    memory = {}
    for device in (0, 1):
        if mem_ts[device]:
            mem_reduced[device].append(bucket_max(mem_ts[device], mem_bytes[device]))
        if mem_reduced[device]:
            memory[device] = bucket_max(np.concatenate([m[0] for m in mem_reduced[device]]),
                                        np.concatenate([m[1] for m in mem_reduced[device]]))
    part = RankPart(events=events, kernels=kernels.intervals(), threads=threads,
                busy={tid: u.intervals() for tid, u in thread_busy.items()},
                backward={tid: u.intervals() for tid, u in backward.items()},
                step_threads=list(step_threads), step_pid=step_pid, gpu=gpu, memory=memory,
                gpu_rows=np.asarray(gpu_rows, np.int64).reshape(-1, GPU_ROW), gpu_names=list(gpu_names),
                launches=np.asarray(launches, np.int64).reshape(-1, LAUNCH_ROW),
                ops=np.asarray(ops, np.int64).reshape(-1, OP_ROW))
    part.add_spans(spans)
    part.trailer = trailer_of(recorder.tail)
    part.changes = {d: (np.asarray(t, np.int64), np.asarray(b, np.int64)) for d, (t, b) in changes.items()}
    return assemble(str(path), header, part)


def _change(changes: dict[int, tuple[list[int], list[int]]], change: Any, device: Any, at: Any) -> None:
    """A ``[memory]`` event's change (``Bytes``: + an allocation, - a free) kept with its time (``at()``) under its
    device type (0 CPU, 1 CUDA; other devices' memory is not the rank's)."""
    if not is_number(change):
        raise wrong("a [memory] event whose Bytes is", change, "a change in bytes")
    if not is_int(device):
        raise wrong("a [memory] event whose Device Type is", device, "a device type (0 CPU, 1 CUDA)")
    if device in (0, 1):
        if not abs(change) < 1 << 62:
            raise TraceError(f"has a [memory] event whose Bytes is out of range ({change!r})")
        ts, nbytes = changes.setdefault(device, ([], []))
        ts.append(at())
        nbytes.append(int(change))


def _reason(exc: Exception) -> str:
    """The first line of a parser's message (yajl's comes as bytes, its second line quoting the text), cut
    short: the sentence quotes it."""
    text = exc.args[0] if exc.args else str(exc)
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    lines = text.strip().splitlines()
    return (lines[0].strip() if lines else type(exc).__name__)[:120]


