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
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Columns, Table, group_median, group_percentile, sum_by
from popvision_py.analysis.imported.intervals import coverage, idle_cuts, masks_with
from popvision_py.analysis.imported.stats import key_stats
from popvision_py.format.schema import KERNEL_KINDS

# HTA's types, in the order its kernel breakdown gives them bits (kernel_type_to_analysis): 1, 2, 4
HTA_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")
HTA_OTHER = len(HTA_TYPES)  # a name HTA counts as none of the three (it calls it OTHER)
_COMM_RE = re.compile(r"^nccl.*Kernel")  # hta.utils.utils.NCCL_KERNEL_RE, matched from the name's start
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMPUTE, COMMUNICATION, MEMCPY, MEMSET = (KERNEL_KINDS.index(k) for k in ("compute", "communication", "memcpy",
                                                                           "memset"))
# the runtime calls whose kernels HTA's launch statistics count (cuda_kernel_launch_stats)
HTA_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
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


@dataclass(frozen=True)
class Kernels:
    """The ``kernels`` table as int64 arrays, one row per kernel, copy or set, sorted by ``ipu`` then
    ``start``. ``kind`` is a code into ``schema.KERNEL_KINDS``, ``name`` a code into ``names``;
    ``ranks[ipu]`` is the rank the trace names (an imported profile's IPU is its position)."""

    ipu: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    correlation: np.ndarray
    launch_start: np.ndarray
    launch_end: np.ndarray
    hta_launch: np.ndarray  # bool: launched by one of HTA_LAUNCH_CALLS
    names: np.ndarray
    ranks: np.ndarray
    # what each moves (bytes), and its process group, launching operator and module: codes into ``labels``
    # (its words: "" where the trace says none)
    nbytes: np.ndarray | None = None
    group: np.ndarray | None = None
    op: np.ndarray | None = None
    module: np.ndarray | None = None
    labels: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def from_columns(cls, columns: Columns, ranks: Any) -> Kernels:
        """The table as ``Report.columns("kernels")`` decodes it; ``ranks``: each IPU's rank."""
        n = len(columns)
        col = (lambda c: np.asarray(columns[c], np.int64)) if n else (lambda c: np.zeros(0, np.int64))  # noqa: E731
        name, names = _sorted(columns.codes("name"), columns.words("name")) if n else (np.zeros(0, np.int64),
                                                                                      np.zeros(0, object))
        return cls(ipu=col("ipu"), stream=col("stream"),
                   kind=columns.codes_in("kind", KERNEL_KINDS) if n else np.zeros(0, np.int64), name=name,
                   start=col("start_cycle"), end=col("end_cycle"), correlation=col("correlation"),
                   launch_start=col("launch_start_cycle"), launch_end=col("launch_end_cycle"),
                   hta_launch=(columns.codes_in("launch_name", HTA_LAUNCH_CALLS) < len(HTA_LAUNCH_CALLS)) if n
                   else np.zeros(0, bool),
                   names=names, ranks=np.asarray(ranks, np.int64),
                   nbytes=col("bytes") if "bytes" in columns else np.zeros(n, np.int64), **_labelled(columns, n))

    @classmethod
    def build(cls, ipu: Any, stream: Any, kind: Any, name: Any, start: Any, end: Any, launch_start: Any = None,
              launch_end: Any = None, correlation: Any = None, ranks: Any = None, launch_name: Any = None,
              nbytes: Any = None, labels: dict[str, Any] | None = None) -> Kernels:
        """Kernels from plain sequences (``kind`` and ``name`` as strings), sorted by ipu then start:
        the tests' and the benchmark's raw traces' way in. Launch times default to -1 (none), the launching
        call's name to ``cudaLaunchKernel`` where a launch is given; ``nbytes`` to 0 and ``labels`` (``group``,
        ``op``, ``module``: strings per kernel) to none."""
        ipu = np.asarray(ipu, np.int64)
        n = len(ipu)
        none = np.full(n, -1, np.int64)
        names, codes = np.unique(np.asarray(name, dtype=object).astype(str), return_inverse=True)
        kinds = np.array([KERNEL_KINDS.index(k) for k in np.asarray(kind, dtype=object).tolist()], np.int64)
        start = np.asarray(start, np.int64)
        order = np.lexsort((start, ipu))
        pick = lambda a: (none if a is None else np.asarray(a, np.int64))[order]  # noqa: E731
        count = int(ipu.max()) + 1 if n else 0
        return cls(ipu=ipu[order], stream=np.asarray(stream, np.int64)[order], kind=kinds[order],
                   name=codes.astype(np.int64)[order], start=start[order], end=np.asarray(end, np.int64)[order],
                   correlation=pick(correlation), launch_start=pick(launch_start), launch_end=pick(launch_end),
                   hta_launch=(pick(launch_start) >= 0) if launch_name is None else np.isin(
                       np.asarray(launch_name, dtype=object).astype(str), HTA_LAUNCH_CALLS)[order],
                   names=names.astype(object),
                   ranks=np.arange(count, dtype=np.int64) if ranks is None else np.asarray(ranks, np.int64),
                   nbytes=pick(nbytes).clip(0) if nbytes is not None else np.zeros(n, np.int64),
                   **{k: v[order] if k in LABELS else v for k, v in _labels_of(n, labels or {}).items()})

    @classmethod
    def joined(cls, pieces: list[Kernels], let_go: Callable[[], Any] | None = None) -> Kernels:
        """The pieces' kernels (a rank's row groups, of one ``ranks``) one after the other, as ``from_columns`` makes
        their rows, names and labels the sorted union of the pieces' words. A field at a time, each let go of in the
        pieces once joined (``pieces`` is changed), then ``let_go()`` where given (a long rank's pages handed back)."""
        if len(pieces) == 1:
            return pieces[0]
        out: dict[str, Any] = {"ranks": pieces[0].ranks, "labels": {}}
        for coded in ("name", *LABELS):  # each piece's codes into the union of the pieces' words
            words_of = [p.names if coded == "name" else p.labels[coded] for p in pieces]
            words = np.unique(np.concatenate(words_of).astype(object))
            out[coded] = np.concatenate([np.searchsorted(words, w).astype(np.int64)[getattr(p, coded)]
                                         for w, p in zip(words_of, pieces)])
            (out if coded == "name" else out["labels"])["names" if coded == "name" else coded] = words
            pieces[:] = [replace(p, **{coded: None}) for p in pieces]
        for name in ROW_FIELDS:
            if name not in out:
                out[name] = np.concatenate([getattr(p, name) for p in pieces])
                pieces[:] = [replace(p, **{name: None}) for p in pieces]
                if let_go is not None:
                    let_go()
        return cls(**out)

    def owned(self) -> Kernels:
        """These kernels with arrays of their own: a copy of each that is a view (of the Arrow table read)."""
        return replace(self, **{f: getattr(self, f).copy() for f in ROW_FIELDS
                                if getattr(self, f) is not None and not getattr(self, f).flags.owndata})

    def take(self, rows: np.ndarray) -> Kernels:
        """The kernels at ``rows`` (a mask or indexes), in their order: views where they are a run (not copies)."""
        at = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows)
        if len(at) and at[-1] - at[0] + 1 == len(at) and (rows.dtype == bool or (np.diff(at) == 1).all()):
            rows = slice(int(at[0]), int(at[-1]) + 1)
        return replace(self, **{f: getattr(self, f)[rows] for f in ROW_FIELDS})

    def words(self, label: str, codes: np.ndarray) -> np.ndarray:
        """A label's (``group``, ``op``, ``module``) words at ``codes``."""
        return self.labels[label][codes]

    def clip(self, window: tuple[np.ndarray, np.ndarray]) -> Kernels:
        """Each kernel cut to its rank's window ``(start[ipu], end[ipu])``; those left with no time dropped."""
        lo, hi = (np.asarray(w, np.int64)[self.ipu] for w in window)
        start, end = np.clip(self.start, lo, hi), np.clip(self.end, lo, hi)
        inside = end > start
        return replace(self, start=start, end=end).take(inside)

    def pieces(self, rows: int | None = None) -> Iterator[Kernels]:
        """These kernels in runs of about ``rows`` or more (views; one where fewer), cut where their rank's GPU
        idles (``intervals.idle_cuts``): a figure additive over a rank's time is the sum of the pieces'."""
        cuts = idle_cuts(self.ipu, self.start, self.end, rows).tolist()
        for a, b in zip(cuts[:-1], cuts[1:]):
            yield self if b - a == len(self) else self.take(np.arange(a, b))

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)


