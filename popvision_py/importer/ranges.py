"""A rank's trace read by byte ranges: ``traceEvents`` cut into stretches of whole events, each decoded
at once by msgspec into typed events and reduced to a ``RankPart`` (the columns ``read`` keeps).

Kineto writes one event per object in one ``traceEvents`` array, so the array splits into independent
byte ranges: a range ends at a ``}`` followed by ``,`` and the next event's ``{``. Where a newline lies
between them (Kineto's layout: ``},\\n  {``) the boundary is outside every string, as a JSON string
cannot hold a raw newline; a trace written on one line is cut at ``}, {`` where the count of quotes
before it (escapes removed) is even. A boundary inside an event's own nesting makes its range fail to
decode. Ranges are decoded in parallel, across ranks and within one.

The fast path is as strict as the streaming one (``read.read_stream``) or stricter: anything it does not
take as it stands (a range that does not decode, a field of another type, a number out of range, JSON
nested deeper than ``MAX_DEPTH``, a gzip stream that inflates like a bomb...) raises ``Fallback``, and
the rank is then read by the streaming parser, which says in one sentence what is wrong, or reads it.
So every sentence of a refused trace is the streaming parser's, and a trace it takes is read with the
same figures.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from popvision_py.importer.checks import MAX_DEPTH, Depth, Fallback, TraceError, header_fields
from popvision_py.importer.parts import (AUTOGRAD, CHUNK_FRAME, COMM_CALL, COMM_FLIGHT, GPU_CATS, HEAD_BYTES, MAX_PLAIN,
                                         MAX_RATIO, MAX_US, STEP, Merger, RankPart, RankTrace, Spans, classify,
                                         is_annotation_span, merge_intervals, open_trace, parse_header,
                                         release_memory)
from popvision_py.importer.kernels import RUNTIME_CATS, comm_bytes
from popvision_py.importer.range_kernels import comm_args, gpu_timeline
from popvision_py.importer.range_memory import memory_instants
from popvision_py.importer.parts import OLD_CATEGORIES, current_categories
from popvision_py.importer.spill import SpilledRank

RANGE_BYTES = 16 << 20  # bytes of events decoded at once (a range's events take about as much again)
SEARCH_BYTES = 1 << 16  # a boundary is looked for in windows of this many bytes from a range's target end
NEWLINE_BOUNDARY = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
ONE_LINE_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
KEEP = b'"[]{}'
DELETE = bytes(c for c in range(256) if c not in KEEP)  # what a nesting count ignores
PIECE_BYTES = 64 << 10  # a gzip stream is inflated in ijson's pieces (its buf_size)
TOP = b'{"traceEvents":['  # the last range is decoded as the rest of the file's top-level object


class Event(msgspec.Struct, gc=False):
    """An event, with the fields the import reads (others are skipped, their JSON still checked)."""

    ph: str
    name: str | None = None
    cat: str | None = None
    ts: float = math.nan  # missing: NaN, which no range check passes
    dur: float = math.nan
    tid: int | str | None = None
    pid: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Top(msgspec.Struct, gc=False):
    """The last range and the keys after ``traceEvents`` (``traceName``...): the end of the top-level object."""

    traceEvents: list[Event]  # noqa: N815 - Kineto's key
    distributedInfo: Any = None  # noqa: N815 - written after the events by some tools (``parts.trailer_of``)


EVENTS = msgspec.json.Decoder(list[Event])
LAST = msgspec.json.Decoder(Top)
ARGS = msgspec.json.Decoder()


def range_depth(text: bytes | bytearray) -> int:
    """The deepest nesting in ``text`` (whole JSON values and the commas between them, starting outside a
    string), strings' brackets not counted: escapes dropped, then all but quotes and brackets. Every mark left
    that is not a bracket is a quote, so the quotes before a bracket are its place among the marks less the
    brackets before it, and it is in a string where they are odd. The quotes (seven marks in eight in a Kineto
    trace) are never counted one by one."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = text.translate(None, DELETE)
    if not kept:
        return 0
    marks = np.frombuffer(kept, np.uint8)
    at = np.flatnonzero(marks != 0x22)  # the brackets' places among the marks
    brackets = marks[at[((at - np.arange(len(at))) & 1) == 0]]  # those outside strings
    step = ((brackets == 0x5B) | (brackets == 0x7B)).view(np.int8) - \
        ((brackets == 0x5D) | (brackets == 0x7D)).view(np.int8)
    return int(np.cumsum(step, dtype=np.int32).max(initial=0))


