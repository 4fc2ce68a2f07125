"""What the import keeps of one rank's trace, and the rules it keeps it by, shared by both readers.

``read.read_stream`` (ijson, event by event) and ``ranges`` (msgspec, a byte range of events at a
time) each reduce events to a ``RankPart``; the parts of a rank, merged in order, become its ``RankTrace``
(``assemble``). Each rule is written once here: which events are spans (``classify``), the bytes a
communication moves (``comm_bytes``), the peer of a point-to-point call (``peer``), the largest
``Total Allocated`` per 10 µs (``bucket_max``; older traces' ``Bytes`` changes: ``memory_changes``), and
today's name of each category older PyTorch wrote (``OLD_CATEGORIES``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from popvision_py.importer.checks import MAX_WORLD, TraceError, header_fields, is_int, not_json, wrong
from popvision_py.importer.kernels import (GPU_ROW, KERNEL_COLUMNS, LAUNCH_ROW, OP_ROW, comm_bytes, gpu_timeline,
                                           renamed, stream_of)
from popvision_py.importer.memory_changes import changed_levels, check_memory_kinds

MAX_US = 2.0**61 / 1000  # times in microseconds beyond this (73 years) do not fit int64 nanoseconds with the base
MAX_ID = 1 << 30  # a stage or micro-batch number beyond this is not a real run's
BATCH_EVENTS = 1 << 16  # events reduced at a time (streaming)
HEAD_BYTES = 16 << 20  # the header must end (at "traceEvents") within this many bytes (Kineto's: a few KiB)
MEMORY_BUCKET_NS = 10_000  # [memory] samples kept: the largest Total Allocated per 10 µs
MAX_RATIO = 200  # a gzipped trace inflating more than this past its first MAX_PLAIN bytes is a bomb (real: ~20)
MAX_PLAIN = 16 << 20  # ... past this many bytes inflated (a small trace may inflate as it likes)

# What a span is, by its name (see ``span_kind``).
KINDS = ("step", "forward", "backward", "backward_input", "backward_weight", "update", "pp_comm", "pp_other",
         "comm_call", "comm_flight", "input", "annotation", "gpu_annotation")
KIND = {name: i for i, name in enumerate(KINDS)}
# The spans kept for the GPU's figures alone (analysis.imported.bound), never a pass or a row: the training loop's
# DataLoader fetches (``input``), and every other annotation the trace names, on the CPU or the GPU's track
ANNOTATION_KINDS = (KIND["input"], KIND["annotation"], KIND["gpu_annotation"])
DATALOADER = re.compile(r"enumerate\(DataLoader\)#.*__next__$")  # torch.utils.data's own record_function
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

@dataclass
class RankTrace:
    """What the import keeps of one rank's trace (times in ns on the shared clock)."""

    path: str
    header: dict[str, Any]
    rank: int
    world_size: int | None
    main_thread: Any = None
    # spans: start, end, kind (KIND), stage, micro-batch, peer rank (a GPU annotation's: its stream), bytes, name id
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
    # the GPU's kernels, copies and sets by start: KERNEL_COLUMNS (names: codes into kernel_names)
    kernels: np.ndarray = field(default_factory=lambda: np.zeros((0, len(KERNEL_COLUMNS)), np.int64))
    kernel_names: list[str] = field(default_factory=list)
    events: int = 0
    gpu: bool = False
    memory_changes: bool = False  # memory is the running total of the trace's Bytes changes (``memory_changes``)
    torch_version: str | None = None
    pid: int | None = None  # the process of the rank's training loop (its ProfilerStep#N annotations'), if known
    spill: Any = field(default=None, repr=False, compare=False)  # the file its arrays map (spill.SpilledRank)



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



TAIL_BYTES = 1 << 16  # keys after traceEvents are looked for in the stream's last bytes (Kineto's: a few hundred)


