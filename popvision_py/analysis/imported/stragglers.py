"""Stragglers across the ranks of a data-parallel GPU run: the ranks whose own compute before a collective is
slowest, so that every other rank waits for them in it.

In a data-parallel step every rank's backward ends at the same all-reduces: a collective ends on every rank once
the last has reached it, so each rank's step time is the slowest rank's and cannot name it. What differs is when
each rank is *ready* for a collective: the collective's kernel may start on a rank's GPU once the rank has
launched it and the compute kernels launched before it have ended (DistributedDataParallel's stream waits on
them); a rank ready early spends the difference in the kernel, waiting for the last.

- ``arrivals`` (one rank's kernels at a time, ``gpu_ranks``): per rank, profiler step and collective (the
  step's communication kernels in order, ``collective`` 0, 1, ...): when the rank was ready for it (the
  latest of its launch and the ends of the compute kernels launched before it), when its kernel started
  (later where the collective before it still ran) and ended, its compute before it (its compute kernels' GPU
  time between the step's start and its readiness, each stream's kernels summed), and the end of the step's
  last kernel on its GPU. A kernel belongs to the step its launch (else its start) falls in; a step starts at
  its ``ProfilerStep``'s start.
- ``stragglers`` (the ranks' arrivals together): per step, the ranks ready for one of its collectives more than
  ``LATE_PCT`` % of the median rank's time from the step's start after the median rank, the latest first
  (``TOP_LATE`` a step), each at the collective where it is latest. The step is re-timed without them: each
  collective, in order, ends its transfer (the quickest rank's time in its kernel: the last to arrive waits
  for no one) after the latest of the ranks' readiness and the collective before it; the named ranks ready at
  the median instead. ``saved_ns`` is how much sooner the step's last collective then ends, and the step with
  it (``step_without_ns`` = ``step_ns - saved_ns``, ``step_ns`` its ranks' longest, step start to last
  kernel's end). ``median_wait_ns``: the median rank's time from its readiness to that collective's end past the
  transfer: waiting for the others, in the kernel or queued behind the collective before it.

Columnar throughout: sorts and running sums over the kernels, group medians over the ranks' rows; the
re-timing steps through a step's collectives (a handful), every step at once.
"""

from __future__ import annotations

import numpy as np

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.imported.bound import STEP, TraceSpans, before, step_windows
from popvision_py.analysis.imported.collectives import collective_of
from popvision_py.analysis.imported.gpu import COMMUNICATION, COMPUTE, Kernels
from popvision_py.analysis.imported.stats import group_medians, joined

LATE_PCT = 5.0  # a rank is late when ready this share of the median's time from the step's start after it
TOP_LATE = 5  # late ranks named a step, the latest first

ARRIVAL_COLUMNS = ["rank", "step", "collective", "name", "step_start_ns", "ready_ns", "arrival_ns", "end_ns",
                   "compute_ns", "step_end_ns"]
STRAGGLER_COLUMNS = ["step", "rank", "collective", "name", "ranks", "ready_ns", "median_ready_ns", "late_ns",
                     "late_pct", "compute_ns", "median_compute_ns", "compute_over_pct", "median_wait_ns", "step_ns",
                     "saved_ns", "step_without_ns"]


def compute_before(k: Kernels, ipu: np.ndarray, at: np.ndarray, since: np.ndarray) -> np.ndarray:
    """For each query (rank ``ipu``, from ``since`` to ``at``), the rank's compute kernels' GPU time in it: each
    kernel's part after ``since`` and before ``at``, summed (streams' kernels each counted). ``G(t)`` (the time
    before ``t``: the kernels ended by ``t`` whole, those running up to ``t``) from sorted starts and ends and
    their running sums, ``G(at) - G(since)``: the ranks before the query's cancel out."""
    comp = np.flatnonzero(k.kind == COMPUTE)
    base = int(k.start[comp].min()) if len(comp) else 0
    c_ipu, start, end = k.ipu[comp], k.start[comp] - base, k.end[comp] - base  # small numbers: the sums stay exact
    by_start, by_end = np.lexsort((start, c_ipu)), np.lexsort((end, c_ipu))
    run_start = np.r_[0, np.cumsum(start[by_start])]
    run_dur = np.r_[0, np.cumsum(end[by_end] - start[by_end])]
    run_start_ended = np.r_[0, np.cumsum(start[by_end])]

    def before_t(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64) - base
        started = before((c_ipu[by_start], start[by_start]), (ipu, t))  # kernels started before t
        ended = before((c_ipu[by_end], end[by_end]), (ipu, t), inclusive=True)  # ... and ended by t
        earlier = before((c_ipu[by_start],), (ipu,))  # the ranks before: started and ended, cancel below
        return (run_dur[ended] - run_dur[earlier] + (started - ended) * t
                - (run_start[started] - run_start_ended[ended]))

    return before_t(at) - before_t(since)


