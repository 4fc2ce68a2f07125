"""One rank's PyTorch profiler trace, streamed: the events the import needs, as columns.

A trace is the Chrome-trace JSON that ``torch.profiler`` (Kineto) writes, one file per rank, plain or
gzipped. Its header (``schemaVersion``, ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``,
...) comes before the ``traceEvents`` array; the events are parsed one at a time with ijson's C backend
(yajl), so memory does not grow with the file: each batch of events is reduced to the few columns
below and dropped. What is kept grows with the pipeline's actions, the communication calls and the
gaps between operators, not with the operators themselves:

- ``spans``: annotations (``user_annotation``: ``ProfilerStep#N``, ``Forward {i}``, ``PP:...``,
  ``Optimizer.step#...``), the pipeline stage's ``forward_one_chunk`` / ``backward_one_chunk`` Python
  frames (traces recorded ``with_stack``), communication calls (``c10d::...`` operators, which block
  the calling thread) and communication in flight (``gloo:...`` / ``nccl:...`` spans, and GPU kernels
  whose name starts with ``nccl``);
- ``busy``: the union of the operators' time on the rank's main thread (or of its GPU kernels), merged
  interval by interval;
- ``memory``: ``[memory]`` instants, reduced to the largest ``Total Allocated`` per 10 µs.

Times are integers of nanoseconds on one clock for every rank: ``ts`` is microseconds from
``baseTimeNanoseconds`` where the trace has it (current PyTorch) and absolute microseconds otherwise
(older traces, whose ``ts`` is already on the wall clock).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from popvision_py.importer.checks import (MAX_DEPTH, MAX_WORLD, Depth, TraceError, header_fields, is_dims,
                                          is_int, is_number, not_json, wrong)

MAX_US = 2.0**61 / 1000  # times in microseconds beyond this (73 years) do not fit int64 nanoseconds with the base
MAX_ID = 1 << 30  # a stage or micro-batch number beyond this is not a real run's
BATCH_EVENTS = 1 << 16  # events reduced at a time
HEAD_BYTES = 16 << 20  # the header must end (at "traceEvents") within this many bytes (Kineto's: a few KiB)
MEMORY_BUCKET_NS = 10_000  # [memory] samples kept: the largest Total Allocated per 10 µs
MAX_RATIO = 200  # a gzipped trace inflating more than this past its first MAX_PLAIN bytes is a bomb (real: ~20)
MAX_PLAIN = 16 << 20  # ... past this many bytes inflated (a small trace may inflate as it likes)

# What a span is, by its name (see ``span_kind``).
KINDS = ("step", "forward", "backward", "backward_input", "backward_weight", "update", "pp_comm", "pp_other",
         "comm_call", "comm_flight")
KIND = {name: i for i, name in enumerate(KINDS)}
PASS_OF_ACTION = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight"}
PP_ACTION = re.compile(r"PP:(\d+)(UNSHARD|RESHARD|SEND_F|RECV_F|SEND_B|RECV_B|REDUCE_GRAD|F|I|W|B)(\d*)$")
GPIPE = re.compile(r"(Forward|Backward) (\d+)$")
STEP = re.compile(r"ProfilerStep#(\d+)$")
COMM_CALL = re.compile(r"c10d::|record_param_comms$")
COMM_FLIGHT = re.compile(r"(gloo|nccl):|nccl[A-Za-z]*Kernel|ncclDevKernel")
DATA_PARALLEL_FORWARD = re.compile(r"(DistributedDataParallel|FullyShardedDataParallel|FSDP\w*)\.forward$")
AUTOGRAD = "autograd::engine::evaluate_function: "  # a backward node run by the autograd engine
CHUNK_FRAME = re.compile(r"pipelining/stage\.py\(\d+\): (forward|backward)_one_chunk$")
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
DTYPE_BYTES = {"float": 4, "float32": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "long int": 8,
               "int": 4, "half": 2, "bfloat16": 2, "bool": 1, "unsigned char": 1, "signed char": 1}


@dataclass
class RankTrace:
    """What the import keeps of one rank's trace (times in ns on the shared clock)."""

    path: str
    header: dict[str, Any]
    rank: int
    world_size: int | None
    main_thread: Any = None
    # spans: start, end, kind (KIND), stage, micro-batch, peer rank, bytes, name id
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    micro_batch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    peer: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    names: list[str] = field(default_factory=list)
    busy: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # merged [start, end) rows
    memory_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    memory_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    events: int = 0
    gpu: bool = False
    torch_version: str | None = None
    pid: int | None = None  # the process of the rank's training loop (its ProfilerStep#N annotations'), if known


