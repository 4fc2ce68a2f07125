"""What bound each profiled step of a GPU trace and the kernels worth a look: with the phases the trace's own
annotations name (``phases``), the figures beyond Holistic Trace Analysis 0.5's (docs/real-traces.md, "Beyond HTA").

- ``step_bounds``: per rank and profiler step, the GPU's busy time (some kernel, copy or set runs on
  any stream) and its idle time by cause: ``launch_wait`` (an idle gap whose next kernel's launching
  runtime call started after the GPU went idle: the queue had run dry, the GPU waited for the CPU),
  ``input_wait`` (idle while the training loop fetched a batch: ``enumerate(DataLoader)#...__next__``),
  and ``other`` (the next kernel was queued already: it waited on a dependency, a synchronisation,
  another rank; or its launch is not in the trace, or no kernel followed). The verdict is the largest
  wait when it takes ``BOUND_PCT`` of the step, else gpu-bound.
- ``worth_a_look``: each rank's kernels by name, those listed for their GPU time (``long``) and those
  launched many times for less GPU time each than launching them costs (``short and many``).

The spans come from the ranks' CPU timelines the import writes beside the profile (``system/``), handed
in as ``TraceSpans`` on the kernels' time. Every figure is columnar: sorts, searches and running counts
over whole arrays, never a loop over kernels or spans.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.imported.gpu import Kernels, coverage
from popvision_py.analysis.imported.stats import group_medians, key_medians
from popvision_py.format.arrays import ascending
from popvision_py.format import system as S

BOUND_PCT = 20.0  # a wait binds a step when it takes at least this share of it
VERDICTS = ("gpu-bound", "input-bound", "launch-bound", "other-wait")  # the waits' order breaks ties
SHORT_NS = 10_000  # a kernel name whose median kernel runs less than this is short...
MANY_KERNELS = 100  # ... and many when it runs at least this many times in the profiled steps
LONG_KERNELS = 5  # each rank's names listed for their GPU time
SHORT_KERNELS = 5  # each rank's short and many names listed, the most launched first
STEP, INPUT, PHASE = 0, 1, 2  # TraceSpans.kind
_STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
_BIG = np.iinfo(np.int64).max

BOUND_COLUMNS = ["rank", "step", "start_ns", "step_ns", "gpu_busy_ns", "gpu_busy_pct", "launch_wait_ns",
                 "launch_wait_pct", "input_wait_ns", "input_wait_pct", "other_idle_ns", "other_idle_pct", "kernels",
                 "kernel_median_ns", "launch_median_ns", "verdict"]
WORTH_COLUMNS = ["rank", "name", "reason", "kernels", "total_ns", "mean_ns", "median_ns", "launch_median_ns",
                 "window_pct", "op", "module", "why"]
SUMMARY_COLUMNS = ["rank", "steps", "verdicts", "median_step_ns", "gpu_busy_pct", "launch_wait_pct", "input_wait_pct",
                   "slowest_step", "slowest_ns", "slowest_verdict"]


def _step_like(name: str) -> bool:
    """A name ``step_starts`` (its family, ``ProfilerStep``) or ``TraceSpans.from_timeline`` (``ProfilerStep#N``)
    may read as a step: every such name starts so."""
    return name.startswith("ProfilerStep")


# The rows of the ranks' CPU timelines the GPU's figures read (``views.SystemReport.some_events``): the DataLoader's
# and the annotations' channels, and the profiler's steps; not the operators and calls of the ``pytorch`` channel,
# most of a trace's rows.
TIMELINE_ROWS = {"channel": frozenset({S.DATALOADER, S.ANNOTATION}).__contains__, "name": _step_like}


KIND, CODE = np.int8, np.int32  # the dtypes of a span's kind, and of its stream and name


@dataclass(frozen=True)
class TraceSpans:
    """The spans of the ranks' CPU timelines the GPU's figures read, on the kernels' time (ns from the profile's
    origin): profiler steps (``STEP``), the training loop's DataLoader fetches (``INPUT``) and the annotations
    (``PHASE``). ``stream`` is a GPU track's annotation's stream, -1 for the CPU's spans; ``name`` a code into
    ``names``. ``ipu``, ``start`` and ``end`` are int64, ``kind`` int8, ``stream`` and ``name`` int32 (``KIND``,
    ``CODE``): a 10 GB import's 348,000 spans in 11 MiB, not 16; keys made of them are made in int64."""

    ipu: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    names: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def build(cls, ipu: Any, start: Any, end: Any, kind: Any, name: Any, stream: Any = None) -> TraceSpans:
        """Spans from plain sequences (``name`` as strings): the tests' way in."""
        names, codes = np.unique(np.asarray(name, dtype=object).astype(str), return_inverse=True)
        ipu = np.asarray(ipu, np.int64)
        return cls(ipu=ipu, start=np.asarray(start, np.int64), end=np.asarray(end, np.int64),
                   kind=np.asarray(kind, KIND),
                   stream=np.full(len(ipu), -1, CODE) if stream is None else np.asarray(stream, CODE),
                   name=codes.astype(CODE), names=names.astype(object))

    @classmethod
    def from_timeline(cls, events: Any, ranks: np.ndarray, origin_ns: int | None) -> TraceSpans:
        """The spans of an imported profile's CPU timelines (``events``: ``host.system.Events``, handed in):
        process ``rank-R`` is the IPU of rank R; channel ``pytorch``'s ``ProfilerStep#N`` are steps (one a
        name: Kineto's copy on the GPU's track comes after the CPU's), channel ``dataloader`` fetches,
        channel ``annotation`` phases (thread ``GPU stream S``: on stream S). ``origin_ns``: the traces'
        clock at cycle 0 (``run.import.origin_ns``); a profile imported before it was recorded: the first
        step's start, else the first span's."""
        if events is None or not len(events):
            return cls.build([], [], [], [], [])
        ipu_of = {int(r): i for i, r in enumerate(np.asarray(ranks).tolist())}
        by_process = np.array([ipu_of.get(int(p[5:]), -1) if p.startswith("rank-") and p[5:].isdigit() else -1
                               for p in events.processes], np.int64)
        row_ipu = by_process[events.row_process] if len(events.rows) else np.zeros(0, np.int64)
        row_stream = np.array([int(t[len(S.GPU_STREAM):]) if t.startswith(S.GPU_STREAM) and
                               t[len(S.GPU_STREAM):].isdigit() else -1 for _, t in events.rows], np.int64)
        channel = np.array([{S.PYTORCH: STEP, S.DATALOADER: INPUT, S.ANNOTATION: PHASE}.get(c, -1)
                            for c in events.channels], np.int64)[events.channel]
        is_step = np.array([_STEP_NAME.match(n) is not None for n in events.names] or [False])[events.name]
        ipu, stream = row_ipu[events.row], row_stream[events.row]
        keep = (ipu >= 0) & (events.kind == S.KINDS.index("span")) & (channel >= 0) & ((channel != STEP) | is_step)
        keep &= (channel != STEP) | (stream < 0)
        rows = np.flatnonzero(keep)
        steps = rows[channel[rows] == STEP]
        order = np.lexsort((events.start[steps], events.name[steps], ipu[steps]))
        first = np.r_[True, (np.diff(ipu[steps][order]) != 0) | (np.diff(events.name[steps][order]) != 0)][:len(steps)]
        rows = np.sort(np.concatenate([rows[channel[rows] != STEP], steps[order][first]]))
        if origin_ns is None:
            origin_ns = int(events.start[steps if len(steps) else rows].min()) if len(rows) else 0
        used, name = np.unique(events.name[rows], return_inverse=True)
        return cls(ipu=ipu[rows], start=events.start[rows] - origin_ns, end=events.end[rows] - origin_ns,
                   kind=channel[rows].astype(KIND), stream=stream[rows].astype(CODE), name=name.astype(CODE),
                   names=np.array([events.names[c] for c in used.tolist()], dtype=object))

    def take(self, rows: np.ndarray) -> TraceSpans:
        return TraceSpans(self.ipu[rows], self.start[rows], self.end[rows], self.kind[rows], self.stream[rows],
                          self.name[rows], self.names)

    def rows(self, a: int, b: int) -> TraceSpans:
        """Rows ``a`` to ``b`` as views, not copies."""
        return TraceSpans(self.ipu[a:b], self.start[a:b], self.end[a:b], self.kind[a:b], self.stream[a:b],
                          self.name[a:b], self.names)

    def ipu_sorted(self) -> bool:
        """Whether the spans are in IPU order (each IPU's a run of rows)."""
        return ascending([self.ipu], strict=False)