def arrivals(k: Kernels, spans: TraceSpans, window: tuple[np.ndarray, np.ndarray]) -> Table:
    """``ARRIVAL_COLUMNS``: each rank's arrival at each collective of each profiler step (``step_windows``; a
    rank without steps: its window as step -1), in ns from the profile's origin. A report hands in one rank's
    kernels at a time (``gpu_ranks``), and they are read a piece of the rank at a time (``Kernels.pieces``): the
    kernels' steps, the collectives' kernels, the readiness and the compute before each (a sum over kernels)."""
    s_ipu, s_start, _, s_step = step_windows(spans.take(spans.kind == STEP), window)
    step_end = np.full(len(s_ipu), -1, np.int64)
    found = []
    for p in k.pieces(fields=("launch_start", "kind", "name")):
        when = np.where(p.launch_start >= 0, p.launch_start, p.start)
        step_of = before((s_ipu, s_start), (p.ipu, when), inclusive=True) - 1  # the last step started by the launch
        inside = (step_of >= 0) & (s_ipu[np.maximum(step_of, 0)] == p.ipu) if len(s_ipu) else np.zeros(len(p), bool)
        np.maximum.at(step_end, step_of[inside], p.end[inside])
        comm = np.flatnonzero(inside & (p.kind == COMMUNICATION))
        found.append((step_of[comm], p.ipu[comm], p.name[comm], p.start[comm], p.end[comm], p.launch_start[comm]))
    columns = joined(found)  # the collectives' step, ipu, name, start, end and launch
    order = np.lexsort((columns[3], columns[0]))  # by step, then start: steps are sorted by ipu, so are these
    which, ipu, name, start, end, launch = _taken(order, columns)
    first = np.searchsorted(which, which, side="left")  # the row of its step's first collective
    words = np.array([collective_of(str(n)) for n in k.names.tolist()] or [""], object)
    ready = readiness(k, ipu, launch, start)
    compute = sum(compute_before(p, ipu, ready, s_start[which]) for p in k.pieces(fields=("kind",)))
    return Table({"rank": k.ranks[ipu] if len(ipu) else np.zeros(0, np.int64), "step": s_step[which],
                  "collective": np.arange(len(ipu), dtype=np.int64) - first,
                  "name": words[name] if len(ipu) else np.zeros(0, object),
                  "step_start_ns": s_start[which], "ready_ns": ready, "arrival_ns": start,
                  "end_ns": end, "compute_ns": compute, "step_end_ns": step_end[which]})


def _taken(order: np.ndarray, columns: list[np.ndarray]) -> list[np.ndarray]:
    """Each column's rows in ``order``, a column's own let go once it is taken (``columns`` emptied): beside the
    columns taken, one column twice, not every one (a 10 GB import's longest rank's collectives: 5 MiB)."""
    out = []
    while columns:
        out.append(columns.pop(0)[order])
    return out


def readiness(k: Kernels, ipu: np.ndarray, launch: np.ndarray, start: np.ndarray) -> np.ndarray:
    """When each of some kernels (their ``ipu``, ``launch`` start and ``start``) could start on its rank's GPU: the
    latest of its launch and the ends of the rank's compute kernels (``k``) launched before it (their stream's
    order, which DDP's collectives wait on); its start where it has no launch in the trace. Never after its start.
    The latest end a piece of the rank at a time (``Kernels.pieces``), the pieces' largest."""
    waited = np.full(len(ipu), -1, np.int64)
    for p in k.pieces(fields=("kind", "launch_start")):
        comp = np.flatnonzero((p.kind == COMPUTE) & (p.launch_start >= 0))
        if not len(comp):
            continue
        comp = comp[np.lexsort((p.launch_start[comp], p.ipu[comp]))]
        base = int(p.end[comp].min())
        span = int(p.end[comp].max()) - base + 1
        so_far = np.maximum.accumulate(p.end[comp] - base + p.ipu[comp] * span)  # a rank's offset keeps it its own
        at = before((p.ipu[comp], p.launch_start[comp]), (ipu, launch)) - 1  # the last launched before it
        mine = (at >= 0) & (p.ipu[comp][np.maximum(at, 0)] == ipu)
        waited = np.maximum(waited, np.where(mine, so_far[np.maximum(at, 0)] - ipu * span + base, -1))
    return np.where(launch >= 0, np.minimum(np.maximum(launch, waited), start), start)