class _Recorder:
    """A file object for ijson that keeps the first bytes it hands out (for the header), and refuses a
    stream nested deeper than ``MAX_DEPTH`` or a gzip stream that inflates like a bomb, before ijson
    builds anything of it."""

    def __init__(self, raw: BinaryIO, packed: BinaryIO | None = None) -> None:
        self.raw = raw
        self.packed = packed  # the compressed file under a gzip stream: its position is the bytes read
        self.head = bytearray()
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
        if self.packed is not None and self.read_bytes > MAX_PLAIN and self.read_bytes > MAX_RATIO * self.packed.tell():
            raise TraceError(f"inflates to more than {MAX_RATIO} times its gzipped size (a real trace: about 20; "
                             f"a decompression bomb?); to import it anyway, gunzip it first")
        if self.depth.feed(data) > MAX_DEPTH:
            raise TraceError(f"nests JSON values more than {MAX_DEPTH} deep (a profiler trace: under 10)")
        return data


def _open(path: Path) -> tuple[BinaryIO, BinaryIO | None]:
    """The file's JSON stream, and the compressed file beneath it where it is gzipped."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw  # type: ignore[return-value]
    return raw, None


def parse_header(head: bytes) -> dict[str, Any]:
    """The top-level keys before ``"traceEvents"``: the header Kineto writes first."""
    at = head.find(b'"traceEvents"')
    if at < 0:
        raise TraceError('has no "traceEvents" array near its start: it is not a PyTorch profiler trace '
                         '(torch.profiler\'s export_chrome_trace writes one)')
    text = head[:at].rstrip()
    text = text[:-1] if text.endswith(b",") else text
    try:
        header = json.loads(text + b"}", parse_constant=not_json) if text.strip() != b"{" else {}
    except (ValueError, RecursionError):
        raise TraceError("has a header that is not JSON before its \"traceEvents\" array") from None
    if not isinstance(header, dict):
        raise TraceError("is not a JSON object")
    return header


def _args(event: dict[str, Any]) -> dict[str, Any]:
    """An event's ``args`` (an object, or none at all)."""
    args = event.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise wrong("an event whose args is", args, "an object", event.get("name"))
    return args


def _elements(dims: Any) -> int:
    """Elements of the first tensor (or tensor list) in ``Input Dims``."""
    if not isinstance(dims, list) or not dims:
        return 0
    first = dims[0]
    shapes = first if first and isinstance(first[0], list) else [first]
    total = 0
    for shape in shapes:
        if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
            total += math.prod(shape)  # Python ints: a hostile shape cannot wrap around
    return total


def _comm_bytes(args: dict[str, Any]) -> int:
    """Bytes a communication event moves: ``In msg nelems`` x the dtype (``record_param_comms``), else
    the first input's elements (``Input Dims``) x its type (``Input type``), as gloo records them."""
    dtype = args.get("dtype")
    if dtype is not None and not isinstance(dtype, str):
        raise wrong("a communication event whose dtype is", dtype, "a type's name")
    nelems = args.get("In msg nelems")
    if nelems is not None:
        if not (is_int(nelems) and nelems >= 0):
            raise wrong("a communication event whose In msg nelems is", nelems, "a count of elements")
        return nelems * DTYPE_BYTES.get(str(dtype), 4)
    types = args.get("Input type")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise wrong("a communication event whose Input type is", types, "an array of types' names")
    dims = args.get("Input Dims")
    if dims is not None and not is_dims(dims):
        raise wrong("a communication event whose Input Dims is", dims, "an array of shapes")
    kind = types[0] if types else None
    return _elements(dims) * DTYPE_BYTES.get(str(kind), 4)


