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

from popvision_py.errors import PopvisionError

MAX_US = 2.0**61 / 1000  # times in microseconds beyond this (73 years) do not fit int64 nanoseconds with the base
MAX_ID = 1 << 30  # a stage or micro-batch number beyond this is not a real run's
BATCH_EVENTS = 1 << 16  # events reduced at a time
HEAD_BYTES = 64 << 20  # the header must end (at "traceEvents") within this many bytes
MEMORY_BUCKET_NS = 10_000  # [memory] samples kept: the largest Total Allocated per 10 µs

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


class TraceError(PopvisionError):
    """A trace that is not a PyTorch profiler trace popvision can read (one sentence, exit 2)."""


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
    """A file object for ijson that keeps the first bytes it hands out (for the header)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.head = bytearray()
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.raw.read(size)
        except (OSError, EOFError, zlib.error) as exc:  # gzip: a damaged or truncated stream
            raise TraceError(f"cannot be decompressed ({exc})") from None
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self.read_bytes += len(data)
        return data


def _open(path: Path) -> BinaryIO:
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def parse_header(head: bytes) -> dict[str, Any]:
    """The top-level keys before ``"traceEvents"``: the header Kineto writes first."""
    at = head.find(b'"traceEvents"')
    if at < 0:
        raise TraceError('has no "traceEvents" array near its start: it is not a PyTorch profiler trace '
                         '(torch.profiler\'s export_chrome_trace writes one)')
    text = head[:at].rstrip()
    text = text[:-1] if text.endswith(b",") else text
    try:
        header = json.loads(text + b"}") if text.strip() != b"{" else {}
    except ValueError:
        raise TraceError("has a header that is not JSON before its \"traceEvents\" array") from None
    if not isinstance(header, dict):
        raise TraceError("is not a JSON object")
    return header


def _args(event: dict[str, Any]) -> dict[str, Any]:
    """An event's ``args``, or nothing where a hostile trace holds something other than an object there."""
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _number(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


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
    nelems = args.get("In msg nelems")
    if isinstance(nelems, int) and not isinstance(nelems, bool) and nelems >= 0:
        return nelems * DTYPE_BYTES.get(str(dtype), 4)
    types = args.get("Input type")
    kind = types[0] if isinstance(types, list) and types else None
    return _elements(args.get("Input Dims")) * DTYPE_BYTES.get(str(kind), 4)


def _peer(name: str, args: dict[str, Any]) -> int:
    """The other rank of a point-to-point call: ``c10d::send`` / ``c10d::recv_`` hold it as their third
    concrete input (dst / src); -1 for collectives and where it is not recorded."""
    if name in ("c10d::send", "c10d::recv_"):
        inputs = args.get("Concrete Inputs")
        if isinstance(inputs, list) and len(inputs) > 2:
            try:
                return int(inputs[2])
            except (TypeError, ValueError):
                return -1
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
        raw = _open(path)
    except OSError as exc:
        raise TraceError(f"{path} cannot be read: {exc.strerror or exc}.") from None
    recorder = _Recorder(raw)
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

    def ns(ts: Any) -> int:
        value = _number(ts)
        if not abs(value) < MAX_US:
            raise TraceError(f"has a time stamp out of range ({ts!r} microseconds)")
        return int(round(value * 1000.0)) + (base_ns or 0)

    try:
        with raw:
            for event in ijson.items(recorder, "traceEvents.item", use_float=True):
                if header is None:
                    header = parse_header(bytes(recorder.head))
                    base = header.get("baseTimeNanoseconds")
                    base_ns = int(base) if isinstance(base, int) and not isinstance(base, bool) and 0 < base < 1 << 62 else None
                events += 1
                if not isinstance(event, dict):
                    continue
                ph, name, cat = event.get("ph"), event.get("name"), event.get("cat")
                cat = cat if isinstance(cat, str) else None
                if not isinstance(name, str):
                    continue
                if ph == "i" and name == "[memory]":
                    args = _args(event)
                    total = args.get("Total Allocated")
                    device = args.get("Device Type", 0)
                    if isinstance(total, (int, float)) and not isinstance(total, bool) and device in (0, 1):
                        if not 0 <= total < 1 << 62:
                            raise TraceError(f"has a [memory] event whose Total Allocated is out of range ({total!r})")
                        mem_ts[device].append(ns(event.get("ts")))
                        mem_bytes[device].append(int(total))
                        if len(mem_ts[device]) >= BATCH_EVENTS:
                            mem_reduced[device].append(_bucket_max(mem_ts[device], mem_bytes[device]))
                            mem_ts[device], mem_bytes[device] = [], []
                    continue
                if ph != "X":
                    continue
                start = ns(event.get("ts"))
                dur = _number(event.get("dur"))
                if not 0 <= dur < MAX_US:
                    raise TraceError(f"has an event whose duration is negative or out of range ({name!r} at ts "
                                     f"{event.get('ts')})")
                end = start + int(round(dur * 1000.0))
                tid = event.get("tid")
                tid = tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None
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
                    if step_pid is None and isinstance(pid, int) and not isinstance(pid, bool) and 0 <= pid < 1 << 62:
                        step_pid = pid
    except TraceError as exc:
        raise TraceError(f"{path} {exc}.") from None
    except ijson.common.IncompleteJSONError as exc:
        if recorder.read_bytes == 0:
            raise TraceError(f"{path} is empty.") from None
        what = "ends before its JSON does (truncated?)" if "incomplete" in str(exc).lower() or "premature" in str(
            exc).lower() else f"is not valid JSON ({str(exc).strip().splitlines()[0][:120]})"
        raise TraceError(f"{path} {what}.") from None
    except (ijson.common.JSONError, UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path} is not valid JSON ({str(exc).strip()[:120]}).") from None
    if header is None:
        try:
            header = parse_header(bytes(recorder.head))
        except TraceError as exc:
            raise TraceError(f"{path} {exc}.") from None
        if events == 0 and recorder.read_bytes == 0:
            raise TraceError(f"{path} is empty.")
    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    rank = info.get("rank")
    world = info.get("world_size")
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
        rank=int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else -1,
        world_size=int(world) if isinstance(world, int) and not isinstance(world, bool) else None,
        main_thread=main, start=table[:, 0], end=table[:, 1], kind=table[:, 2].astype(np.int8),
        stage=table[:, 3].astype(np.int32), micro_batch=table[:, 4].astype(np.int32), peer=table[:, 5].astype(np.int32),
        nbytes=table[:, 6], name=table[:, 7].astype(np.int32), names=names, busy=busy_rows,
        memory_ts=memory_ts, memory_bytes=memory_bytes, events=events, gpu=gpu,
        torch_version=_torch_version(header), pid=step_pid)