def _summed(k: Kernels, figure: Callable[[Kernels], np.ndarray]) -> np.ndarray:
    """``figure`` of ``k``, its pieces' summed (``Kernels.pieces``): a coverage's busy columns (not its first)."""
    return sum(figure(p) for p in k.pieces())


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
    lo = np.full(k.num_ranks, np.iinfo(np.int64).max, np.int64)
    hi = np.zeros(k.num_ranks, np.int64)
    np.minimum.at(lo, k.ipu, k.start)
    np.maximum.at(hi, k.ipu, k.end)
    return np.where(hi > 0, lo, 0), hi


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, 100.0 * part / np.maximum(whole, 1), np.nan)


def _present(k: Kernels) -> np.ndarray:
    """The IPUs holding a kernel, in order."""
    return np.flatnonzero(np.bincount(k.ipu, minlength=k.num_ranks)[:k.num_ranks])


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
        hta_types(p) == HTA_TYPES.index("COMPUTATION"), 0, 1), k.num_ranks, 2))
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
    return _summed(k, piece)


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
    cov = _summed(k, piece)
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
        for p in k.pieces():
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
    rows = np.flatnonzero((k.launch_start >= 0) & k.hta_launch)
    return Table({"rank": k.ranks[k.ipu[rows]], "stream": k.stream[rows], "name": k.names[k.name[rows]].astype(object),
                  "correlation": k.correlation[rows], "start_ns": k.start[rows],
                  "cpu_duration_ns": k.launch_end[rows] - k.launch_start[rows],
                  "gpu_duration_ns": k.end[rows] - k.start[rows],
                  "launch_delay_ns": np.maximum(k.start[rows] - k.launch_end[rows], 0)})