def _peer(name: str, args: dict[str, Any]) -> int:
    """The other rank of a point-to-point call: ``c10d::send`` / ``c10d::recv_`` hold it as their third
    concrete input (dst / src); -1 for collectives and where it is not recorded."""
    if name in ("c10d::send", "c10d::recv_"):
        inputs = args.get("Concrete Inputs")
        if inputs is None:
            return -1  # older PyTorch records no concrete inputs
        peer = inputs[2] if isinstance(inputs, list) and len(inputs) > 2 else None
        if is_int(peer) and 0 <= peer < MAX_WORLD:
            return peer
        if not (isinstance(peer, str) and peer.isdigit() and len(peer) < 10 and int(peer) < MAX_WORLD):
            raise wrong(f"a {name} whose peer (Concrete Inputs[2]) is", peer, "a rank", name)
        return int(peer)
    return -1


class _Spans:
    """Growing columns of spans."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int, int, int, int]] = []
        self.names: dict[str, int] = {}
        self.on_gpu: list[bool] = []  # the span is on a GPU track (a gpu_user_annotation)

    def add(self, start: int, end: int, kind: str, stage: int, micro_batch: int, peer: int, nbytes: int,
            name: str) -> None:
        if max(stage, micro_batch, peer) >= MAX_ID or nbytes >= 1 << 62:
            raise TraceError(f"names a stage, micro-batch, rank or size out of range in {name[:80]!r}")
        code = self.names.setdefault(name, len(self.names))
        self.rows.append((start, end, KIND[kind], stage, micro_batch, peer, nbytes, code))
        self.on_gpu.append(self.gpu_track)

    gpu_track = False


def merge_intervals(intervals: np.ndarray) -> np.ndarray:
    """The union of [start, end) rows, as sorted disjoint rows."""
    if len(intervals) == 0:
        return intervals.reshape(0, 2)
    order = np.argsort(intervals[:, 0], kind="stable")
    start, end = intervals[order, 0], intervals[order, 1]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(start) - 1)
    return np.stack([start[first], reach[last]], axis=1)


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


def read_rank(path: str | Path) -> RankTrace:
    """Stream one rank's trace into a ``RankTrace``; a ``TraceError`` naming the file if it cannot."""
    import ijson

    path = Path(path)
    try:
        raw, packed = _open(path)
    except OSError as exc:
        raise TraceError(f"{path} cannot be read: {exc.strerror or exc}.") from None
    recorder = _Recorder(raw, packed)
    spans = _Spans()
    kernels = _Union()  # the GPU's kernels, memcpys and memsets (not NCCL's)
    # [memory] samples per device type (0 CPU, 1 CUDA): a GPU trace's memory is its GPU's
    mem_ts: dict[int, list[int]] = {0: [], 1: []}
    mem_bytes: dict[int, list[int]] = {0: [], 1: []}
    mem_reduced: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {0: [], 1: []}
    threads: dict[Any, int] = {}
    events = 0
    header: dict[str, Any] | None = None
    base_ns: int | None = None
    step_threads: set[Any] = set()
    step_pid: int | None = None
    thread_busy: dict[Any, _Union] = {}  # each thread's operators
    gpu = False  # the trace has device tracks (kernels, memcpys, memsets)
    backward: dict[Any, _Union] = {}  # autograd nodes per thread

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
                    args = _args(event)
                    total = args.get("Total Allocated")
                    device = args.get("Device Type", 0)
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
                            mem_reduced[device].append(_bucket_max(mem_ts[device], mem_bytes[device]))
                            mem_ts[device], mem_bytes[device] = [], []
                    continue
                if cat is not None and not isinstance(cat, str):
                    raise wrong("an event whose cat is", cat, "a category's name", name)
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
                    if COMM_FLIGHT.match(name):  # an NCCL kernel moves data: communication, not compute
                        args = _args(event)
                        spans.add(start, end, "comm_flight", -1, -1, -1, _comm_bytes(args), name)
                    else:
                        kernels.add(start, end)
                    continue
                if cat == "cpu_op" and name.startswith(AUTOGRAD):
                    backward.setdefault(tid, _Union()).add(start, end)
                else:
                    spans.gpu_track = cat == "gpu_user_annotation"
                    _classify(spans, name, "user_annotation" if spans.gpu_track else cat, start, end, event)
                if cat == "cpu_op":  # the thread runs an operator (annotations only name what it runs)
                    threads[tid] = threads.get(tid, 0) + 1
                    thread_busy.setdefault(tid, _Union()).add(start, end)
                elif cat == "user_annotation" and STEP.match(name):
                    step_threads.add(tid)
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
    try:
        _, rank, world = header_fields(header)
    except TraceError as exc:
        raise TraceError(f"{path} {exc}.") from None
    if gpu:
        busy_rows = kernels.intervals()
        main = None
    else:
        main = _main_thread(threads, step_threads)
        busy_rows = thread_busy[main].intervals() if main in thread_busy else np.zeros((0, 2), np.int64)
    # autograd's backward nodes: a backward pass where no annotation names one (DDP, FSDP, 1F1B without stack)
    nodes = (backward[main].intervals() if main in backward else
             merge_intervals(np.concatenate([u.intervals() for u in backward.values()])) if gpu and backward
             else np.zeros((0, 2), np.int64))
    if len(nodes):
        spans.names.setdefault("autograd", len(spans.names))
    for device in (0, 1):
        if mem_ts[device]:
            mem_reduced[device].append(_bucket_max(mem_ts[device], mem_bytes[device]))
    kept = mem_reduced[1] if (gpu or not mem_reduced[0]) and mem_reduced[1] else mem_reduced[0]
    memory_ts = np.concatenate([m[0] for m in kept]) if kept else np.zeros(0, np.int64)
    memory_bytes = np.concatenate([m[1] for m in kept]) if kept else np.zeros(0, np.int64)
    table = np.asarray(spans.rows, np.int64).reshape(-1, 8)
    on_gpu = np.asarray(spans.on_gpu, bool)
    if len(nodes):
        extra = np.zeros((len(nodes), 8), np.int64)
        extra[:, 0:2] = nodes
        extra[:, 2] = KIND["backward"]
        extra[:, 3:6] = -1
        extra[:, 7] = spans.names["autograd"]
        table = np.concatenate([table, extra])
        on_gpu = np.concatenate([on_gpu, np.zeros(len(nodes), bool)])
    if gpu and on_gpu.any():
        # a GPU trace: the passes' time is their GPU-side annotations' (when their kernels ran), not the
        # CPU's (when they were launched); profiler steps and communication calls stay on the CPU's clock
        work = np.isin(table[:, 2], [KIND[k] for k in ("forward", "backward", "backward_input", "backward_weight",
                                                        "update", "pp_comm", "pp_other")])
        table = table[~(work & ~on_gpu)]
    names = list(spans.names)
    return RankTrace(
        path=str(path), header={k: v for k, v in header.items() if k != "traceEvents"},
        rank=rank, world_size=world,
        main_thread=main, start=table[:, 0], end=table[:, 1], kind=table[:, 2].astype(np.int8),
        stage=table[:, 3].astype(np.int32), micro_batch=table[:, 4].astype(np.int32), peer=table[:, 5].astype(np.int32),
        nbytes=table[:, 6], name=table[:, 7].astype(np.int32), names=names, busy=busy_rows,
        memory_ts=memory_ts, memory_bytes=memory_bytes, events=events, gpu=gpu,
        torch_version=_torch_version(header), pid=step_pid)


