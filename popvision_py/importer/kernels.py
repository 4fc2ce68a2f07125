"""A GPU trace's own timeline as the import keeps it: each kernel, copy and set with its stream, kind, bytes and
process group (``GPU_ROW``), the runtime calls that launched them (``LAUNCH_ROW``) and the CPU's operators and
modules those calls ran in (``OP_ROW``), joined per rank into ``KERNEL_COLUMNS`` (``gpu_timeline``); and the
bytes a communication event moves (``comm_bytes``), a rule both readers share with ``parts``.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import numpy as np

from popvision_py.format.schema import KERNEL_KINDS
from popvision_py.importer.checks import MAX_WORLD, is_dims, is_int, wrong

# The GPU's own timeline (the profile's ``kernels``): what each kernel does (``KERNEL_KINDS``' codes), and the
# runtime calls that launch kernels, copies and sets (joined to them by their correlation id).
KERNEL_KIND = {name: i for i, name in enumerate(KERNEL_KINDS)}
COMM_KERNEL = re.compile(r"(nccl|rccl|hccl)|.*nccl[A-Za-z]*Kernel|.*ncclDevKernel")  # NCCL's and its ports'
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})  # a launch is any of their calls with a correlation id
DTYPE_BYTES = {"float": 4, "float32": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "long int": 8,
               "int": 4, "half": 2, "bfloat16": 2, "bool": 1, "unsigned char": 1, "signed char": 1,
               # record_param_comms' and NCCL kernels' dtype: c10's ScalarType names
               "Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8, "ComplexDouble": 16}


# A kernel's row: its GPU start and end, stream, kind (KERNEL_KIND), name code, correlation id (-1: none), the bytes
# it moves (a collective's message, a copy's or a set's size; 0 if the trace does not say) and its process group
# (a name code: the group's ranks as the trace writes them; -1: none); then its launching runtime call's start,
# end and name code (-1: none), and the operator and the module that call ran in (name codes; -1: none). A part
# keeps the first eight (GPU_ROW), the launches apart (LAUNCH_ROW: correlation, start, end, name code, thread)
# and the CPU's operators and modules (OP_ROW: start, end, thread, name code, 1 for a module); ``gpu_timeline``
# joins them. Names are codes into the kernels' table of names; a thread is ``thread_key``'s number.
KERNEL_COLUMNS = ("start", "end", "stream", "kind", "name", "correlation", "bytes", "group", "launch_start",
                  "launch_end", "launch_name", "op", "module")
KERNEL_COLUMN = {name: i for i, name in enumerate(KERNEL_COLUMNS)}
GPU_ROW = 8
LAUNCH_ROW = 5
OP_ROW = 5
MODULE = "nn.Module: "  # a python_function span of a module's forward (traces recorded with_stack or with_modules)


def kernel_kind(cat: str, name: str) -> int:
    """What a GPU event does: a copy or a set by its category, communication by its name (NCCL's kernels
    and their ROCm and Ascend ports), else compute."""
    if cat == "gpu_memcpy":
        return KERNEL_KIND["memcpy"]
    if cat == "gpu_memset":
        return KERNEL_KIND["memset"]
    return KERNEL_KIND["communication"] if COMM_KERNEL.match(name) else KERNEL_KIND["compute"]


def stream_of(args: dict[str, Any], tid: Any) -> int:
    """A GPU event's stream: its ``args.stream``, else its track (``tid``: a number, or ``"stream 7"``); 0 if
    neither says."""
    stream = args.get("stream")
    if is_int(stream) and 0 <= stream < 1 << 31:
        return int(stream)
    if is_int(tid) and 0 <= tid < 1 << 31:
        return int(tid)
    digits = str(tid).rpartition(" ")[2] if isinstance(tid, str) else ""
    return int(digits) if digits.isdigit() and len(digits) < 10 else 0


def correlation_of(args: dict[str, Any]) -> int:
    """An event's correlation id (``args.correlation``), -1 where it has none."""
    value = args.get("correlation")
    return int(value) if is_int(value) and 0 <= value < 1 << 62 else -1


def thread_key(tid: Any) -> int:
    """A thread's number, the same in every part of a rank: its ``tid`` if an int, else a hash of its text."""
    if is_int(tid) and -(1 << 62) < tid < 1 << 62:
        return int(tid)
    return (1 << 62) + zlib.crc32(str(tid).encode())


def kernel_bytes(kind: int, args: dict[str, Any]) -> int:
    """Bytes a GPU event moves: a communication kernel's message (``comm_bytes``), a copy's or a set's ``bytes``;
    0 for a compute kernel and where the trace does not say."""
    if kind == KERNEL_KIND["communication"]:
        return comm_bytes(args)
    size = args.get("bytes")
    return int(size) if kind != KERNEL_KIND["compute"] and is_int(size) and 0 <= size < 1 << 62 else 0


def group_of(args: dict[str, Any]) -> str | None:
    """A communication kernel's process group: its ranks as the trace writes them (``Process Group Ranks``,
    ``[0, 1, 2, 3]``), else its size (``Group size``: ``4 ranks``); None if neither is said."""
    ranks = args.get("Process Group Ranks")
    if isinstance(ranks, str) and 0 < len(ranks) < 1 << 16:
        return ranks
    if isinstance(ranks, list) and all(is_int(r) for r in ranks):
        return "[" + ", ".join(map(str, ranks)) + "]"
    size = args.get("Group size")
    return f"{size} rank{'s' if size != 1 else ''}" if is_int(size) and 0 < size < MAX_WORLD else None