def _main_thread(threads: dict[Any, int], step_threads: set[Any]) -> Any:
    """The thread that runs the training loop: the one holding ``ProfilerStep#N``, else the busiest."""
    if step_threads:
        return max(step_threads, key=lambda t: threads.get(t, 0))
    return max(threads, key=threads.get) if threads else None


def _torch_version(header: dict[str, Any]) -> str | None:
    for key in ("torch_version", "pytorch_version", "torchVersion"):
        if isinstance(header.get(key), str):
            return header[key]
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


def _classify(spans: _Spans, name: str, cat: Any, start: int, end: int, event: dict[str, Any]) -> None:
    """Keep ``event`` as a span if the import uses it (see the module docstring)."""
    if cat == "user_annotation":
        if (m := STEP.match(name)) is not None:
            spans.add(start, end, "step", -1, int(m.group(1)), -1, 0, name)
        elif (m := GPIPE.match(name)) is not None:
            spans.add(start, end, m.group(1).lower(), -1, int(m.group(2)), -1, 0, name)
        elif (m := PP_ACTION.match(name)) is not None:
            stage, action, mb = int(m.group(1)), m.group(2), int(m.group(3)) if m.group(3) else -1
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
            label = f"{name}:{args['Collective name']}" if isinstance(args.get("Collective name"), str) else name
            spans.add(start, end, "comm_call", -1, -1, _peer(name, args), _comm_bytes(args), label)
    elif cat == "python_function":
        if (m := CHUNK_FRAME.search(name)) is not None:
            spans.add(start, end, m.group(1), -1, -1, -1, 0, f"{m.group(1)}_one_chunk")