def _reason(exc: Exception) -> str:
    """The first line of a parser's message (yajl's comes as bytes, its second line quoting the text), cut
    short: the sentence quotes it."""
    text = exc.args[0] if exc.args else str(exc)
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    lines = text.strip().splitlines()
    return (lines[0].strip() if lines else type(exc).__name__)[:120]


def _main_thread(threads: dict[Any, int], step_threads: set[Any]) -> Any:
    """The thread that runs the training loop: the one holding ``ProfilerStep#N``, else the busiest."""
    if step_threads:
        return max(step_threads, key=lambda t: threads.get(t, 0))
    return max(threads, key=threads.get) if threads else None


def _torch_version(header: dict[str, Any]) -> str | None:
    for key in ("torch_version", "pytorch_version", "torchVersion"):
        if isinstance(header.get(key), str):
            return header[key][:200]
    return None


def _bucket_max(ts: list[int], total: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The largest Total Allocated per ``MEMORY_BUCKET_NS``, at the time of that largest sample."""
    t = np.asarray(ts, np.int64)
    b = np.asarray(total, np.int64)
    order = np.lexsort((-b, t // MEMORY_BUCKET_NS))
    t, b = t[order], b[order]
    bucket = t // MEMORY_BUCKET_NS
    first = np.ones(len(t), bool)
    first[1:] = bucket[1:] != bucket[:-1]
    return t[first], b[first]


def _id(digits: str) -> int:
    """A step, stage or micro-batch number of a span's name; beyond 18 digits, one ``_Spans.add`` refuses (Python's
    int() itself refuses 4,300 digits)."""
    return int(digits) if len(digits) <= 18 else MAX_ID


def _classify(spans: _Spans, name: str, cat: Any, start: int, end: int, event: dict[str, Any]) -> None:
    """Keep ``event`` as a span if the import uses it (see the module docstring)."""
    if cat == "user_annotation":
        if (m := STEP.match(name)) is not None:
            spans.add(start, end, "step", -1, _id(m.group(1)), -1, 0, name)
        elif (m := GPIPE.match(name)) is not None:
            spans.add(start, end, m.group(1).lower(), -1, _id(m.group(2)), -1, 0, name)
        elif (m := PP_ACTION.match(name)) is not None:
            stage, action, mb = _id(m.group(1)), m.group(2), _id(m.group(3)) if m.group(3) else -1
            kind = PASS_OF_ACTION.get(action) or ("pp_comm" if action in ("SEND_F", "RECV_F", "SEND_B", "RECV_B",
                                                                          "REDUCE_GRAD") else "pp_other")
            spans.add(start, end, kind, stage, mb, -1, 0, name)
        elif name.startswith("Optimizer.step#"):
            spans.add(start, end, "update", -1, -1, -1, 0, name)
        elif DATA_PARALLEL_FORWARD.match(name):
            spans.add(start, end, "forward", -1, -1, -1, 0, name)
        elif COMM_FLIGHT.match(name):
            args = _args(event)
            spans.add(start, end, "comm_flight", -1, -1, -1, _comm_bytes(args), name)
    elif cat == "cpu_op":
        if COMM_CALL.match(name):
            args = _args(event)
            collective = args.get("Collective name")
            if collective is not None and not isinstance(collective, str):
                raise wrong("a communication call whose Collective name is", collective, "a name", name)
            label = f"{name}:{collective[:80]}" if collective is not None else name
            spans.add(start, end, "comm_call", -1, -1, _peer(name, args), _comm_bytes(args), label)
    elif cat == "python_function":
        if (m := CHUNK_FRAME.search(name)) is not None:
            spans.add(start, end, m.group(1), -1, -1, -1, 0, f"{m.group(1)}_one_chunk")
