"""A GPU trace's collectives: each rank's communication kernels grouped by collective and process group, with
the bytes they moved, their GPU time and the bandwidth that makes.

A communication kernel's row of the ``kernels`` table holds its message (``bytes``: ``In msg nelems`` x its
dtype's size, as PyTorch records it on NCCL's kernels since 2.1) and its process group (``group``: the ranks
``Process Group Ranks`` lists, else ``Group size``). The peers of a rank are its group's other ranks: they
need not be among the traces imported (one rank's trace of a 64-rank job names all 64), so they are told
here, not drawn as IPU-to-IPU transfers.

Bandwidth is given as nccl-tests defines it (its doc/PERFORMANCE.md): ``algbw`` the message over the time,
and ``busbw`` algbw times the share of the message each rank's link carries in the collective's ring
algorithm for a group of n, so that it compares with the links' peak whatever n is: all-reduce 2(n-1)/n;
all-gather, reduce-scatter and all-to-all (n-1)/n; broadcast, reduce and point-to-point 1.
"""

from __future__ import annotations

import re

import numpy as np

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.imported.gpu import COMMUNICATION, Kernels

COLUMNS = ["rank", "collective", "group", "group_size", "calls", "bytes", "time_ns", "algbw_gb_s", "busbw_gb_s"]
_COLLECTIVE = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
# nccl-tests' bus bandwidth factors, as functions of the group's size n (its doc/PERFORMANCE.md)
BUS_FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
              "ReduceScatter": lambda n: (n - 1) / n, "AllToAll": lambda n: (n - 1) / n,
              "Broadcast": lambda n: 1.0, "Reduce": lambda n: 1.0, "SendRecv": lambda n: 1.0}


def collective_of(name: str) -> str:
    """A communication kernel's collective, from its name (``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` ->
    ``AllReduce``; ``ncclDevKernel_SendRecv(...)`` -> ``SendRecv``); else the name before its arguments."""
    found = _COLLECTIVE.match(name)
    return found.group(1) if found else name.partition("(")[0]


def group_size(group: str) -> int:
    """The ranks of a process group as the ``kernels`` table writes it (``[0, 1, 2, 3]`` or ``8 ranks``), 0
    where it is not said."""
    if group.endswith(("ranks", "rank")):
        count = group.partition(" ")[0]
        return int(count) if count.isdigit() else 0
    return len(re.findall(r"\d+", group))


def collectives(k: Kernels, window: tuple[np.ndarray, np.ndarray]) -> Table:
    """Each rank's communication kernels within ``window`` grouped by collective and process group
    (``COLUMNS``): calls, bytes, GPU time (each kernel's own), ``algbw_gb_s`` (bytes over time, in GB/s: 1e9
    bytes a second) and ``busbw_gb_s`` (NaN where the group's size or the collective's factor is unknown).
    The most time first within each rank. A piece of a rank at a time (``Kernels.pieces``)."""
    kinds, kind_of = np.unique(np.array([collective_of(str(n)) for n in k.names] or [""], object), return_inverse=True)
    groups = k.labels.get("group", np.array([""], object))
    width_g, width_k = max(len(groups), 1), max(len(kinds), 1)
    pieces = []  # each piece's communication kernels in the window: key, bytes, time
    for p in k.pieces(fields=("kind", "name", "group", "nbytes")):
        inside = p.clip(window)
        comm = inside.take(inside.kind == COMMUNICATION)
        pieces.append(((comm.ipu * width_k + kind_of[comm.name]) * width_g + comm.group, comm.nbytes,
                       comm.end - comm.start))
    key, sizes, times = (np.concatenate(c) for c in zip(*pieces))
    found, at = np.unique(key, return_inverse=True)
    calls = np.bincount(at, minlength=len(found))
    nbytes = np.bincount(at, weights=sizes, minlength=len(found)).astype(np.int64)
    time = np.bincount(at, weights=times, minlength=len(found)).astype(np.int64)
    rank_ipu, kind_at, group_at = found // (width_k * width_g), found // width_g % width_k, found % width_g
    group_words = groups[group_at].astype(str) if len(found) else np.zeros(0, str)
    size = np.array([group_size(g) for g in group_words.tolist()], np.int64)
    kind_words = kinds[kind_at].astype(str) if len(found) else np.zeros(0, str)
    factor = np.array([BUS_FACTOR[c](n) if c in BUS_FACTOR and n > 0 else np.nan
                       for c, n in zip(kind_words.tolist(), size.tolist())], np.float64)
    algbw = np.divide(nbytes, time, out=np.full(len(found), np.nan), where=(time > 0) & (nbytes > 0))
    order = np.lexsort((-time, rank_ipu))
    return Table({"rank": k.ranks[rank_ipu][order], "collective": kind_words.astype(object)[order],
                  "group": group_words.astype(object)[order], "group_size": size[order], "calls": calls[order],
                  "bytes": nbytes[order], "time_ns": time[order], "algbw_gb_s": algbw[order],
                  "busbw_gb_s": (algbw * factor)[order]})