def trailer_of(tail: bytes) -> dict[str, Any]:
    """The ``distributedInfo`` a trace writes after its events (PyTorch's own traces put it first; some tools
    append it), from the stream's last bytes; empty if it is not there or does not decode as an object."""
    at = tail.rfind(b'"distributedInfo"')
    colon = tail.find(b":", at) if at >= 0 else -1
    if colon < 0:
        return {}
    try:
        info, _ = json.JSONDecoder().raw_decode(tail[colon + 1:].decode("utf-8", "replace").lstrip())
    except ValueError:
        return {}
    return {"distributedInfo": info} if isinstance(info, dict) else {}


def with_trailer(header: dict[str, Any], trailer: dict[str, Any]) -> dict[str, Any]:
    """The header, with the ``distributedInfo`` written after the events where the header has none."""
    return {**header, **trailer} if trailer and "distributedInfo" not in header else header


def args_of(event: dict[str, Any]) -> dict[str, Any]:
    """An event's ``args`` (an object, or none at all)."""
    args = event.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise wrong("an event whose args is", args, "an object", event.get("name"))
    return args


def peer(name: str, args: dict[str, Any]) -> int:
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


class Spans:
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


def any_of(values: np.ndarray, codes: Any) -> np.ndarray:
    """Whether each of ``values`` is one of the few ``codes``: ``np.isin``'s answer by one comparison a code, which on a
    small rank's few rows costs a tenth of isin's set-up (a job of thousands of ranks makes dozens a rank)."""
    values = np.asarray(values)
    out = np.zeros(values.shape, bool)
    for code in codes:
        out |= values == code
    return out


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


def _main_thread(threads: dict[Any, int], step_threads: set[Any]) -> Any:
    """The thread that runs the training loop: the one holding ``ProfilerStep#N``, else the busiest."""
    if step_threads:
        return max(step_threads, key=lambda t: threads.get(t, 0))
    return max(threads, key=threads.get) if threads else None


# PyTorch 1.8 to 1.12's Kineto named these categories otherwise: each old name, and today's, which both readers
# read a trace's categories as (``current_category``, ``current_categories``)
OLD_CATEGORIES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                  "Operator": "cpu_op", "gpu_user_Annotation": "gpu_user_annotation"}
OLD_OPERATOR = "Operator"  # before user_annotation, record_function's spans (ProfilerStep#N, Forward {i}) were these


def current_category(cat: Any, name: str) -> Any:
    """A category as the import reads it: today's name for an older one (``OLD_CATEGORIES``), an old ``Operator``
    that the import keeps as an annotation (``is_annotation_span``: ``ProfilerStep#N``...) a ``user_annotation``."""
    if cat == OLD_OPERATOR and is_annotation_span(name):
        return "user_annotation"
    return OLD_CATEGORIES.get(cat, cat) if isinstance(cat, str) else cat


