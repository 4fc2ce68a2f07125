"""The GPU's own time line of a profile imported from GPU traces: the ``kernels`` table (schema 5) read as
Holistic Trace Analysis (HTA) 0.5 reads a trace, and popvision's own figures within the profiled steps.

Each HTA figure has a twin here that computes what HTA computes, over the kernels it keeps
(``hta_selection``): ``temporal`` (``get_temporal_breakdown``), ``kernel_types`` and
``kernel_types_by_rank`` (``get_gpu_kernel_breakdown``'s first frame), ``comm_comp_overlap``
(``get_comm_comp_overlap``), ``top_kernels`` (its second frame), ``launches`` and ``launch_summary``
(``get_cuda_kernel_launch_stats``) and ``idle_breakdown`` (``get_idle_time_breakdown``). HTA sorts
kernels into types by name (``hta_types``: ``^nccl.*Kernel`` communication; ``^Memcpy``, ``^Memset``,
``^dma`` memory; a name holding ``Memcpy`` or ``Sync`` elsewhere, or starting ``Memset``, none of the
three; else computation), not by the table's ``kind``. Where HTA's definition is questionable the twin
still follows it and its docstring says how (docs/reports.md, "GPU").

popvision's own figures, ``by_rank`` and ``by_stream``, take the table's ``kind`` (NCCL's kernels and
those the trace marks as communication; memcpy and memset) and a window per rank: the profiled steps.
Time is in ns (a cycle of an imported profile). Every figure is columnar: one sort of the kernels'
starts and ends (``coverage``) gives the time each set of kinds runs at once, per rank or stream, and a long
rank's figures are worked out a piece of it at a time (``Kernels.pieces``), so that what a figure holds beside
the kernels is a piece's, not a rank's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np

from popvision_py.analysis.common.tables import Table, group_median, group_percentile, sum_by
from popvision_py.analysis.imported.intervals import coverage, masks_with
from popvision_py.analysis.imported.kernels import HTA_LAUNCH_CALLS, LABELS, ROW_FIELDS, Kernels  # noqa: F401
from popvision_py.analysis.imported.stats import joined, key_stats
from popvision_py.format.schema import KERNEL_KINDS

# HTA's types, in the order its kernel breakdown gives them bits (kernel_type_to_analysis): 1, 2, 4
HTA_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")
HTA_OTHER = len(HTA_TYPES)  # a name HTA counts as none of the three (it calls it OTHER)
_COMM_RE = re.compile(r"^nccl.*Kernel")  # hta.utils.utils.NCCL_KERNEL_RE, matched from the name's start
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMPUTE, COMMUNICATION, MEMCPY, MEMSET = (KERNEL_KINDS.index(k) for k in ("compute", "communication", "memcpy",
                                                                           "memset"))
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")  # HTA's IdleTimeType, lower-cased as it prints them
KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay default, 30 in the trace's unit: microseconds

TEMPORAL_COLUMNS = ["rank", "kernel_ns", "idle_ns", "compute_ns", "non_compute_ns", "idle_pct", "compute_pct",
                    "non_compute_pct"]
KERNEL_TYPE_COLUMNS = ["kernel_type", "time_ns", "pct"]
OVERLAP_COLUMNS = ["rank", "communication_ns", "overlap_ns", "comm_comp_overlap_pct"]
TOP_COLUMNS = ["rank", "kernel_type", "name", "kernels", "sum_ns", "max_ns", "min_ns", "mean_ns", "std_ns"]
LAUNCH_COLUMNS = ["rank", "stream", "name", "correlation", "start_ns", "cpu_duration_ns", "gpu_duration_ns",
                  "launch_delay_ns"]
LAUNCH_SUMMARY_COLUMNS = ["rank", "kernels", "cpu_duration_median_ns", "gpu_duration_median_ns",
                          "launch_delay_median_ns", "launch_delay_p95_ns", "launch_delay_max_ns", "cpu_longer_pct"]
IDLE_COLUMNS = ["rank", "stream", "idle_category", "idle_ns", "idle_ratio"]
RANK_COLUMNS = ["rank", "window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "memory_ns",
                "non_compute_ns", "comm_hidden_ns", "idle_pct", "compute_pct", "non_compute_pct",
                "comm_comp_overlap_pct"]
STREAM_COLUMNS = ["rank", "stream", "kernels", "busy_ns", "compute_ns", "communication_ns", "memory_ns", "busy_pct"]
NAME_COLUMNS = ["rank", "kind", "name", "kernels", "sum_ns", "mean_ns", "min_ns", "max_ns", "std_ns", "busy_pct"]

# Why a profile has no GPU kernels to show, in one sentence (``gpu_view.GpuReport.missing``)
NO_KERNELS_TABLE = ("This profile was written before schema 5, which added the GPU kernels table: import the "
                    "traces again (popvision import) to see the GPU's time.")
NO_KERNELS_EMULATED = "An emulated IPU run has no GPU kernels: this section is for profiles imported from GPU traces."
NO_KERNELS_IMPORTED = ("The traces hold no GPU kernels (a run on the CPU): this section is for traces recorded on "
                       "GPUs.")
NO_KERNELS_GPU = ("The traces ran on GPUs but the profile holds no GPU kernels: the profiler recorded none (no "
                  "ProfilerActivity.CUDA), or an import that did not keep them wrote it: import the traces again.")


def _summed(k: Kernels, figure: Callable[[Kernels], np.ndarray], fields: tuple[str, ...]) -> np.ndarray:
    """``figure`` of ``k`` (reading ``fields``), its pieces' summed (``Kernels.pieces``): a coverage's busy columns."""
    return sum(figure(p) for p in k.pieces(fields=fields))


def hta_types(k: Kernels) -> np.ndarray:
    """Each kernel's type as HTA's ``get_kernel_type`` gives it from its name: an index into ``HTA_TYPES``,
    ``HTA_OTHER`` for none of them (a name matched once each, not once a kernel)."""
    by_name = np.array([_hta_type(str(n)) for n in k.names.tolist()] or [HTA_OTHER], np.int64)
    return by_name[k.name] if len(k) else np.zeros(0, np.int64)


def _hta_type(name: str) -> int:
    if _COMM_RE.match(name):
        return HTA_TYPES.index("COMMUNICATION")
    if _MEMORY_RE.match(name):
        return HTA_TYPES.index("MEMORY")
    return HTA_OTHER if _NOT_COMPUTE_RE.match(name) else HTA_TYPES.index("COMPUTATION")


def hta_selection(k: Kernels, last_step_start: np.ndarray | None) -> np.ndarray:
    """The kernels HTA 0.5 analyses (``Trace._filter_irrelevant_gpu_kernels``): with two profiler steps or
    more, only those whose launching runtime call started before the rank's last ``ProfilerStep``
    (``last_step_start[ipu]``), so a kernel with no launch in the trace is dropped; otherwise all.

    HTA leaves the last step out whole (its kernels may be cut short by the profiler stopping), and the
    kernels launched before the first step in; popvision's own figures take the profiled steps instead
    (``by_rank``)."""
    if last_step_start is None:
        return np.ones(len(k), bool)
    before = np.asarray(last_step_start, np.int64)[k.ipu]
    return (k.launch_start >= 0) & (k.launch_start < before)


def _extent(k: Kernels) -> tuple[np.ndarray, np.ndarray]:
    """Per IPU: its first kernel's start and its last kernel's end (0, 0 without any)."""
    facts = k.facts()
    return np.where(facts.hi > 0, facts.lo, 0), facts.hi


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, 100.0 * part / np.maximum(whole, 1), np.nan)


def _present(k: Kernels) -> np.ndarray:
    """The IPUs holding a kernel, in order."""
    return np.flatnonzero(k.facts().count)


def _streams(k: Kernels) -> np.ndarray:
    """The streams the kernels run on, sorted."""
    return k.facts().streams


def temporal(k: Kernels) -> Table:
    """HTA's temporal breakdown per rank (``TEMPORAL_COLUMNS``): ``kernel_ns`` is the rank's first kernel's
    start to its last kernel's end, over every stream; ``idle_ns`` the part of it no kernel runs;
    ``compute_ns`` the time a COMPUTATION kernel runs (``hta_types``); ``non_compute_ns`` the rest.

    As HTA: the window is the kernels' own, so time before the first kernel and after the last is not
    idle, however long the step; and a kernel of none of HTA's types (a name holding ``Sync`` or
    ``Memcpy``) is busy, non-compute time. HTA also counts the GPU side of a synchronisation
    (``cuda_sync`` events on a stream: "Stream Sync" busy, "Stream Wait Event" even computation) and
    a CPU operator carrying a ``stream`` argument (Inductor's Triton launches) as kernels; the kernels
    table holds neither."""
    cov = _summed(k, lambda p: coverage(p.ipu, p.start, p.end, np.where(
        hta_types(p) == HTA_TYPES.index("COMPUTATION"), 0, 1), k.num_ranks, 2), ("name",))
    lo, hi = _extent(k)
    span = hi - lo
    busy = cov[:, 1:].sum(axis=1)
    compute = cov[:, masks_with(0, 2)].sum(axis=1)
    idle, rest = span - busy, busy - compute
    rows = _present(k)
    return Table({"rank": k.ranks[rows], "kernel_ns": span[rows], "idle_ns": idle[rows], "compute_ns": compute[rows],
                  "non_compute_ns": rest[rows], "idle_pct": _pct(idle, span)[rows],
                  "compute_pct": _pct(compute, span)[rows], "non_compute_pct": _pct(rest, span)[rows]})


def _type_names() -> list[str]:
    """HTA's name of each set of types: its types in bit order joined by " overlapping "."""
    return [" overlapping ".join(t for b, t in enumerate(HTA_TYPES) if m & (1 << b)) for m in range(8)]


def _type_coverage(k: Kernels) -> np.ndarray:
    def piece(p: Kernels) -> np.ndarray:
        types = hta_types(p)
        return coverage(p.ipu, p.start, p.end, np.where(types < HTA_OTHER, types, -1), k.num_ranks, len(HTA_TYPES))
    return _summed(k, piece, ("name",))


def kernel_types(k: Kernels) -> Table:
    """HTA's kernel type breakdown (``KERNEL_TYPE_COLUMNS``), summed over the ranks as HTA's is: the time
    each set of types runs at once ("COMPUTATION", "COMPUTATION overlapping COMMUNICATION", ...: each
    type's kernels merged first, so two of one type overlapping count once) and its share of the sum,
    the largest first. Kernels of none of HTA's types count for nothing; sets that never run are left
    out (HTA may list one at 0 time, from two events at the same time)."""
    return kernel_types_of(type_times(k))


def type_times(k: Kernels) -> np.ndarray:
    """The time each set of HTA's types runs at once (a bit mask an entry), summed over the ranks: ``kernel_types``'."""
    return _type_coverage(k).sum(axis=0)


def kernel_types_of(total: np.ndarray) -> Table:
    """``kernel_types`` of ``type_times``."""
    masks = np.flatnonzero(total[1:] > 0) + 1
    masks = masks[np.argsort(-total[masks], kind="stable")]
    names = np.array(_type_names(), dtype=object)
    whole = np.full(len(masks), total[1:].sum())
    return Table({"kernel_type": names[masks], "time_ns": total[masks], "pct": _pct(total[masks], whole)})


def kernel_types_by_rank(k: Kernels) -> Table:
    """``kernel_types`` per rank: ``[rank, kernel_type, time_ns, pct]``, ``pct`` of the rank's sum."""
    cov = _type_coverage(k)
    rank, mask = np.nonzero(cov[:, 1:] > 0)
    mask += 1
    time = cov[rank, mask]
    whole = cov[:, 1:].sum(axis=1)
    return Table({"rank": k.ranks[rank], "kernel_type": np.array(_type_names(), dtype=object)[mask],
                  "time_ns": time, "pct": _pct(time, whole[rank])})


def comm_comp_overlap(k: Kernels) -> Table:
    """HTA's communication-computation overlap per rank (``OVERLAP_COLUMNS``): of the time a COMMUNICATION
    kernel runs, the share a COMPUTATION kernel runs too (NaN, as HTA's, for a rank with no
    communication kernel). Memory kernels do not count either way."""
    def piece(p: Kernels) -> np.ndarray:
        types = hta_types(p)
        label = np.select([types == HTA_TYPES.index("COMPUTATION"), types == HTA_TYPES.index("COMMUNICATION")],
                          [0, 1], -1)
        return coverage(p.ipu, p.start, p.end, label, k.num_ranks, 2)
    cov = _summed(k, piece, ("name",))
    comm, both = cov[:, 2] + cov[:, 3], cov[:, 3]
    rows = _present(k)
    return Table({"rank": k.ranks[rows], "communication_ns": comm[rows], "overlap_ns": both[rows],
                  "comm_comp_overlap_pct": _pct(both, comm)[rows]})


def top_kernels(k: Kernels, num_kernels: int = 10, duration_ratio: float = 0.8) -> Table:
    """HTA's kernel metrics (``TOP_COLUMNS``): per rank and type, each kernel name's count, sum, max, min,
    mean and standard deviation of its kernels' times; where a rank's type has more than ``num_kernels``
    names, those past the first ``num_kernels`` by time, or whose running sum passes the
    ``duration_ratio`` quantile of the running sums, become one row ``others``.

    As HTA: once that happens, every row's max, min and mean are those of the rows' *sums* (the
    kept names' each their own sum, std 0; ``others``' over the sums it holds), not of the kernels:
    ``kernels_by_name`` gives the kernels' own figures. Rows: rank, HTA's type order, time (largest first).
    """
    names = len(k.names)

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for p in k.pieces(fields=("name",)):
            types = hta_types(p)
            keep = types < HTA_OTHER
            yield (p.ipu[keep] * len(HTA_TYPES) + types[keep]) * names + p.name[keep], p.end[keep] - p.start[keep]
    s = key_stats(parts, k.num_ranks * len(HTA_TYPES) * names)
    present = np.flatnonzero(s["kernels"] > 0)
    g = present // names
    order = np.lexsort((present % names, -s["sum"][present], g))  # per group, the largest sum first
    present, g = present[order], g[order]
    first = np.r_[0, np.flatnonzero(np.diff(g)) + 1] if len(g) else np.zeros(0, np.int64)
    position = np.arange(len(g)) - np.repeat(first, np.diff(np.r_[first, len(g)]))
    others = np.zeros(len(g), bool)
    many = np.zeros(len(g), bool)
    for a, b in zip(first.tolist(), np.r_[first[1:], len(g)].tolist()):  # one (rank, type) at a time
        if b - a > num_kernels:
            running = np.cumsum(s["sum"][present[a:b]])
            others[a:b] = (running > np.quantile(running, duration_ratio)) | (position[a:b] >= num_kernels)
            many[a:b] = True
    cols = {c: s[c][present].astype(np.float64) for c in ("sum", "max", "min", "mean", "std")}
    for c in ("max", "min", "mean"):  # HTA's regrouping: a kept name's figures are its sum's
        cols[c] = np.where(many, cols["sum"], cols[c])
    cols["std"] = np.where(many, 0.0, cols["std"])
    rows = {"rank": k.ranks[g // len(HTA_TYPES)], "kernel_type": np.array(HTA_TYPES, dtype=object)[g % len(HTA_TYPES)],
            "name": k.names[present % names].astype(object), "kernels": s["kernels"][present], "sum_ns": cols["sum"],
            "max_ns": cols["max"], "min_ns": cols["min"], "mean_ns": cols["mean"], "std_ns": cols["std"]}
    kept = {c: v[~others] for c, v in rows.items()}
    merged = _others(g[others], s["sum"][present][others], s["kernels"][present][others], k.ranks)
    out = {c: np.concatenate([kept[c], merged[c]]) for c in TOP_COLUMNS}
    rank_of = {r: i for i, r in enumerate(k.ranks.tolist())}
    at = np.array([rank_of[r] for r in out["rank"].tolist()], np.int64) * len(HTA_TYPES) + np.array(
        [HTA_TYPES.index(t) for t in out["kernel_type"].tolist()], np.int64)
    order = np.lexsort((-out["sum_ns"], at))
    return Table({c: (v[order].astype(object) if c in ("kernel_type", "name") else v[order]) for c, v in out.items()})


def _others(group: np.ndarray, sums: np.ndarray, counts: np.ndarray, ranks: np.ndarray) -> dict[str, np.ndarray]:
    """HTA's ``others`` row of each (rank, type) group: the sum, max, min, mean and std (ddof 1) of its names' sums."""
    found = np.unique(group)
    key = np.searchsorted(found, group)
    s = key_stats(lambda: [(key, sums.astype(np.int64))], len(found))
    return {"rank": ranks[found // len(HTA_TYPES)], "kernel_type": np.array(HTA_TYPES, dtype=object)[
        found % len(HTA_TYPES)], "name": np.full(len(found), "others", dtype=object),
        "kernels": np.bincount(key, weights=counts, minlength=len(found)).astype(np.int64),
        "sum_ns": s["sum"].astype(np.float64), "max_ns": s["max"].astype(np.float64),
        "min_ns": s["min"].astype(np.float64), "mean_ns": s["mean"], "std_ns": s["std"]}


def launches(k: Kernels) -> Table:
    """HTA's kernel launch statistics (``LAUNCH_COLUMNS``), one row per kernel whose launching runtime call
    the trace holds: ``cpu_duration_ns`` the call's time, ``gpu_duration_ns`` the kernel's,
    ``launch_delay_ns`` = kernel start - (call start + call time), 0 where negative.

    HTA takes only kernels launched by ``HTA_LAUNCH_CALLS`` (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
    ``cudaMemcpyAsync``, ``cudaMemsetAsync``), by the launching call's name the kernels table records: not a
    CUDA graph's kernels (``cudaGraphLaunch``), ROCm's (``hipLaunchKernel``: HTA finds no launch on ROCm),
    Triton's (``cuLaunchKernel``) or a synchronous ``cudaMemcpy``'s."""
    found = []
    for p in k.pieces():
        rows = np.flatnonzero((p.launch_start >= 0) & p.hta_launch)
        found.append((k.ranks[p.ipu[rows]], p.stream[rows], k.names[p.name[rows]].astype(object), p.correlation[rows],
                      p.start[rows], p.launch_end[rows] - p.launch_start[rows], p.end[rows] - p.start[rows],
                      np.maximum(p.start[rows] - p.launch_end[rows], 0)))
    return Table(dict(zip(LAUNCH_COLUMNS, joined(found))))


def launch_summary(k: Kernels) -> Table:
    """``launches`` per rank (``LAUNCH_SUMMARY_COLUMNS``): the medians, the launch delay's 95th percentile
    (linear, as NumPy's and pandas' default) and largest, and ``cpu_longer_pct``: the share of kernels
    whose runtime call outlasted the kernel, HTA's first finding. Many short kernels that take longer to
    launch than to run keep the GPU waiting on the CPU: the evidence of a launch-bound step. Every rank at
    once, NumPy's figures to the last bit (``tables.group_median``, ``tables.group_percentile``)."""
    one = k.num_ranks == 1  # one rank: a sort of its values, not of their rows by rank and value
    count, longer = np.zeros(k.num_ranks, np.int64), np.zeros(k.num_ranks, np.int64)

    def ordered(of: Callable[[Kernels, np.ndarray], np.ndarray], tally: bool = False) -> np.ndarray:
        """A column of the launched kernels (``of`` a piece's rows), by rank then value: a pass a column, so that a
        long rank's columns are held one at a time."""
        found = []
        for p in k.pieces(fields=("launch_start", "launch_end", "hta_launch")):
            rows = np.flatnonzero((p.launch_start >= 0) & p.hta_launch)
            if tally:
                count[:] += np.bincount(p.ipu[rows], minlength=k.num_ranks)[:k.num_ranks]
                longer[:] += np.bincount(p.ipu[rows], weights=(p.launch_end - p.launch_start - p.end + p.start)[
                    rows] > 0, minlength=k.num_ranks)[:k.num_ranks].astype(np.int64)
            found.append((of(p, rows), *(() if one else (p.ipu[rows],))))
        v, *ipu = joined(found)
        if one:
            v.sort()
            return v
        return v[np.lexsort((v, ipu[0]))]
    cpu = ordered(lambda p, rows: p.launch_end[rows] - p.launch_start[rows], tally=True)
    ranks = _present(k)
    n, at = count[ranks], (np.cumsum(count) - count)[ranks]
    out = {"rank": k.ranks[ranks], "kernels": n.astype(np.int64), "cpu_duration_median_ns": group_median(cpu, at, n)}
    del cpu
    out["gpu_duration_median_ns"] = group_median(ordered(lambda p, rows: p.end[rows] - p.start[rows]), at, n)
    d = ordered(lambda p, rows: np.maximum(p.start[rows] - p.launch_end[rows], 0))
    return Table({**out, "launch_delay_median_ns": group_median(d, at, n),
                  "launch_delay_p95_ns": group_percentile(d, at, n, 95), "launch_delay_max_ns": group_percentile(
                      d, at, n, 100), "cpu_longer_pct": np.where(n > 0, 100.0 * longer[ranks] / np.maximum(n, 1),
                                                                 np.nan)})


def idle_breakdown(k: Kernels, kernel_wait_ns: int = KERNEL_WAIT_NS) -> Table:
    """HTA's idle time breakdown per rank and stream (``IDLE_COLUMNS``). On each stream, in start order, the
    gap before a kernel (its start - the previous kernel's end) is ``host_wait`` when the kernel's
    runtime call started after the previous kernel ended (the CPU had not queued it yet), else
    ``kernel_wait`` when shorter than ``kernel_wait_ns``, else ``other``; ``idle_ratio`` is each
    category's share of the stream's gaps.

    As HTA: the previous kernel is the one before in start order (not the latest end), so a gap may be
    negative where kernels of one stream overlap; the stream's first kernel counts as ``other`` with
    no gap (the category is listed at 0 ns); and HTA's default threshold, documented as 30 ns, is 30 of
    the trace's microseconds (``KERNEL_WAIT_NS``)."""
    streams = _streams(k)
    size = max(k.num_ranks * len(streams), 1) * 3
    count, idle = np.zeros(size, np.int64), np.zeros(size, np.int64)
    last_end, seen = np.zeros(size // 3, np.int64), np.zeros(size // 3, bool)  # each stream's last kernel so far
    for p in k.pieces(fields=("stream", "launch_start")):  # in start order: a stream's kernels are met in order, its
        # last carried to the next piece
        if not len(p.start):
            continue  # (a trace without kernels: one empty piece)
        group = p.ipu * max(len(streams), 1) + np.searchsorted(streams, p.stream)
        order = np.lexsort((p.start, group))
        g, start, end, launch = group[order], p.start[order], p.end[order], p.launch_start[order]
        head = np.r_[True, g[1:] != g[:-1]]
        follows = np.where(head, seen[g], True)
        prev_end = np.where(head, last_end[g], np.r_[0, end[:-1]])
        gap = np.where(follows, start - prev_end, 0)
        host = follows & (launch > prev_end)
        key = g * 3 + np.where(host, 0, np.where(follows & (gap < kernel_wait_ns), 1, 2))
        count += np.bincount(key, minlength=size)
        idle += sum_by(key, gap, size)
        tail = np.r_[g[1:] != g[:-1], True]
        last_end[g[tail]], seen[g[tail]] = end[tail], True
    rows = np.flatnonzero(count)
    whole = sum_by(rows // 3, idle[rows], size // 3)[rows // 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(whole != 0, idle[rows] / np.where(whole != 0, whole, 1), np.nan)
    width = max(len(streams), 1)
    return Table({"rank": k.ranks[rows // 3 // width],
                  "stream": streams[rows // 3 % width] if len(streams) else np.zeros(0, np.int64),
                  "idle_category": np.array(IDLE_CATEGORIES, dtype=object)[rows % 3], "idle_ns": idle[rows],
                  "idle_ratio": ratio})


def _kind_label(k: Kernels) -> np.ndarray:
    """0 compute, 1 communication, 2 memory (memcpy, memset): the table's own kinds."""
    return np.select([k.kind == COMPUTE, k.kind == COMMUNICATION], [0, 1], 2)


def by_rank(k: Kernels, window: tuple[np.ndarray, np.ndarray]) -> Table:
    """popvision's GPU time per rank within ``window`` (each rank's ``(start, end)``: the profiled steps),
    ``RANK_COLUMNS``: ``busy_ns`` some kernel runs, ``idle_ns`` none does; ``compute_ns``,
    ``communication_ns``, ``memory_ns`` a kernel of that kind runs (each merged: overlaps once);
    ``non_compute_ns`` busy without compute; ``comm_hidden_ns`` communication while compute runs, and
    ``comm_comp_overlap_pct`` its share of the communication. Kinds are the table's (``kind``), not
    HTA's names, and a kernel counts only within the window."""
    def piece(p: Kernels) -> np.ndarray:
        inside = p.clip(window)
        return coverage(inside.ipu, inside.start, inside.end, _kind_label(inside), k.num_ranks, 3)
    cov = _summed(k, piece, ("kind",))
    span = np.maximum(np.asarray(window[1], np.int64) - np.asarray(window[0], np.int64), 0)
    busy = cov[:, 1:].sum(axis=1)
    part = {name: cov[:, masks_with(bit, 3)].sum(axis=1) for bit, name in enumerate(("compute", "comm", "memory"))}
    hidden = cov[:, [3, 7]].sum(axis=1)
    rest = busy - part["compute"]
    return Table({"rank": k.ranks, "window_ns": span, "busy_ns": busy, "idle_ns": span - busy,
                  "compute_ns": part["compute"], "communication_ns": part["comm"], "memory_ns": part["memory"],
                  "non_compute_ns": rest, "comm_hidden_ns": hidden, "idle_pct": _pct(span - busy, span),
                  "compute_pct": _pct(part["compute"], span), "non_compute_pct": _pct(rest, span),
                  "comm_comp_overlap_pct": _pct(hidden, part["comm"])})


def by_stream(k: Kernels, window: tuple[np.ndarray, np.ndarray]) -> Table:
    """popvision's GPU time per rank and stream within ``window`` (``STREAM_COLUMNS``): the stream's
    kernels, the time one runs (``busy_ns``, and by kind), and ``busy_pct`` of the rank's window."""
    streams = _streams(k)
    width = max(len(streams), 1)
    cov, count = np.zeros((k.num_ranks * width, 8), np.int64), np.zeros(k.num_ranks * width, np.int64)
    for p in k.pieces(fields=("stream", "kind")):
        inside = p.clip(window)
        group = inside.ipu * width + np.searchsorted(streams, inside.stream)
        cov += coverage(group, inside.start, inside.end, _kind_label(inside), k.num_ranks * width, 3)
        count += np.bincount(group, minlength=k.num_ranks * width)
    rows = np.flatnonzero(count)
    span = np.maximum(np.asarray(window[1], np.int64) - np.asarray(window[0], np.int64), 0)
    busy = cov[rows, 1:].sum(axis=1)
    part = [cov[rows][:, masks_with(bit, 3)].sum(axis=1) for bit in range(3)]
    return Table({"rank": k.ranks[rows // width], "stream": streams[rows % width] if len(streams) else rows,
                  "kernels": count[rows], "busy_ns": busy, "compute_ns": part[0], "communication_ns": part[1],
                  "memory_ns": part[2], "busy_pct": _pct(busy, span[rows // width])})


def kernels_by_name(k: Kernels, window: tuple[np.ndarray, np.ndarray], n: int | None = 10) -> Table:
    """Each rank's kernels by name within ``window`` (``NAME_COLUMNS``), the most time first, ``n`` a rank
    (all if None): count, sum, mean, min, max and std (ddof 1) of the kernels' own times, and
    ``busy_pct`` their sum's share of the rank's window. The kernels worth a look: the longest,
    and the many short ones whose launches may cost more than they run."""
    names = max(len(k.names), 1)
    kind = np.zeros(k.num_ranks * names, np.int64)

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for p in k.pieces(fields=("name", "kind")):
            inside = p.clip(window)
            key = inside.ipu * names + inside.name
            kind[key] = inside.kind  # each name's kind (one: a name is of one kind)
            yield key, inside.end - inside.start
    s = key_stats(parts, k.num_ranks * names)
    rows = np.flatnonzero(s["kernels"])
    rows = rows[np.lexsort((-s["sum"][rows], rows // names))]
    if n is not None:
        rank = rows // names
        first = np.searchsorted(rank, rank)
        rows = rows[np.arange(len(rows)) - first < n]
    span = np.maximum(np.asarray(window[1], np.int64) - np.asarray(window[0], np.int64), 0)
    return Table({"rank": k.ranks[rows // names], "kind": np.array(KERNEL_KINDS, dtype=object)[kind[rows]],
                  "name": k.names[rows % names].astype(object), "kernels": s["kernels"][rows], "sum_ns": s["sum"][rows],
                  "mean_ns": s["mean"][rows], "min_ns": s["min"][rows], "max_ns": s["max"][rows],
                  "std_ns": s["std"][rows], "busy_pct": _pct(s["sum"][rows], span[rows // names])})