def gpu_timeline(rows: np.ndarray, names: list[str], launches: np.ndarray,
                 ops: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """A rank's kernels (``RankTrace.kernels``) and their names, from its parts' rows (GPU_ROW columns, names
    the rank's codes), launches and operators: both readers' results, made the same way (names in sorted
    order). ``spill.spill_timeline`` makes the same rows a stretch of time at a time."""
    code, sorted_names = name_codes(names)
    rows = renamed(renamed(rows, 4, code), 7, code)
    ops = np.zeros((0, OP_ROW), np.int64) if ops is None else renamed(ops, 3, code)
    launches = sorted_launches(launch_ops(renamed(launches, 3, code), ops))
    return joined(sorted_kernels(rows), launches[:, 0], launches[:, 1:]), sorted_names


def name_codes(names: list[str]) -> tuple[np.ndarray, list[str]]:
    """The names sorted, and each name's code (its place in ``names``) mapped to its place among them, then -1
    (no name: a kernel without a group) kept -1."""
    order = sorted(range(len(names)), key=names.__getitem__)
    code = np.empty(len(names) + 1, np.int64)
    code[order] = np.arange(len(names))
    code[-1] = -1
    return code, [names[k] for k in order]


def sorted_kernels(rows: np.ndarray) -> np.ndarray:
    """Kernels' rows (GPU_ROW columns) sorted by start, then stream (ties in the order given)."""
    return rows[np.lexsort((rows[:, 2], rows[:, 0]))]


def sorted_launches(launches: np.ndarray) -> np.ndarray:
    """Launches sorted by correlation id (ties in the order given)."""
    return launches[np.argsort(launches[:, 0], kind="stable")]


def launch_ops(launches: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """The launches (LAUNCH_ROW columns, or more after them) with, after their first four, the operator and the
    module their call ran in (``enclosing`` of ``ops`` at the call's start on its thread; -1: none): the launches'
    columns of KERNEL_COLUMNS, correlation first, then any columns past LAUNCH_ROW."""
    found = [enclosing(these[:, 0], these[:, 1], these[:, 2], these[:, 3], launches[:, 1], launches[:, 4])
             if len(these) and len(launches) else np.full(len(launches), -1, np.int64)
             for these in (ops[ops[:, 4] == module] for module in (0, 1))]
    return np.column_stack([launches[:, :4], *found, launches[:, LAUNCH_ROW:]]).astype(np.int64)


def joined(rows: np.ndarray, keys: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """Kernels' rows (GPU_ROW columns) as KERNEL_COLUMNS: each joined to the first launch whose correlation id
    (``keys``, sorted) is its own (``launches``: the rest of each one's columns, ``launch_ops``' after the id),
    -1 where none is. ``keys`` and ``launches`` may lie in a memory map: a block of rows is joined at a time."""
    out = np.full((len(rows), len(KERNEL_COLUMNS)), -1, np.int64)
    if not len(rows):
        return out
    out[:, :GPU_ROW] = rows
    if len(keys):
        at = np.minimum(np.searchsorted(keys, rows[:, 5]), len(keys) - 1)
        hit = (rows[:, 5] >= 0) & (keys[at] == rows[:, 5])
        out[hit, GPU_ROW:] = launches[at[hit], :len(KERNEL_COLUMNS) - GPU_ROW]
    return out


def enclosing(start: np.ndarray, end: np.ndarray, thread: np.ndarray, name: np.ndarray, at: np.ndarray,
              at_thread: np.ndarray) -> np.ndarray:
    """The name of the innermost span (``start``, ``end``, ``thread``: spans that nest on each thread, as a
    thread's operators do) holding each moment ``at`` on its thread ``at_thread``; -1 where none does.

    A span's depth is the spans open at its start, itself counted (by position in start order, ties the longer
    first, less the spans ended by then); the spans open at a moment are those of depth 1 to D, D the starts at or
    before it less the ends; the innermost is the last span of depth D to start by then. One pass per thread and
    depth, over all the moments at once."""
    out = np.full(len(at), -1, np.int64)
    for key in np.unique(at_thread).tolist():
        mine = np.flatnonzero(thread == key)
        asked = np.flatnonzero(at_thread == key)
        if not len(mine):
            continue
        order = mine[np.lexsort((-end[mine], start[mine]))]
        s, e, n = start[order], end[order], name[order]
        ends = np.sort(e)
        depth = np.arange(1, len(s) + 1) - np.searchsorted(ends, s, side="right")
        t = at[asked]
        open_ = np.searchsorted(s, t, side="right") - np.searchsorted(ends, t, side="right")
        for d in np.unique(open_[open_ > 0]).tolist():
            level = np.flatnonzero(depth == d)
            q = np.flatnonzero(open_ == d)
            k = np.searchsorted(s[level], t[q], side="right") - 1
            found = k >= 0
            out[asked[q[found]]] = n[level[k[found]]]
    return out


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


def comm_bytes(args: dict[str, Any]) -> int:
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


def renamed(rows: np.ndarray, column: int, codes: np.ndarray) -> np.ndarray:
    """A copy of ``rows`` with ``column``'s name codes mapped through ``codes`` (a part's to the rank's)."""
    rows = rows.copy()
    if len(rows):
        rows[:, column] = codes[rows[:, column]]
    return rows