def current_categories(code: np.ndarray, cats: list[Any], annotation: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """``current_category`` of events by their codes into ``cats``; ``annotation``: whether each event's name is
    one the import keeps as an annotation."""
    now = [OLD_CATEGORIES.get(c, c) if isinstance(c, str) else c for c in cats]
    if OLD_OPERATOR not in cats:
        return code, now
    if "user_annotation" not in now:
        now.append("user_annotation")
    return np.where((code == cats.index(OLD_OPERATOR)) & annotation, now.index("user_annotation"), code), now


def torch_version(header: dict[str, Any]) -> str | None:
    for key in ("torch_version", "pytorch_version", "torchVersion"):
        if isinstance(header.get(key), str):
            return header[key][:200]
    return None


def bucket_max(ts: Any, total: Any) -> tuple[np.ndarray, np.ndarray]:
    """The largest Total Allocated per ``MEMORY_BUCKET_NS``, at the time of that largest sample (the first
    such sample where several are largest): reduced again, reductions of a rank's stretches in order give
    the reduction of the whole."""
    t = np.asarray(ts, np.int64)
    b = np.asarray(total, np.int64)
    order = np.lexsort((-b, t // MEMORY_BUCKET_NS))
    t, b = t[order], b[order]
    bucket = t // MEMORY_BUCKET_NS
    first = np.ones(len(t), bool)
    first[1:] = bucket[1:] != bucket[:-1]
    return t[first], b[first]


def _id(digits: str) -> int:
    """A step, stage or micro-batch number of a span's name; beyond 18 digits, one ``Spans.add`` refuses (Python's
    int() itself refuses 4,300 digits)."""
    return int(digits) if len(digits) <= 18 else MAX_ID


def classify(spans: Spans, name: str, cat: Any, start: int, end: int, event: dict[str, Any]) -> None:
    """Keep ``event`` as a span if the import uses it (see ``read``'s docstring)."""
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
            args = args_of(event)
            spans.add(start, end, "comm_flight", -1, -1, -1, comm_bytes(args), name)
        elif spans.gpu_track:  # its stream in the peer's column: Kineto draws one span per stream
            stream = stream_of(args_of(event), event.get("tid"))
            spans.add(start, end, "gpu_annotation", -1, -1, stream if stream < MAX_ID else -1, 0, name)
        else:
            spans.add(start, end, "input" if DATALOADER.match(name) else "annotation", -1, -1, -1, 0, name)
    elif cat == "cpu_op":
        if COMM_CALL.match(name):
            args = args_of(event)
            collective = args.get("Collective name")
            if collective is not None and not isinstance(collective, str):
                raise wrong("a communication call whose Collective name is", collective, "a name", name)
            label = f"{name}:{collective[:80]}" if collective is not None else name
            spans.add(start, end, "comm_call", -1, -1, peer(name, args), comm_bytes(args), label)
    elif cat == "python_function":
        if (m := CHUNK_FRAME.search(name)) is not None:
            spans.add(start, end, m.group(1), -1, -1, -1, 0, f"{m.group(1)}_one_chunk")


def is_annotation_span(name: str) -> bool:
    """Whether ``classify`` reads an annotation (``user_annotation``) of this name as a step, a pass, the update or
    communication: an older trace's ``Operator`` of such a name is taken as an annotation (``current_category``);
    others stay operators (``classify`` keeps any other ``user_annotation`` as an ``annotation`` span)."""
    return bool(STEP.match(name) or GPIPE.match(name) or PP_ACTION.match(name) or name.startswith("Optimizer.step#")
                or DATA_PARALLEL_FORWARD.match(name) or COMM_FLIGHT.match(name))


def _empty_rows() -> np.ndarray:
    return np.zeros((0, 8), np.int64)


def _empty_intervals() -> np.ndarray:
    return np.zeros((0, 2), np.int64)


@dataclass
class RankPart:
    """What a stretch of a rank's events reduces to; a rank's parts, merged in order, are the rank's."""

    events: int = 0
    rows: np.ndarray = field(default_factory=_empty_rows)  # spans: start, end, kind, stage, mb, peer, bytes, name
    on_gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # the span is a GPU track's
    names: list[str] = field(default_factory=list)  # the spans' names, by their codes
    kernels: np.ndarray = field(default_factory=_empty_intervals)  # union of GPU kernels, memcpys, memsets
    threads: dict[Any, int] = field(default_factory=dict)  # operators per thread, in order of first appearance
    busy: dict[Any, np.ndarray] = field(default_factory=dict)  # union of each thread's operators
    backward: dict[Any, np.ndarray] = field(default_factory=dict)  # union of each thread's autograd nodes
    step_threads: list[Any] = field(default_factory=list)  # threads holding ProfilerStep#N, in order
    step_pid: int | None = None
    gpu: bool = False
    memory: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # per device: bucket_max
    changes: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # per device: (ts, Bytes), as read
    gpu_rows: np.ndarray = field(default_factory=lambda: np.zeros((0, GPU_ROW), np.int64))  # KERNEL_COLUMNS[:GPU_ROW]
    gpu_names: list[str] = field(default_factory=list)  # the kernels' names, by their codes
    launches: np.ndarray = field(default_factory=lambda: np.zeros((0, LAUNCH_ROW), np.int64))  # LAUNCH_ROW columns
    ops: np.ndarray = field(default_factory=lambda: np.zeros((0, OP_ROW), np.int64))  # OP_ROW columns (gpu_names)
    trailer: dict[str, Any] = field(default_factory=dict)  # the distributedInfo after the events (``trailer_of``)

    def add_spans(self, spans: Spans) -> None:
        self.rows = np.asarray(spans.rows, np.int64).reshape(-1, 8)
        self.on_gpu = np.asarray(spans.on_gpu, bool)
        self.names = list(spans.names)


class Merger:
    """A rank's parts merged as they come, in order: interval unions re-merged every few parts, so that
    what is held stays near the rank's result."""

    EVERY = 16

    def __init__(self) -> None:
        self.parts: list[RankPart] = []
        self.whole = self.empty = RankPart()

    def add(self, part: RankPart) -> None:
        self.parts.append(part)
        if len(self.parts) >= self.EVERY:
            self._fold()

    def result(self) -> RankPart:
        self._fold()
        return self.whole

    def trace(self, path: str, header: dict[str, Any]) -> RankTrace:
        """The rank's ``RankTrace`` from the parts merged (``assemble``), as ``spill.SpilledRank.trace`` makes it
        from the parts it spilled."""
        return assemble(path, header, self.result())

    def _fold(self) -> None:
        parts = [self.whole, *self.parts]
        self.parts = []
        if len(parts) == 1:
            return
        if len(parts) == 2 and self.whole is self.empty:  # one part (a small rank's one range): the rank's already,
            self.whole = parts[1]  # its names coded once each and its unions merged (its fold was a tenth of its read)
            return
        names: dict[str, int] = {}
        rows = []
        for p in parts:
            codes = np.array([names.setdefault(n, len(names)) for n in p.names], np.int64)
            r = p.rows.copy()
            if len(r):
                r[:, 7] = codes[r[:, 7]]
            rows.append(r)
        gpu_names: dict[str, int] = {}
        gpu_codes = [np.array([gpu_names.setdefault(n, len(gpu_names)) for n in p.gpu_names] + [-1], np.int64)
                     for p in parts]  # the last: -1 (no group) stays -1
        whole = RankPart(events=sum(p.events for p in parts), rows=np.concatenate(rows),
                     gpu_rows=np.concatenate([renamed(renamed(p.gpu_rows, 4, c), 7, c)
                                              for p, c in zip(parts, gpu_codes)]),
                     gpu_names=list(gpu_names),
                     launches=np.concatenate([renamed(p.launches, 3, c) for p, c in zip(parts, gpu_codes)]),
                     ops=np.concatenate([renamed(p.ops, 3, c) for p, c in zip(parts, gpu_codes)]),
                     on_gpu=np.concatenate([p.on_gpu for p in parts]), names=list(names),
                     kernels=merge_intervals(np.concatenate([p.kernels for p in parts])),
                     step_threads=list(dict.fromkeys(t for p in parts for t in p.step_threads)),
                     step_pid=next((p.step_pid for p in parts if p.step_pid is not None), None),
                     gpu=any(p.gpu for p in parts), trailer=next((p.trailer for p in parts if p.trailer), {}))
        for p in parts:
            for tid, n in p.threads.items():
                whole.threads[tid] = whole.threads.get(tid, 0) + n
        for key in ("busy", "backward"):
            merged: dict[Any, list[np.ndarray]] = {}
            for p in parts:
                for tid, rows_ in getattr(p, key).items():
                    merged.setdefault(tid, []).append(rows_)
            setattr(whole, key, {tid: merge_intervals(np.concatenate(v)) for tid, v in merged.items()})
        for device in (0, 1):
            got = [p.memory[device] for p in parts if device in p.memory]
            if got:
                whole.memory[device] = bucket_max(np.concatenate([g[0] for g in got]),
                                                  np.concatenate([g[1] for g in got]))
            got = [p.changes[device] for p in parts if device in p.changes]
            if got:  # in the parts' order: cumulated once the rank is whole (``assemble``)
                whole.changes[device] = (np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got]))
        self.whole = whole


@dataclass
class Choice:
    """What ``assemble`` takes of a rank's parts: the training thread, whose operators are the busy rows
    (the GPU's kernels' where ``kernels``), whose autograd nodes are backward passes (every thread's where
    ``all_backward``), and the device whose memory is the rank's."""

    main: Any
    kernels: bool
    backward: list[Any]
    memory: int | None


def choose(gpu: bool, threads: dict[Any, int], step_threads: list[Any], backward: Any, memory: Any) -> Choice:
    """The ``Choice`` for a rank's parts: ``threads`` (operators per thread), ``step_threads``, and the threads
    with autograd nodes (``backward``) and devices with memory samples (``memory``), in order."""
    main = None if gpu else _main_thread(threads, set(step_threads))
    nodes = [main] if main in backward else list(backward) if gpu else []
    kept = 1 if (gpu or 0 not in memory) and 1 in memory else 0 if 0 in memory else None
    return Choice(main, gpu, nodes, kept)


GPU_PASS_WORK = tuple(KIND[k] for k in ("forward", "backward", "backward_input", "backward_weight", "update",
                                        "pp_comm", "pp_other"))
COMM_ANNOTATION = re.compile(r"(gloo|nccl):")  # the CPU's or the GPU's annotation of a collective, not its kernel


def comm_annotations(names: list[str]) -> np.ndarray:
    """Whether each of the spans' names (then -1, none) is a collective's annotation (``COMM_ANNOTATION``): once a
    rank, for ``gpu_work_dropped``."""
    return np.array([bool(COMM_ANNOTATION.match(n)) for n in names] + [False], bool)


def gpu_work_dropped(kind: np.ndarray, on_gpu: np.ndarray, name: np.ndarray, annotation: np.ndarray,
                     gpu_passes: bool) -> np.ndarray:
    """The spans of a GPU trace that are not kept: where the trace has GPU-side annotations (``gpu_passes``), its
    passes' time is theirs (when their kernels ran), not the CPU's (when they were launched); a collective's
    time and bytes are its kernels', not its annotations' (``nccl:all_reduce`` on the CPU or the GPU: no bytes).
    Profiler steps (Kineto copies ``ProfilerStep#N`` onto the GPU's track: the copy is dropped) and communication
    calls stay on the CPU's clock. ``annotation``: ``comm_annotations`` of the spans' names."""
    work = any_of(kind, GPU_PASS_WORK)
    annotated = annotation[name]
    gpu_step = (kind == KIND["step"]) & on_gpu  # Kineto's copy of a ProfilerStep on the GPU's track: not a step
    return (work & ~on_gpu if gpu_passes else np.zeros(len(kind), bool)) | (kind == KIND["comm_flight"]) & annotated \
        | gpu_step


def assemble(path: str, header: dict[str, Any], part: RankPart) -> RankTrace:
    """A rank's ``RankTrace`` from its whole ``RankPart``: the training thread, its operators' union (or the GPU's
    kernels'), the backward passes no annotation names, the memory of the rank's device."""
    header = with_trailer(header, part.trailer)
    try:
        _, rank, world = header_fields(header)
    except TraceError as exc:
        raise TraceError(f"{path} {exc}.") from None
    names = list(part.names)
    check_memory_kinds(path, part.memory, part.changes)
    choice = choose(part.gpu, part.threads, part.step_threads, part.backward, {**part.memory, **part.changes})
    busy_rows = part.kernels if choice.kernels else part.busy.get(choice.main, _empty_intervals())
    # autograd's backward nodes: a backward pass where no annotation names one (DDP, FSDP, 1F1B without stack)
    got = [part.backward[t] for t in choice.backward]
    nodes = got[0] if len(got) == 1 else merge_intervals(np.concatenate(got)) if got else _empty_intervals()
    table, on_gpu = part.rows, part.on_gpu
    if len(nodes):
        if "autograd" not in names:
            names.append("autograd")
        table = np.concatenate([table, autograd_rows(nodes, names.index("autograd"))])
        on_gpu = np.concatenate([on_gpu, np.zeros(len(nodes), bool)])
    if part.gpu:
        table = table[~gpu_work_dropped(table[:, 2], on_gpu, table[:, 7], comm_annotations(names),
                                        bool(on_gpu.any()))]
    kernels, kernel_names = gpu_timeline(part.gpu_rows, part.gpu_names, part.launches, part.ops if part.gpu else None)
    kept = part.memory.get(choice.memory) if choice.memory is not None else None
    changes = part.changes.get(choice.memory) if choice.memory is not None else None
    if changes is not None:
        try:
            kept = bucket_max(*changed_levels(*changes))
        except TraceError as exc:
            raise TraceError(f"{path} {exc}.") from None
    memory_ts, memory_bytes = kept if kept is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return RankTrace(
        path=str(path), header={k: v for k, v in header.items() if k != "traceEvents"},
        rank=rank, world_size=world,
        main_thread=choice.main, start=table[:, 0], end=table[:, 1], kind=table[:, 2].astype(np.int8),
        stage=table[:, 3].astype(np.int32), micro_batch=table[:, 4].astype(np.int32),
        peer=table[:, 5].astype(np.int32), nbytes=table[:, 6], name=table[:, 7].astype(np.int32), names=names,
        busy=busy_rows, memory_ts=memory_ts, memory_bytes=memory_bytes, events=part.events, gpu=part.gpu,
        torch_version=torch_version(header), pid=part.step_pid,
        kernels=kernels, kernel_names=kernel_names, memory_changes=changes is not None)


def autograd_rows(nodes: np.ndarray, name: int) -> np.ndarray:
    """Spans' rows (``RankPart.rows``) of backward passes for autograd's nodes (merged [start, end) rows)."""
    extra = np.zeros((len(nodes), 8), np.int64)
    extra[:, 0:2] = nodes
    extra[:, 2] = KIND["backward"]
    extra[:, 3:6] = -1
    extra[:, 7] = name
    return extra


_TRIM: list[Any] = []  # libc's malloc_trim once found (None elsewhere)
CHURN_BYTES = 8 << 20  # bytes made and dropped between two trims at most, where the caller counts them
_CHURNED = [0]  # bytes counted since the last trim


def release_memory(churned: int | None = None) -> None:
    """Hand the heap's freed pages back to the system: glibc keeps them after the churn of many arrays made
    and merged (the ranks' parts), so the resident set would stay at its high-water mark. Elsewhere, nothing.
    With ``churned``, the bytes of what was just made and dropped (a window's rows, say), only once the bytes so
    counted since the last trim pass ``CHURN_BYTES``: a trim walks the whole heap however little was freed, and a
    job of thousands of small ranks, a few kilobytes each, calls this several times a rank (0.8 s at 4,096 ranks);
    what a small rank frees, the next one takes again. Without it (a phase's end), at once. libc is looked up once."""
    if churned is not None:
        _CHURNED[0] += churned
        if _CHURNED[0] < CHURN_BYTES:
            return
    _CHURNED[0] = 0
    if not _TRIM:
        try:
            import ctypes

            _TRIM.append(ctypes.CDLL("libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def columns_bytes(columns: dict[str, Any]) -> int:
    """The bytes of a table's columns, about (8 a value, an int64's): what a window or a slice made, dropped once
    written, for ``release_memory`` to count. Its rows, not each column's bytes: asking an Arrow column its bytes
    costs as much as the trim this spares."""
    return 8 * len(columns) * len(next(iter(columns.values()), ()))


def open_trace(path: Path) -> tuple[BinaryIO, BinaryIO | None]:
    """The file's JSON stream, and the compressed file beneath it where it is gzipped (both readers')."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb"), raw  # type: ignore[return-value]
    return raw, None
