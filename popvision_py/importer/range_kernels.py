"""A byte range's GPU events (``ranges.reduce_events``' part for them): the kernels, copies and sets as rows
(``kernels.GPU_ROW`` columns), the runtime calls that launch them (``kernels.LAUNCH_ROW``) and the operators and
modules those calls run in (``kernels.OP_ROW``), read from msgspec's typed events column by column: each event's
stream, correlation id and bytes decoded at once from its raw args and checked as arrays, the args of a
collective's kernel whole (its bytes and process group). What ``read.read_stream`` keeps of them, event for
event; ``Fallback`` where the fast path does not take them.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from popvision_py.importer.checks import Fallback
from popvision_py.importer.kernels import (GPU_ROW, KERNEL_KIND, MODULE, OP_ROW, group_of, kernel_bytes, kernel_kind,
                                           stream_of, thread_key)
from popvision_py.importer.parts import RankPart


class GpuArgs(msgspec.Struct, gc=False):
    """What a GPU event's or a runtime call's args say of its stream and its launch (Kineto's keys): -1 where they
    do not say, None where they say null."""

    stream: int | None = -1
    correlation: int | None = -1
    size: int | None = msgspec.field(name="bytes", default=-1)  # a copy's or a set's


GPU_ARGS = msgspec.json.Decoder(list[GpuArgs | None])
UNSAID = GpuArgs()  # args of null, as ``parts.args_of`` reads them: none


class CommArgs(msgspec.Struct, gc=False):
    """The args a collective (an NCCL kernel, or an annotation of one) is read by (``kernels.comm_bytes``,
    ``kernels.group_of``), decoded as the streaming parser decodes them (any JSON value); its other args skipped,
    never made Python objects."""

    nelems: Any = msgspec.field(name="In msg nelems", default=msgspec.UNSET)
    dtype: Any = msgspec.UNSET
    input_type: Any = msgspec.field(name="Input type", default=msgspec.UNSET)
    input_dims: Any = msgspec.field(name="Input Dims", default=msgspec.UNSET)
    ranks: Any = msgspec.field(name="Process Group Ranks", default=msgspec.UNSET)
    group_size: Any = msgspec.field(name="Group size", default=msgspec.UNSET)


COMM_ARGS = msgspec.json.Decoder(list[CommArgs | None])
COMM_KEYS = tuple((f.name, f.encode_name) for f in msgspec.structs.fields(CommArgs))  # (field, the args' key)


def comm_args(events: list[Any]) -> list[dict[str, Any]]:
    """Each collective's args as ``parts.args_of`` gives them, with only the keys ``CommArgs`` reads: all of them
    decoded at once (args of null: none; args that are not an object: ``Fallback``, as ``args_of`` refuses
    them)."""
    said = _decoded(COMM_ARGS, events, "a collective's args that are not an object")
    unset = msgspec.UNSET
    return [{} if a is None else {key: v for field, key in COMM_KEYS if (v := getattr(a, field)) is not unset}
            for a in said]


def gpu_args(events: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stream, correlation id and bytes of each event's args, decoded at once: -1 where the args say none (an
    event without args: none), or one out of ``kernels.stream_of``'s, ``correlation_of``'s or ``kernel_bytes``'
    range."""
    said = _decoded(GPU_ARGS, events, "a GPU event's or runtime call's args of another shape")
    if any(a is None for a in said):
        said = [UNSAID if a is None else a for a in said]
    return tuple(_ids(said, key, limit) for key, limit in (("stream", 1 << 31), ("correlation", 1 << 62),
                                                            ("size", 1 << 62)))  # type: ignore[return-value]


def _decoded(decoder: msgspec.json.Decoder, events: list[Any], why: str) -> list[Any]:
    """Each event's args, all decoded at once by ``decoder`` (a list of a struct or None): None where they are null
    or missing; ``Fallback`` (``why``) where one is of another shape."""
    if not events:
        return []
    raws = [raw or b"null" for raw in map(attrgetter("args"), events)]
    try:
        return decoder.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback(why) from None


def _ids(said: list[GpuArgs], key: str, limit: int) -> np.ndarray:
    """Each ``said``'s ``key`` as int64: -1 where it is none (or null), or outside [0, ``limit``)."""
    try:
        ids = np.fromiter(map(attrgetter(key), said), np.int64, len(said))
    except TypeError:  # a null among them
        ids = np.fromiter((-1 if v is None else v for v in map(attrgetter(key), said)), np.int64, len(said))
    except OverflowError:  # beyond int64: the streaming parser refuses the trace
        raise Fallback("an id beyond int64") from None
    return np.where((ids >= 0) & (ids < limit), ids, -1)


def gpu_timeline(part: RankPart, x: list[Any], tids: list[Any], gpu_cat: np.ndarray, launch: np.ndarray,
                 start: np.ndarray, end: np.ndarray, cats: list[Any], cat_code: np.ndarray, names: list[str],
                 name_code: np.ndarray) -> dict[int, int]:
    """The GPU's kernels, copies and sets of a range's events (``x``: its complete events, as ``ranges.Event``;
    ``tids`` their threads)
    as rows (``kernels.GPU_ROW`` columns), the runtime calls that launch them (``kernels.LAUNCH_ROW`` columns:
    any runtime call with a correlation id) and the operators and modules those calls run in (``kernels.OP_ROW``),
    into ``part``: what ``read.read_stream`` keeps of them, event for event. Returns the bytes each collective's kernel
    moved, by its place in ``x`` (``ranges``' NCCL spans are those kernels: their args are not decoded twice)."""
    rows, calls = np.flatnonzero(gpu_cat), np.flatnonzero(launch)
    correlation = gpu_args([x[k] for k in calls.tolist()])[1] if len(calls) else np.zeros(0, np.int64)
    calls = calls[correlation >= 0]
    cpu_op = np.array([c == "cpu_op" for c in cats], bool)[cat_code]
    module = np.array([c == "python_function" for c in cats], bool)[cat_code] & \
        np.array([n.startswith(MODULE) for n in names], bool)[name_code]
    ops = np.flatnonzero(cpu_op | module)
    groups: list[str | None] = []
    comm_at: dict[int, int] = {}
    kind = np.zeros(0, np.int64)
    if len(rows):
        # each distinct (category, name) pair's kind once, then looked up by the rows' codes
        pair = cat_code[rows] * len(names) + name_code[rows]
        distinct, which = np.unique(pair, return_inverse=True)
        kind = np.array([kernel_kind(cats[p // len(names)], names[p % len(names)]) for p in distinct.tolist()],
                        np.int64)[which]
        comm = np.flatnonzero(kind == KERNEL_KIND["communication"])
        collective = comm_args([x[k] for k in rows[comm].tolist()])
        groups = [group_of(a) for a in collective]
    known = [g for g in dict.fromkeys(groups) if g is not None]
    code, used = np.unique(name_code[np.concatenate([rows, calls, ops])], return_inverse=True)
    part.gpu_names = [names[c] for c in code.tolist()] + known
    if len(rows):
        streams, correlations, sizes = gpu_args([x[k] for k in rows.tolist()])
        table = np.zeros((len(rows), GPU_ROW), np.int64)
        table[:, 0], table[:, 1] = start[rows], end[rows]
        unsaid = np.flatnonzero(streams < 0)  # no stream in the args, or one out of range: the track's (tid)
        streams[unsaid] = [stream_of({}, x[k].tid) for k in rows[unsaid].tolist()]
        table[:, 2], table[:, 3], table[:, 4], table[:, 5] = streams, kind, used[:len(rows)], correlations
        # a copy's or a set's bytes (``kernels.kernel_bytes``); a collective's, from its args, below
        table[:, 6] = np.where((kind != KERNEL_KIND["compute"]) & (sizes >= 0), sizes, 0)
        table[:, 7] = -1
        if len(comm):
            moved = [kernel_bytes(KERNEL_KIND["communication"], a) for a in collective]
            table[comm, 6] = moved
            comm_at = dict(zip(rows[comm].tolist(), moved))
            group_code = {g: len(code) + i for i, g in enumerate(known)}
            table[comm, 7] = [-1 if g is None else group_code[g] for g in groups]
        part.gpu_rows = table
    thread = _threads_of(tids) if len(calls) or len(ops) else np.zeros(0, np.int64)
    if len(calls):
        part.launches = np.stack([correlation[correlation >= 0], start[calls], end[calls],
                                  used[len(rows):len(rows) + len(calls)], thread[calls]], axis=1)
    if len(ops):
        part.ops = np.stack([start[ops], end[ops], thread[ops], used[len(rows) + len(calls):],
                             module[ops].astype(np.int64)], axis=1).reshape(-1, OP_ROW)
    return comm_at


def _threads_of(tids: list[Any]) -> np.ndarray:
    """``kernels.thread_key`` of each event's thread, each distinct thread worked out once."""
    index: dict[Any, int] = dict.fromkeys(tids)  # in order of first appearance
    keys = np.array([thread_key(t) for t in index], np.int64)
    for code, tid in enumerate(index):
        index[tid] = code
    return keys[np.fromiter(map(index.__getitem__, tids), np.int64, len(tids))] if tids else np.zeros(0, np.int64)