def before(keys: tuple[np.ndarray, ...], queries: tuple[np.ndarray, ...], inclusive: bool = False) -> np.ndarray:
    """``np.searchsorted`` over rows of several keys: for each query row, how many of the ``keys`` rows (sorted
    lexicographically, first key first) come before it (equal rows too where ``inclusive``). Where every row's
    keys fit one int64 (``_one_key``), a search of those; else one sort of the keys and queries together."""
    one = _one_key(keys, queries)
    if one is not None:
        return np.searchsorted(one[0], one[1], side="right" if inclusive else "left").astype(np.int64)
    n, m = len(keys[0]), len(queries[0])
    entry = np.r_[np.ones(n, np.int64), np.zeros(m, np.int64)]
    tie = (1 - entry) if inclusive else entry  # among equal rows, entries first when they count
    order = np.lexsort((tie, *(np.concatenate([k, q]) for k, q in zip(keys[::-1], queries[::-1]))))
    count = np.cumsum(entry[order])
    out = np.zeros(m, np.int64)
    query = order >= n
    out[order[query] - n] = count[query]
    return out


def _one_key(keys: tuple[np.ndarray, ...], queries: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of ``keys`` and of ``queries`` each as one int64 in the same order (each key less its least,
    times the widths of the keys after it), or None where the widths' product passes 2^62: a rank's IPU and
    times in ns fit. A search of them holds a row's int64, not the sort of keys and queries together (a few
    arrays of both: 100 MiB at a rank of 1.6 M kernels)."""
    lows, widths = [], []
    for k, q in zip(keys, queries):
        both = [int(a.min()) for a in (k, q) if len(a)] + [int(a.max()) for a in (k, q) if len(a)]
        low = min(both) if both else 0
        lows.append(low)
        widths.append((max(both) if both else 0) - low + 1)
    if math.prod(widths) >= 1 << 62:
        return None
    out = []
    for rows in (keys, queries):
        one = np.zeros(len(rows[0]), np.int64)
        for values, low, width in zip(rows, lows, widths):
            one *= width
            one += np.asarray(values, np.int64) - low
        out.append(one)
    return out[0], out[1]


def distinct(values: np.ndarray, counts: bool = False, inverse: bool = False) -> Any:
    """``np.unique`` of int64 ``values`` by a sort (numpy 2's hashing np.unique is several times slower on
    millions): the distinct values, and each one's count and each value's index into them where asked."""
    order = np.argsort(values, kind="stable") if inverse else None
    ordered = values[order] if order is not None else np.sort(values)
    new = np.r_[True, ordered[1:] != ordered[:-1]] if len(ordered) else np.zeros(0, bool)
    out = [ordered[new]]
    if counts:
        out.append(np.diff(np.r_[np.flatnonzero(new), len(ordered)]))
    if inverse:
        at = np.empty(len(values), np.int64)
        at[order] = np.cumsum(new) - 1
        out.append(at)
    return tuple(out) if len(out) > 1 else out[0]


def expand(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [first, last) (empty where last <= first): each member's range and position."""
    size = np.maximum(last - first, 0)
    which = np.repeat(np.arange(len(first)), size)
    offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    return which, first[which] + offset


def pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, 100.0 * part / np.maximum(whole, 1), np.nan)


def step_windows(spans: TraceSpans, window: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """``(ipu, start, end, step)`` sorted by ipu then start: each rank's profiler steps (``step`` its N, a step's
    end cut to the next one's start), or one window, its profiled time (``window``), for a rank without any
    (``step`` -1)."""
    steps = spans.take(spans.kind == STEP)
    number = np.array([int(m.group(1)) if (m := _STEP_NAME.match(str(n))) else -1 for n in steps.names.tolist()]
                      or [-1], np.int64)[steps.name]
    lo, hi = (np.asarray(w, np.int64) for w in window)
    alone = np.setdiff1d(np.arange(len(lo)), steps.ipu)
    ipu = np.concatenate([steps.ipu, alone])
    start, end = np.concatenate([steps.start, lo[alone]]), np.concatenate([steps.end, hi[alone]])
    step = np.concatenate([number, np.full(len(alone), -1, np.int64)])
    order = np.lexsort((start, ipu))
    ipu, start, end, step = ipu[order], start[order], end[order], step[order]
    following = np.r_[ipu[1:] == ipu[:-1], False]
    end = np.where(following, np.minimum(end, np.r_[start[1:], 0]), end)
    return ipu, start, np.maximum(end, start), step


def step_starts(events: Any, ranks: np.ndarray) -> dict[int, np.ndarray]:
    """Each IPU's ``ProfilerStep#N`` starts on the traces' clock, from the ranks' CPU timelines (``events``:
    ``host.system.Events``, handed in; process ``rank-R`` is the IPU of rank R), for ``last_step_starts``."""
    family = np.array([events.families[f] == "ProfilerStep" for f in events.family_of.tolist()] or [False])
    step = family[events.name] if len(events) else np.zeros(0, bool)
    process = events.process
    ipu_of = {int(rank): ipu for ipu, rank in enumerate(np.asarray(ranks).tolist())}
    steps = {}
    for code, name in enumerate(events.processes):  # one a rank
        rank = name.removeprefix("rank-")
        if rank.isdigit() and int(rank) in ipu_of:
            steps[ipu_of[int(rank)]] = events.start[step & (process == code)]
    return steps


def last_step_starts(steps: dict[int, np.ndarray], num_ranks: int) -> np.ndarray | None:
    """Each IPU's last ``ProfilerStep`` start, in the kernels' time (ns from the first rank's first step:
    the import's origin when every rank has steps), for ``hta_selection``. ``steps[ipu]``: the starts
    of that rank's ``ProfilerStep#N`` spans on the traces' clock. None, where HTA keeps every kernel
    (fewer than two steps) or where a rank has none (the import's origin is then not its first step)."""
    starts = [np.asarray(steps.get(i, ()), np.int64) for i in range(num_ranks)]
    if not num_ranks or any(len(s) == 0 for s in starts) or max(len(s) for s in starts) < 2:
        return None
    origin = min(int(s.min()) for s in starts)
    return np.array([int(s.max()) - origin for s in starts], np.int64)


def idle_gaps(k: Kernels) -> tuple[np.ndarray, ...]:
    """Each rank's GPU idle gaps, ``(ipu, start, end, launch_dry)``: the time between the union of its kernels'
    intervals (every stream), from minus to plus infinity, and whether the kernel that ends the gap was
    launched after it began (its runtime call started after the GPU went idle: the queue had run dry). A gap
    no kernel ends, or whose kernel has no launch in the trace, is not.

    A piece of a rank at a time (``Kernels.pieces``, cut where its GPU idles): a piece's last gap (from its last
    end on) and the next piece's first (up to its first start) are one gap of the rank."""
    parts = [_gaps(p) for p in k.pieces(fields=("launch_start",))]
    g_ipu, g0, g1, nxt = (np.concatenate(c) for c in zip(*parts)) if len(parts) > 1 else parts[0]
    if len(parts) > 1:  # in rank then time order, the pieces' in turn
        kept = (g0 > -_BIG) | (g1 < _BIG)  # a piece's ranks without kernels are in every piece: added below
        g_ipu, g0, g1, nxt = g_ipu[kept], g0[kept], g1[kept], nxt[kept]
        joint = np.flatnonzero((g1[:-1] == _BIG) & (g0[1:] == -_BIG) & (g_ipu[:-1] == g_ipu[1:]))
        g1[joint], nxt[joint] = g1[joint + 1], nxt[joint + 1]
        g_ipu, g0, g1, nxt = (np.delete(c, joint + 1) for c in (g_ipu, g0, g1, nxt))
        empty = np.setdiff1d(np.arange(k.num_ranks), g_ipu)
        g_ipu, g0 = np.r_[g_ipu, empty], np.r_[g0, np.full(len(empty), -_BIG)]
        g1, nxt = np.r_[g1, np.full(len(empty), _BIG)], np.r_[nxt, np.full(len(empty), _BIG)]
    order = np.lexsort((g0, g_ipu))
    return g_ipu[order], g0[order], g1[order], ((nxt < _BIG) & (nxt > g0))[order]


def _gaps(k: Kernels) -> tuple[np.ndarray, ...]:
    """``idle_gaps`` of kernels at once, each gap's next kernel's launch (``_BIG`` where none) for its flag."""
    n = len(k)
    ipu = np.concatenate([k.ipu, k.ipu])
    times = np.concatenate([k.start, k.end])
    delta = np.r_[np.ones(n, np.int64), -np.ones(n, np.int64)]
    launch = np.where(k.launch_start >= 0, k.launch_start, _BIG)
    order = np.lexsort((np.r_[launch, np.zeros(n, np.int64)], -delta, times, ipu))  # starts first at a tie
    ipu, times, delta = ipu[order], times[order], delta[order]
    kernel_launch = np.r_[launch, launch][order]
    running = np.cumsum(delta)
    last = np.r_[ipu[1:] != ipu[:-1], True] if n else np.zeros(0, bool)  # (no kernel: every rank one gap)
    first = np.r_[True, ipu[1:] != ipu[:-1]] if n else np.zeros(0, bool)
    ends = np.flatnonzero((running == 0) & ~last)  # an end after which the GPU idles until the next start
    tails = np.flatnonzero(last)
    heads = np.flatnonzero(first)
    empty = np.setdiff1d(np.arange(k.num_ranks), ipu)
    g_ipu = np.concatenate([ipu[ends], ipu[heads], ipu[tails], empty])
    g0 = np.concatenate([times[ends], np.full(len(heads), -_BIG), times[tails], np.full(len(empty), -_BIG)])
    g1 = np.concatenate([times[ends + 1], times[heads], np.full(len(tails) + len(empty), _BIG)])
    nxt = np.concatenate([kernel_launch[ends + 1], kernel_launch[heads], np.full(len(tails) + len(empty), _BIG)])
    order = np.lexsort((g0, g_ipu))
    return g_ipu[order], g0[order], g1[order], nxt[order]


def _over_steps(steps: tuple[np.ndarray, ...], ipu: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple:
    """Intervals cut to each step of their rank they overlap: ``(step row, start, end, interval row)``."""
    s_ipu, s_start, s_end, _ = steps
    first = before((s_ipu, s_end), (ipu, start), inclusive=True)  # the steps ending at or before the start
    last = before((s_ipu, s_start), (ipu, end))  # ... and starting before the end
    which, step = expand(first, last)
    return step, np.maximum(start[which], s_start[step]), np.minimum(end[which], s_end[step]), which


def step_bounds(k: Kernels, spans: TraceSpans, window: tuple[np.ndarray, np.ndarray],
                bound_pct: float = BOUND_PCT) -> Table:
    """Per rank and step (``step_windows``), ``BOUND_COLUMNS``: the step's time on the CPU's clock, the GPU's
    busy time in it, and its idle time by cause: ``launch_wait`` (gaps whose next kernel's launch started
    after the GPU went idle, ``idle_gaps``), ``input_wait`` (idle while a DataLoader fetch ran on the CPU:
    before the launch wait, which it explains), ``other_idle`` (the rest: the next kernel was queued, so the
    GPU waited on something else; or its launch is not in the trace, or none followed). ``kernels``: those
    starting in the step, with their median time and their launching calls' (the CPU's cost of a launch).
    ``verdict``: the largest wait (``input-bound``, ``launch-bound``, ``other-wait``; that order on a tie) when
    it takes at least ``bound_pct`` of the step, else ``gpu-bound``."""
    steps = step_windows(spans, window)
    s_ipu, s_start, s_end, s_step = steps
    size = len(s_ipu)
    g_ipu, g0, g1, dry = idle_gaps(k)
    fetch = spans.take(spans.kind == INPUT)
    ipu = np.concatenate([g_ipu, fetch.ipu])
    a, b = np.concatenate([g0, fetch.start]), np.concatenate([g1, fetch.end])
    label = np.concatenate([np.where(dry, 0, 1), np.full(len(fetch), 2, np.int64)])
    step, lo, hi, which = _over_steps(steps, ipu, a, b)
    cov = coverage(step, lo, hi, label[which], size, 3)
    span = s_end - s_start
    idle = cov[:, [1, 2, 3, 5, 6, 7]].sum(axis=1)  # a launch or other gap (the two never overlap)
    input_wait = cov[:, [5, 6, 7]].sum(axis=1)
    launch_wait, other = cov[:, 1], cov[:, 2]
    def steps_of(launched: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:  # the step each kernel starts in, its time
        for p in k.pieces(fields=("launch_start", "launch_end") if launched else ()):
            at = before((s_ipu, s_start), (p.ipu, p.start), inclusive=True) - 1
            inside = (at >= 0) & (p.ipu == s_ipu[np.maximum(at, 0)]) & (p.start < s_end[np.maximum(at, 0)])
            inside &= (p.launch_start >= 0) if launched else True
            yield at[inside], ((p.launch_end - p.launch_start) if launched else (p.end - p.start))[inside]
    # (a long rank a piece at a time, its medians selected in passes over its pieces)
    launch_median = key_medians(steps_of(True), size, len(k), again=lambda: steps_of(True))["median"]
    kernel = key_medians(steps_of(False), size, len(k), again=lambda: steps_of(False))
    count, kernel_median = kernel["kernels"], kernel["median"]
    waits = np.stack([input_wait, launch_wait, other], axis=1) if size else np.zeros((0, 3), np.int64)
    largest = np.argmax(waits, axis=1) if size else np.zeros(0, np.int64)
    binds = waits[np.arange(size), largest] >= bound_pct / 100.0 * span if size else np.zeros(0, bool)
    verdict = np.array(VERDICTS, dtype=object)[np.where(binds, largest + 1, 0)]
    return Table({"rank": k.ranks[s_ipu], "step": s_step, "start_ns": s_start, "step_ns": span,
                  "gpu_busy_ns": span - idle, "gpu_busy_pct": pct(span - idle, span), "launch_wait_ns": launch_wait,
                  "launch_wait_pct": pct(launch_wait, span), "input_wait_ns": input_wait,
                  "input_wait_pct": pct(input_wait, span), "other_idle_ns": other, "other_idle_pct": pct(other, span),
                  "kernels": count, "kernel_median_ns": kernel_median, "launch_median_ns": launch_median,
                  "verdict": verdict})


def step_summary(t: Table) -> Table:
    """Each rank's steps of ``step_bounds`` (``t``, ``BOUND_COLUMNS``) in a row, ``SUMMARY_COLUMNS``: how many, how
    many each verdict bound in words ("970 gpu-bound, 8 launch-bound": the most first, ties in ``VERDICTS``'
    order), the median step and the medians of its GPU busy share and waits (of the steps where they are
    defined), and the slowest step (the first of equals), its time and verdict. A long run profiles thousands of
    steps a rank: this is what a page or a report can show of them before the slowest."""
    rank = np.asarray(t["rank"], np.int64)
    ranks, group = distinct(rank, inverse=True)
    size = len(ranks)
    words, code = np.unique(np.asarray(t["verdict"]).astype(str), return_inverse=True)
    order = np.array([VERDICTS.index(w) if w in VERDICTS else len(VERDICTS) for w in words.tolist()], np.int64)
    tally = np.zeros((size, len(words)), np.int64)
    np.add.at(tally, (group, code), 1)
    listed = np.lexsort((np.broadcast_to(order, tally.shape), -tally), axis=1)  # per rank: the most first
    verdicts = np.array([", ".join(f"{tally[r, j]:,} {words[j]}" for j in listed[r] if tally[r, j])
                         for r in range(size)], dtype=object)  # a few words a rank, not a row a step

    def medians(column: str) -> np.ndarray:
        values = np.asarray(t[column], np.float64)
        kept = ~np.isnan(values)
        return group_medians(group[kept], values[kept], size)

    step_ns = np.asarray(t["step_ns"], np.int64)
    by_time = np.lexsort((np.arange(len(rank)), -step_ns, group))
    slowest = by_time[np.r_[0, np.cumsum(np.bincount(group, minlength=size))[:-1]]] if size else by_time
    return Table({"rank": ranks, "steps": np.bincount(group, minlength=size), "verdicts": verdicts,
                  "median_step_ns": medians("step_ns"), "gpu_busy_pct": medians("gpu_busy_pct"),
                  "launch_wait_pct": medians("launch_wait_pct"), "input_wait_pct": medians("input_wait_pct"),
                  "slowest_step": np.asarray(t["step"], np.int64)[slowest], "slowest_ns": step_ns[slowest],
                  "slowest_verdict": np.asarray(t["verdict"], dtype=object)[slowest]})


def worth_a_look(k: Kernels, window: tuple[np.ndarray, np.ndarray], long_kernels: int = LONG_KERNELS,
                 short_kernels: int = SHORT_KERNELS, many: int = MANY_KERNELS, short_ns: int = SHORT_NS) -> Table:
    """Each rank's kernels worth a look, by name, of those starting in its profiled window (``WORTH_COLUMNS``):
    the ``long_kernels`` names with the most GPU time (``long``), and the ``short_kernels`` most launched of
    those run at least ``many`` times whose median kernel is shorter than ``short_ns`` or than the median of
    their launching runtime calls (``short and many``: launch overhead, a chance to fuse them or capture a CUDA
    graph). ``window_pct``: their GPU time's share of the window; ``op`` and ``module``: the operator and the
    module most of them were launched from ("" where the trace says none); ``why``: the reason in a sentence."""
    lo, hi = (np.asarray(w, np.int64) for w in window)
    names = max(len(k.names), 1)
    size = k.num_ranks * names
    pairs: dict[str, list] = {"op": [], "module": []}  # each piece's distinct (key, word) pairs and their counts
    words = {label: k.labels[label] for label in ("op", "module") if label in k.labels}

    def kernels_of(launched: bool, labelled: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each piece's kernels' keys and times (their launching calls' where ``launched``), their labels'
        distinct (key, word) pairs counted into ``pairs`` where ``labelled``."""
        for p in k.pieces(fields=("name", "launch_start", "launch_end") if launched else ("name", *words)):
            inside = p.take((p.start >= lo[p.ipu]) & (p.start < hi[p.ipu])) if len(p) else p
            key = inside.ipu * names + inside.name
            for label in words if labelled else ():
                pairs[label].append(distinct(_labelled(inside, label, key, words[label]), counts=True))
            rows = inside.launch_start >= 0 if launched else slice(None)
            yield key[rows], ((inside.launch_end - inside.launch_start) if launched else
                              (inside.end - inside.start))[rows]
    # (a long rank a piece at a time, its medians selected in passes over its pieces)
    launch = key_medians(kernels_of(True), size, len(k), again=lambda: kernels_of(True))["median"]
    kernel = key_medians(kernels_of(False, labelled=True), size, len(k), again=lambda: kernels_of(False))
    count, total, median = kernel["kernels"], kernel["sum"], kernel["median"]
    rows = np.flatnonzero(count)
    rank_of = rows // names
    by_time = rows[np.lexsort((rows, -total[rows], rank_of))]
    place = np.empty(size, np.int64)
    place[by_time] = np.arange(len(by_time)) - np.searchsorted(by_time // names, by_time // names)
    with np.errstate(invalid="ignore"):
        short = (count >= many) & ((median < short_ns) | (median < launch))
    candidates = rows[short[rows]]
    by_count = candidates[np.lexsort((candidates, -count[candidates], candidates // names))]
    short_place = np.full(size, _BIG, np.int64)
    short_place[by_count] = np.arange(len(by_count)) - np.searchsorted(by_count // names, by_count // names)
    is_long, is_short = place[rows] < long_kernels, short_place[rows] < short_kernels
    rows = rows[is_long | is_short]
    rows = rows[np.lexsort((np.where(place[rows] < long_kernels, place[rows], long_kernels + short_place[rows]),
                            rows // names))]  # each rank's long names by time, then its short ones by count
    is_long, is_short = place[rows] < long_kernels, short_place[rows] < short_kernels
    share = pct(total[rows], (hi - lo)[rows // names])
    reason = np.where(is_long & is_short, "long; short and many", np.where(is_long, "long", "short and many"))
    why = [_why(*row) for row in zip(is_long.tolist(), is_short.tolist(), count[rows].tolist(),
                                     total[rows].tolist(), share.tolist(), median[rows].tolist(),
                                     launch[rows].tolist())]
    launched_from = {label: _most(words.get(label), _counted(pairs[label]) if label in words else None, size)[rows]
                     for label in ("op", "module")}
    return Table({"rank": k.ranks[rows // names], "name": k.names[rows % names].astype(object),
                  "reason": reason.astype(object), "kernels": count[rows], "total_ns": total[rows],
                  "mean_ns": total[rows] / np.maximum(count[rows], 1), "median_ns": median[rows],
                  "launch_median_ns": launch[rows], "window_pct": share, **launched_from,
                  "why": np.array(why, dtype=object)})


def _labelled(k: Kernels, label: str, key: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``_most``'s (key, word of ``label``) pairs, ``key * len(words) + code``, of the kernels that carry a word."""
    codes = getattr(k, label)
    said = np.flatnonzero(words[codes] != "")
    return key[said] * len(words) + codes[said]


def _counted(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct int64 values and their counts, from each piece's (``distinct(..., counts=True)``)."""
    values, at = distinct(np.concatenate([v for v, _ in pairs] or [np.zeros(0, np.int64)]), inverse=True)
    counts = np.concatenate([c for _, c in pairs] or [np.zeros(0, np.int64)])
    return values, np.bincount(at, weights=counts, minlength=len(values)).astype(np.int64)


def _most(words: np.ndarray | None, pairs: tuple[np.ndarray, np.ndarray] | None, size: int) -> np.ndarray:
    """Per key, the word of a label (``op``, ``module``: ``words``) most of its kernels carry, of those that carry one
    (ties: the first word), from their distinct (key, word) pairs and counts (``_labelled``, ``_counted``); ""
    where none does (a trace without them, or a profile imported before them)."""
    out = np.full(size, "", dtype=object)
    if words is None or pairs is None or not len(pairs[0]):
        return out
    width = len(words)
    pairs, count = pairs
    order = np.lexsort((pairs, -count, pairs // width))
    first = order[np.r_[True, pairs[order][1:] // width != pairs[order][:-1] // width]] if len(order) else order
    out[pairs[first] // width] = words[pairs[first] % width]
    return out


def _why(long: bool, short: bool, count: int, total: int, share: float, median: float, launch: float) -> str:
    """The sentence saying why a kernel name is listed (``worth_a_look``; one per listed row)."""
    parts = []
    if long:
        parts.append(f"{share:.1f}% of the profiled time on the GPU ({total / 1e6:,.3f} ms over {count:,} kernels)")
    if short:
        cost = (f", each launch {launch / 1e3:,.1f} us on the CPU" if launch == launch else "")
        parts.append(f"{count:,} launches of {median / 1e3:,.1f} us each on the GPU (median){cost}: launch "
                     f"overhead, worth fusing or a CUDA graph")
    return "; ".join(parts)