def outside_strings(text: bytes) -> bool:
    """Whether the end of ``text`` (which starts outside a string) is outside one too."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    return text.count(b'"') % 2 == 0


def find_boundary(buf: Any, begin: int, target: int, limit: int) -> tuple[int, int] | None:
    """A boundary between two events in ``buf`` at or past ``target`` and before ``limit``, for a range that
    began at ``begin`` (outside a string): (end of this range, start of the next), or None."""
    if target >= limit:
        return None
    m = NEWLINE_BOUNDARY.search(buf, target, limit)
    if m is not None:
        return m.start() + 1, m.end() - 1
    for m in ONE_LINE_BOUNDARY.finditer(buf, target, limit):  # one line: a boundary outside strings only
        if outside_strings(bytes(buf[begin:m.start()])):
            return m.start() + 1, m.end() - 1
        break  # a boundary inside a string: the range grows to the next target
    return None


@dataclass
class TracePlan:
    """How a trace's file is read: its header, and its events' byte ranges."""

    header: dict[str, Any]
    base_ns: int | None
    gz: bool
    head_depth: int = 0
    ranges: list[tuple[int, int, bool]] = field(default_factory=list)  # plain: (start, end, last)


def _header(head: bytes) -> tuple[dict[str, Any], int | None, int]:
    """The header, its base time and where the events begin (after ``"traceEvents": [``)."""
    try:
        header = parse_header(head)
        base_ns = header_fields(header)[0]
    except TraceError as exc:
        raise Fallback(str(exc)) from None
    at = head.find(b'"traceEvents"')
    m = ARRAY_START.match(head, at)
    if m is None:
        raise Fallback("traceEvents is not an array")
    if Depth().feed(head[:m.end()]) > MAX_DEPTH:
        raise Fallback("the header nests too deep")
    return header, base_ns, m.end()


FIRST_HEAD_BYTES = 1 << 16  # a header is looked for in this many bytes first (Kineto's: a few KiB)


def _head(f: BinaryIO, size: int) -> bytes:
    """The first bytes of a plain trace, up to where its events begin: ``FIRST_HEAD_BYTES``, or all of
    ``HEAD_BYTES`` (no more than the file holds) where the array does not open within them. A read of the whole
    head allocated and copied a small rank's file whole (a job of thousands of them: 0.3 ms of CPU a rank); the
    header found in the first bytes is the one found in all of them (the first ``"traceEvents"``)."""
    head = f.read(min(FIRST_HEAD_BYTES, size + SEARCH_BYTES))
    at = head.find(b'"traceEvents"')
    m = ARRAY_START.match(head, at) if at >= 0 else None
    if m is not None and m.end() < len(head) or len(head) < FIRST_HEAD_BYTES:
        return head
    return head + f.read(min(HEAD_BYTES, size + SEARCH_BYTES) - len(head))


def plan_plain(path: Path, size: int) -> TracePlan:
    """The byte ranges of a plain trace file, its boundaries found in windows read near each target."""
    with open(path, "rb") as f:
        header, base_ns, begin = _header(_head(f, size))
        ranges: list[tuple[int, int, bool]] = []
        while size - begin > RANGE_BYTES + SEARCH_BYTES:
            at, found = begin + RANGE_BYTES, None
            while found is None and at + SEARCH_BYTES < size:
                window = os.pread(f.fileno(), SEARCH_BYTES, at)
                m = NEWLINE_BOUNDARY.search(window)
                if m is None:  # one line: a boundary whose quotes before it, from the range's start, are even
                    m = ONE_LINE_BOUNDARY.search(window)
                    if m is not None and not outside_strings(os.pread(f.fileno(), at + m.start() - begin, begin)):
                        m = None
                if m is not None:
                    found = (at + m.start() + 1, at + m.end() - 1)
                at += max(SEARCH_BYTES // 2, SEARCH_BYTES - 64)  # windows overlap: a boundary across two is found
            if found is None:
                break
            ranges.append((begin, found[0], False))
            begin = found[1]
        ranges.append((begin, size, True))
    return TracePlan(header, base_ns, False, ranges=ranges)


def gz_ranges(path: Path) -> tuple[TracePlan, Iterator[tuple[bytes, bool]]]:
    """A gzipped trace's header, then its events' ranges as bytes, decompressed as they are needed (a
    stream that is damaged, or inflates like a bomb, raises ``Fallback``)."""
    stream, packed = open_trace(path)
    assert packed is not None
    read = 0

    def more(n: int) -> bytes:
        """About ``n`` more bytes, inflated in the streaming parser's pieces, each piece's ratio checked as
        it checks it (so that a stream it calls a bomb is one here too)."""
        nonlocal read
        pieces = []
        got = 0
        while got < n:
            try:
                data = stream.read(PIECE_BYTES)
            except (OSError, EOFError, zlib.error) as exc:
                raise Fallback(f"cannot be decompressed ({exc})") from None
            if not data:
                break
            read += len(data)
            got += len(data)
            if read > MAX_PLAIN and read > MAX_RATIO * packed.tell():
                raise Fallback("inflates like a bomb")
            pieces.append(data)
        return b"".join(pieces)

    try:
        buf = bytearray(more(HEAD_BYTES))
        header, base_ns, start = _header(bytes(buf))
    except BaseException:
        stream.close()
        packed.close()
        raise
    del buf[:start]

    def chunks() -> Iterator[tuple[bytes, bool]]:
        nonlocal buf
        with packed, stream:
            done = False
            while True:
                while not done and len(buf) < RANGE_BYTES + SEARCH_BYTES:
                    data = more(RANGE_BYTES)
                    done = not data
                    buf += data
                hit = None if done and len(buf) <= RANGE_BYTES + SEARCH_BYTES else find_boundary(
                    buf, 0, RANGE_BYTES, len(buf))  # the whole rest: no window, the buffer is in memory
                if hit is None and not done:
                    data = more(RANGE_BYTES)  # no boundary yet: the range grows
                    done = not data
                    buf += data
                    continue
                if hit is None:
                    yield bytes(buf), True
                    return
                yield bytes(buf[:hit[0]]), False
                del buf[:hit[1]]

    return TracePlan(header, base_ns, True), chunks()


def rank_ranges(path: Path) -> tuple[TracePlan, Iterator[tuple[tuple[str, int, int] | bytes, bool]]]:
    """A trace's header and its ranges (a plain file's as (path, start, end), a gzipped one's as bytes)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            size = os.fstat(f.fileno()).st_size
        if gz:
            return gz_ranges(path)
        plan = plan_plain(path, size)
    except OSError as exc:
        raise Fallback(f"cannot be read ({exc})") from None
    return plan, (((str(path), start, end), last) for start, end, last in plan.ranges)


def merger(spill: Path | None) -> Merger | SpilledRank:
    """Where a rank's parts are merged as they come: in memory, or appended to a spill file in ``spill``."""
    return Merger() if spill is None else SpilledRank(spill)


def finish(path: Path, plan: TracePlan, parts: Merger | SpilledRank) -> RankTrace:
    """The rank's ``RankTrace`` from its merged parts (``Fallback`` where ``assemble`` refuses it)."""
    try:
        return parts.trace(str(path), plan.header)
    except TraceError as exc:
        raise Fallback(str(exc)) from None


def one_range(plan: TracePlan) -> bool:
    """Whether a trace is read in one range (a plain file of at most ``RANGE_BYTES`` of events, as a job of thousands
    of ranks holds): read and assembled whole by one process (``read_whole``)."""
    return not plan.gz and len(plan.ranges) == 1


def read_whole(source: tuple[str, int, int], plan: TracePlan, path: str) -> RankTrace:
    """A trace of one range (``one_range``) read and assembled in this process, a worker's: what the parent would
    merge and lay out rank after rank, made in the workers, in parallel; ``Fallback`` if not taken."""
    parts = Merger()
    parts.add(read_range(source, plan.base_ns, True))
    return finish(Path(path), plan, parts)


def small_plain(path: Path) -> int | None:
    """The size of ``path`` where it is a plain (not gzipped) file small enough to be one range whatever its header
    (``plan_plain`` cuts none below ``RANGE_BYTES + SEARCH_BYTES``): planned in a worker, with its read
    (``read_small``), not here; else None. A file that cannot be opened is not: the parent says why, as for any
    other."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return size if size <= RANGE_BYTES + SEARCH_BYTES and f.read(2) != b"\x1f\x8b" else None
    except OSError:
        return None


def read_small(path: str) -> RankTrace:
    """A small plain trace (``small_plain``) planned, read and assembled in this process, a worker's: its header
    parsed there too, so that a job of thousands of small ranks does not read each file twice, once in the
    parent to plan it; ``Fallback`` if not taken."""
    try:
        plan = plan_plain(Path(path), os.stat(path).st_size)
    except OSError as exc:
        raise Fallback(f"cannot be read ({exc})") from None
    if not one_range(plan):  # grown since it was looked at: the parent reads it range by range after all
        raise Fallback("not one range")
    return read_whole((path, *plan.ranges[0][:2]), plan, path)


def read_smalls(paths: list[str]) -> list[RankTrace | Exception]:
    """Several small plain traces read as ``read_small`` reads each, in one task of a worker: a job of thousands of
    small ranks costs the parent a task, its result's trip and a wake-up a few dozen ranks, not a rank (a quarter
    of the read's time at 4,096 ranks of 135 kB). Each trace's result or the error it raised, in order, so that
    one refused trace leaves the others read."""
    out: list[RankTrace | Exception] = []
    for path in paths:
        try:
            out.append(read_small(path))
        except Exception as exc:  # handed back as it is: the parent raises it, or falls back, in the rank's turn
            out.append(exc)
    return out


def read_fast(path: Path, spill: Path | None = None) -> RankTrace:
    """One rank's trace by byte ranges, one after the other in this process (``Fallback`` if not taken); its
    columns spilled to a file in ``spill`` where given."""
    plan, sources = rank_ranges(path)
    parts = merger(spill)
    for source, last in sources:
        parts.add(read_range(source, plan.base_ns, last))
    return finish(path, plan, parts)


_BUFFER = bytearray()  # a worker's range, read in place (the same pages each time: no fresh memory to fault in)


def _read_into(path: str, start: int, end: int, prefix: bytes, suffix: bytes) -> bytearray:
    """``prefix`` + the file's bytes [start, end) + ``suffix``, in this process's reused buffer."""
    global _BUFFER
    size = len(prefix) + end - start + len(suffix)
    try:
        _BUFFER.append(0)  # (raises BufferError where a view of it is still held)
        del _BUFFER[-1]
        if len(_BUFFER) > size:
            del _BUFFER[size:]
        elif len(_BUFFER) < size:
            _BUFFER.extend(bytes(size - len(_BUFFER)))
    except BufferError:
        # a view of the last range is still held (a decoded event's raw args keep one until they go: a Dask worker
        # under load once met it): a buffer of its own, never the held one written over
        _BUFFER = bytearray(size)
    buffer = _BUFFER
    buffer[:len(prefix)] = prefix
    buffer[size - len(suffix):] = suffix
    with open(path, "rb") as f, memoryview(buffer) as view:
        got = os.preadv(f.fileno(), [view[len(prefix):size - len(suffix)]], start)
    if got != end - start:
        raise Fallback("the file changed while it was read")
    return buffer


def read_range(source: tuple[str, int, int] | bytes, base_ns: int | None, last: bool) -> RankPart:
    """Decode one range (bytes, or a plain file's (path, start, end)) and reduce its events to a ``RankPart``;
    ``Fallback`` if the fast path does not take it."""
    prefix, suffix = (TOP, b"") if last else (b"[", b"]")
    if isinstance(source, tuple):
        text: bytes | bytearray = _read_into(*source, prefix, suffix)
    else:
        text = prefix + source + suffix
    try:
        # the last range's prefix opens the top-level object and traceEvents; the others' only an array
        if range_depth(text) + (0 if last else 1) > MAX_DEPTH:
            raise Fallback("nests too deep")
        if last:
            if text.find(b'"traceEvents"', len(TOP)) >= 0:
                raise Fallback("traceEvents named twice")  # the streaming parser reads both arrays
            top = LAST.decode(text)
            events, info = top.traceEvents, top.distributedInfo
            del top
        else:
            events, info = EVENTS.decode(text), None
        read = len(text)
        del text
        part = reduce_events(events, base_ns or 0)
        del events
        _trimmed(read)
        part.trailer = {"distributedInfo": info} if isinstance(info, dict) else {}
        return part
    except (msgspec.DecodeError, RecursionError, TraceError, ValueError, TypeError, OverflowError) as exc:
        raise Fallback(f"{type(exc).__name__}: {exc}"[:200]) from None


_HEAP = {"resident": 0, "read": 0}  # this process's resident bytes after its first range; bytes read since it looked
TRIM_BYTES = 16 << 20


def _trimmed(read: int) -> None:
    """Hand the heap's freed pages back once it holds ``TRIM_BYTES`` more than after the first range: a worker reads
    hundreds of ranges at 10 GB, and its heap crept up by 60 MiB; trimming after each range cost a fifth more
    CPU (the next range faults its pages in again). Looked at after the first range, then once ``RANGE_BYTES``
    have been read (``read``: this range's bytes): a job of thousands of small ranks, a range each, read the
    process's resident size and trimmed its heap after every one."""
    _HEAP["read"] += read
    if _HEAP["resident"] and _HEAP["read"] < RANGE_BYTES:
        return
    _HEAP["read"] = 0
    resident = _resident()
    if resident is None:
        return
    if not _HEAP["resident"]:
        _HEAP["resident"] = resident
    elif resident > _HEAP["resident"] + TRIM_BYTES:
        release_memory()


def _resident() -> int | None:
    """This process's resident bytes (None where /proc does not say)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _codes(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Each value's code (in order of first appearance) and the distinct values."""
    index: dict[Any, int] = dict.fromkeys(values)  # in order of first appearance
    for code, value in enumerate(index):
        index[value] = code
    return np.fromiter(map(index.__getitem__, values), np.int64, len(values)), list(index)


def reduce_events(events: list[Event], base_ns: int) -> RankPart:
    """The ``RankPart`` of a run of events: what ``read.read_stream`` keeps of them, column by column (each
    distinct phase, category and name looked at once, the events by their codes)."""
    part = RankPart(events=len(events))
    ph_code, phases = _codes(list(map(attrgetter("ph"), events)))
    x = list(compress(events, (ph_code == _index(phases, "X")).tolist()))
    memory_instants(part, list(compress(events, (ph_code == _index(phases, "i")).tolist())), base_ns)
    del ph_code
    if not x:
        return part
    names = list(map(attrgetter("name"), x))
    if None in names:
        raise Fallback("an event without a name")
    name_code, unique_names = _codes(names)
    cat_code, cats = _codes(list(map(attrgetter("cat"), x)))
    ts = np.fromiter(map(attrgetter("ts"), x), np.float64, len(x))
    dur = np.fromiter(map(attrgetter("dur"), x), np.float64, len(x))
    if not ((np.abs(ts) < MAX_US).all() and ((dur >= 0) & (dur < MAX_US)).all()):
        raise Fallback("a time out of range")
    start = np.rint(ts * 1000.0).astype(np.int64) + base_ns
    end = start + np.rint(dur * 1000.0).astype(np.int64)
    del ts, dur

    def by_name(test: Any) -> np.ndarray:
        return np.array([bool(test(n)) for n in unique_names], bool)[name_code]

    def is_cat(*words: str) -> np.ndarray:
        return np.array([c in words for c in cats], bool)[cat_code]

    if any(c in OLD_CATEGORIES for c in cats):  # PyTorch 1.8 to 1.12: read as today's categories
        cat_code, cats = current_categories(cat_code, cats, by_name(is_annotation_span))
    gpu_cat = is_cat(*GPU_CATS)
    cpu_op = is_cat("cpu_op")
    part.gpu = bool(gpu_cat.any())
    moving = by_name(COMM_FLIGHT.match)  # named as communication in flight
    annotation = is_cat("user_annotation", "gpu_user_annotation")
    flight = gpu_cat & moving
    kernel = gpu_cat & ~flight
    if kernel.any():
        part.kernels = merge_intervals(np.stack([start[kernel], end[kernel]], axis=1))
    autograd = cpu_op & by_name(lambda n: n.startswith(AUTOGRAD))
    spans = flight | (~gpu_cat & ~autograd & (annotation  # each kept (classify)
                                              | (cpu_op & by_name(COMM_CALL.match))
                                              | (is_cat("python_function") & by_name(CHUNK_FRAME.search))))
    # an annotation of communication in flight (``nccl:all_reduce``, which ``classify`` keeps as one, its bytes from
    # its args): its bytes read with the NCCL kernels' (``_spans``)
    flight_note = annotation & moving
    tids = list(map(attrgetter("tid"), x))
    comm_at = gpu_timeline(part, x, tids, gpu_cat, is_cat(*RUNTIME_CATS), start, end, cats, cat_code, unique_names,
                           name_code)
    step = is_cat("user_annotation") & by_name(STEP.match)
    if cpu_op.any() or step.any() or autograd.any():
        _threads(part, tids, cpu_op, autograd, step, start, end)
        if step.any():
            _steps(part, list(compress(x, step.tolist())))
    if spans.any():
        rows = np.flatnonzero(spans)
        _spans(part, x, rows, [cats[k] for k in cat_code[rows].tolist()], names, start, end, flight, flight_note,
               comm_at)
    return part


def _index(words: list[Any], word: str) -> int:
    return words.index(word) if word in words else -1


def _threads(part: RankPart, tids: list[Any], cpu_op: np.ndarray, autograd: np.ndarray, step: np.ndarray,
             start: np.ndarray, end: np.ndarray) -> None:
    """Operators per thread (counts, in order of first appearance), each thread's operators' union and
    its autograd nodes', and the threads holding ``ProfilerStep#N``."""
    ops = np.flatnonzero(cpu_op)
    if len(ops):
        code, threads = _codes([tids[k] for k in ops])
        counts = np.bincount(code, minlength=len(threads))
        order = np.argsort(code, kind="stable")
        bounds = np.searchsorted(code[order], np.arange(len(threads) + 1))
        rows = ops[order]
        for t, tid in enumerate(threads):
            mine = rows[bounds[t]:bounds[t + 1]]
            part.threads[tid] = int(counts[t])
            part.busy[tid] = merge_intervals(np.stack([start[mine], end[mine]], axis=1))
    nodes = np.flatnonzero(autograd)
    if len(nodes):
        code, threads = _codes([tids[k] for k in nodes])
        for t, tid in enumerate(threads):
            mine = nodes[code == t]
            part.backward[tid] = merge_intervals(np.stack([start[mine], end[mine]], axis=1))
    part.step_threads = list(dict.fromkeys(tids[k] for k in np.flatnonzero(step)))


def _steps(part: RankPart, steps: list[Event]) -> None:
    """The training loop's process: the first ``ProfilerStep#N``'s pid (each one's pid checked)."""
    for e in steps:
        pid = e.pid
        if pid is not None and not (type(pid) is int and 0 <= pid < 1 << 62 or isinstance(pid, str)):
            raise Fallback("a ProfilerStep's pid out of range")
        if part.step_pid is None and type(pid) is int:
            part.step_pid = pid


class _Lazy:
    """An event's fields as ``read``'s functions ask for them (``get``), its args decoded on first use."""

    def __init__(self, event: Event) -> None:
        self.event = event

    def get(self, key: str, default: Any = None) -> Any:
        if key == "args":
            raw = bytes(self.event.args)
            return ARGS.decode(raw) if raw else default
        return getattr(self.event, key, default)


def _spans(part: RankPart, x: list[Event], rows: np.ndarray, cats: list[str | None], names: list[str],
           start: np.ndarray, end: np.ndarray, flight: np.ndarray, flight_note: np.ndarray,
           comm_at: dict[int, int]) -> None:
    """The spans the import keeps, event by event in order (there are few): ``read``'s own rules. The bytes of
    communication in flight (an NCCL kernel, ``flight``; an annotation of it, ``flight_note``) are read from their
    args all at once (``range_kernels.comm_args``), or taken as ``gpu_timeline`` read them (``comm_at``, by the
    event's place): a GPU trace has tens of thousands of them, and each one's args decoded apart cost more than the
    rest of its span."""
    moving = flight[rows] | flight_note[rows]
    todo = [k for k in rows[moving].tolist() if k not in comm_at]
    comm_at.update(zip(todo, map(comm_bytes, comm_args([x[k] for k in todo]))))
    spans = Spans()
    for k, cat, s, e, nccl, note in zip(rows.tolist(), cats, start[rows].tolist(), end[rows].tolist(),
                                        flight[rows].tolist(), flight_note[rows].tolist()):
        name = names[k]
        if nccl or note:  # an NCCL kernel (not a pass: where it is drawn does not matter), or an annotation of one
            spans.gpu_track = note and cat == "gpu_user_annotation"
            spans.add(s, e, "comm_flight", -1, -1, -1, comm_at[k], name)
            continue
        spans.gpu_track = cat == "gpu_user_annotation"
        classify(spans, name, "user_annotation" if spans.gpu_track else cat, s, e, _Lazy(x[k]))
    part.add_spans(spans)