def stragglers(a: Table, late_pct: float = LATE_PCT, top: int = TOP_LATE) -> Table:
    """``STRAGGLER_COLUMNS``: per profiler step, the ranks ready late for its collectives (``arrivals`` of every
    rank), the latest first, with the step re-timed without them (the module's docstring)."""
    step, collective = np.asarray(a["step"], np.int64), np.asarray(a["collective"], np.int64)
    rank = np.asarray(a["rank"], np.int64)
    step_start, end = np.asarray(a["step_start_ns"], np.int64), np.asarray(a["end_ns"], np.int64)
    ready = np.asarray(a["ready_ns"], np.int64) - step_start
    inside = end - np.asarray(a["arrival_ns"], np.int64)
    compute = np.asarray(a["compute_ns"], np.int64)
    steps, s_of = np.unique(step, return_inverse=True)
    width = int(collective.max()) + 1 if len(collective) else 1
    g = s_of * width + collective  # (step, collective)
    n = len(steps) * width
    median = group_medians(g, ready, n)
    median_compute = group_medians(g, compute, n)
    transfer = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(transfer, g, inside)
    median_wait = group_medians(g, end - step_start - ready - transfer[g], n)  # ready, waiting: in its kernel or queued
    late = ready - median[g]
    late_row = late > late_pct / 100 * median[g]
    # a rank is named in a step where it is late at any of its collectives
    pair = np.unique(np.stack([s_of, rank])[:, late_row], axis=1) if late_row.any() else np.zeros((2, 0), np.int64)
    named = np.zeros(len(step), bool)
    if pair.shape[1]:
        key = s_of * (int(rank.max()) + 1) + rank
        named = np.isin(key, pair[0] * (int(rank.max()) + 1) + pair[1])
    start = np.zeros(len(steps), np.int64)
    start[s_of] = step_start
    modelled = _retimed(g, start[s_of] + ready, transfer, len(steps), width)
    moved = np.where(named, start[s_of] + np.minimum(ready, np.rint(median[g]).astype(np.int64)),
                     start[s_of] + ready)
    saved = np.maximum(modelled - _retimed(g, moved, transfer, len(steps), width), 0)
    span = np.asarray(a["step_end_ns"], np.int64) - step_start
    step_ns = np.zeros(len(steps), np.int64)
    np.maximum.at(step_ns, s_of, span)
    ranks = np.zeros(len(steps), np.int64)
    np.maximum.at(ranks, s_of, np.bincount(g, minlength=n)[g])
    # each named rank once a step: at its latest collective, the latest ranks first
    pick = np.flatnonzero(named)
    pick = pick[np.lexsort((-late[pick], rank[pick], s_of[pick]))]
    pick = pick[np.r_[True, (np.diff(s_of[pick]) != 0) | (np.diff(rank[pick]) != 0)]] if len(pick) else pick
    pick = pick[np.lexsort((-late[pick], s_of[pick]))]
    pick = pick[np.arange(len(pick)) - np.searchsorted(s_of[pick], s_of[pick], side="left") < top]
    s, gp = s_of[pick], g[pick]
    with np.errstate(divide="ignore", invalid="ignore"):
        late_share = np.where(median[gp] > 0, 100 * late[pick] / median[gp], np.nan)
        over = np.where(median_compute[gp] > 0, 100 * (compute[pick] / median_compute[gp] - 1), np.nan)
    return Table({"step": steps[s], "rank": rank[pick], "collective": collective[pick],
                  "name": np.asarray(a["name"], object)[pick], "ranks": ranks[s], "ready_ns": ready[pick],
                  "median_ready_ns": median[gp], "late_ns": late[pick], "late_pct": late_share,
                  "compute_ns": compute[pick], "median_compute_ns": median_compute[gp], "compute_over_pct": over,
                  "median_wait_ns": median_wait[gp], "step_ns": step_ns[s], "saved_ns": saved[s],
                  "step_without_ns": step_ns[s] - saved[s]})


def _retimed(g: np.ndarray, ready: np.ndarray, transfer: np.ndarray, steps: int, width: int) -> np.ndarray:
    """Each step's last collective's end when each collective, in order, ends ``transfer`` after the latest of its
    ranks' ``ready`` and the collective before it (``g``: step x ``width`` + collective)."""
    latest = np.full(steps * width, np.iinfo(np.int64).min)
    np.maximum.at(latest, g, ready)
    latest, transfer = latest.reshape(steps, width), transfer.reshape(steps, width)
    ends = np.full(steps, np.iinfo(np.int64).min)
    for c in range(width):  # a step's collectives, a handful: every step at once
        held = latest[:, c] > np.iinfo(np.int64).min
        ends = np.where(held, np.maximum(latest[:, c], ends) + np.where(held, transfer[:, c], 0), ends)
    return ends