def launch_summary(k: Kernels) -> Table:
    """``launches`` per rank (``LAUNCH_SUMMARY_COLUMNS``): the medians, the launch delay's 95th percentile
    (linear, as NumPy's and pandas' default) and largest, and ``cpu_longer_pct``: the share of kernels
    whose runtime call outlasted the kernel, HTA's first finding. Many short kernels that take longer to
    launch than to run keep the GPU waiting on the CPU: the evidence of a launch-bound step. Every rank at
    once, NumPy's figures to the last bit (``tables.group_median``, ``tables.group_percentile``)."""
    rows = np.flatnonzero((k.launch_start >= 0) & k.hta_launch)
    ipu = k.ipu[rows]
    count = np.bincount(ipu, minlength=k.num_ranks)[:k.num_ranks]
    ranks = _present(k)
    n, at = count[ranks], (np.cumsum(count) - count)[ranks]
    one = not len(ipu) or ipu[0] == ipu[-1]  # one rank (sorted by ipu): a sort of its values, not of their rows
    ordered = lambda v: np.sort(v) if one else v[np.lexsort((v, ipu))]  # noqa: E731 (by rank, then value)
    cpu, gpu = k.launch_end[rows] - k.launch_start[rows], k.end[rows] - k.start[rows]
    longer = np.bincount(ipu, weights=(cpu > gpu), minlength=k.num_ranks)[:k.num_ranks][ranks]
    out = {"rank": k.ranks[ranks], "kernels": n.astype(np.int64), "cpu_duration_median_ns": group_median(
        ordered(cpu), at, n), "gpu_duration_median_ns": group_median(ordered(gpu), at, n)}
    del cpu, gpu  # a long rank's columns let go one at a time
    d = ordered(np.maximum(k.start[rows] - k.launch_end[rows], 0))
    return Table({**out, "launch_delay_median_ns": group_median(d, at, n),
                  "launch_delay_p95_ns": group_percentile(d, at, n, 95), "launch_delay_max_ns": group_percentile(
                      d, at, n, 100), "cpu_longer_pct": np.where(n > 0, 100.0 * longer / np.maximum(n, 1), np.nan)})


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
    streams = np.unique(k.stream)
    size = max(k.num_ranks * len(streams), 1) * 3
    count, idle = np.zeros(size, np.int64), np.zeros(size, np.int64)
    last_end, seen = np.zeros(size // 3, np.int64), np.zeros(size // 3, bool)  # each stream's last kernel so far
    for p in k.pieces():  # in start order: a stream's kernels are met in order, its last carried to the next piece
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


LABELS = ("group", "op", "module")  # the kernels' words beside their names (the table's category columns)
# ``Kernels``' fields of a value a kernel
ROW_FIELDS = ("ipu", "stream", "kind", "name", "start", "end", "correlation", "launch_start", "launch_end",
              "hta_launch", "nbytes", *LABELS)


def _labelled(columns: Columns, n: int) -> dict[str, Any]:
    """``Kernels``' label codes and their words, from the table's columns (none before they were written)."""
    out: dict[str, Any] = {"labels": {}}
    for label in LABELS:
        if n and label in columns:
            out[label], out["labels"][label] = _sorted(columns.codes(label), columns.words(label))
        else:
            out[label], out["labels"][label] = np.zeros(n, np.int64), np.array([""], object)
    return out


def _sorted(codes: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A category's codes and words, the words sorted as ``build``'s: ties go by name, whole or a rank read."""
    order = np.argsort(words.astype(str), kind="stable")
    code = np.empty(len(order), np.int64)
    code[order] = np.arange(len(order))
    return code[codes], words[order]


def _labels_of(n: int, given: dict[str, Any]) -> dict[str, Any]:
    """``Kernels``' label codes and words from plain strings per kernel (``build``)."""
    out: dict[str, Any] = {"labels": {}}
    for label in LABELS:
        words = np.asarray(given.get(label, [""] * n), dtype=object).astype(str)
        vocabulary, codes = np.unique(words, return_inverse=True)
        out[label], out["labels"][label] = codes.astype(np.int64), vocabulary.astype(object)
    return out


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
    cov = _summed(k, piece)
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
    streams = np.unique(k.stream)
    width = max(len(streams), 1)
    cov, count = np.zeros((k.num_ranks * width, 8), np.int64), np.zeros(k.num_ranks * width, np.int64)
    for p in k.pieces():
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
        for p in k.pieces():
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
