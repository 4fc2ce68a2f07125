"""The phases a GPU trace's own annotations name (``phases``, ``phase_overlaps``): each annotation name's kernels
(launched while its CPU span was open, or starting inside its span on the GPU's track on their stream), their GPU
time, and the time they ran beside the kernels of other phases, so two micro-batches run at once on two streams are
measured as two phases overlapping, not one. Beyond Holistic Trace Analysis 0.5's figures, with ``bound``'s
(docs/real-traces.md, "Beyond HTA").

The spans are ``bound.TraceSpans``. Every figure is columnar, a piece of a rank's kernels at a time
(``phase_times``): sorts, searches and running counts over whole arrays, never a loop over kernels or spans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popvision_py.analysis.common.tables import Table, sum_by
from popvision_py.analysis.imported.bound import CODE, PHASE, TraceSpans, before, distinct, expand, pct
from popvision_py.analysis.imported.gpu import Kernels

PHASE_COLUMNS = ["rank", "phase", "spans", "kernels", "gpu_ns", "overlap_ns", "overlap_pct", "overlapped_with",
                 "with_ns"]
PAIR_COLUMNS = ["rank", "phase", "other", "overlap_ns"]


def memberships(k: Kernels, spans: TraceSpans) -> tuple[np.ndarray, ...]:
    """``(kernel, phase, span start, span end)`` for each kernel of each phase span (``spans``' ``PHASE``): a kernel
    whose runtime call was launched while a CPU span was open (launch start in [start, end)), or that starts
    inside a span of the GPU's track, on its rank and stream; ``phase`` is the span's name code."""
    phase = spans.kind == PHASE
    cpu, gpu = spans.take(phase & (spans.stream < 0)), spans.take(phase & (spans.stream >= 0))
    launched = np.flatnonzero(k.launch_start >= 0)
    by_launch = launched[np.lexsort((k.launch_start[launched], k.ipu[launched]))]
    keys = (k.ipu[by_launch], k.launch_start[by_launch])
    which, at = expand(before(keys, (cpu.ipu, cpu.start)), before(keys, (cpu.ipu, cpu.end)))
    by_start = np.lexsort((k.start, k.stream, k.ipu))
    keys = (k.ipu[by_start], k.stream[by_start], k.start[by_start])
    on, at_gpu = expand(before(keys, (gpu.ipu, gpu.stream, gpu.start)), before(keys, (gpu.ipu, gpu.stream, gpu.end)))
    return (np.concatenate([by_launch[at], by_start[at_gpu]]), np.concatenate([cpu.name[which], gpu.name[on]]),
            np.concatenate([cpu.start[which], gpu.start[on]]), np.concatenate([cpu.end[which], gpu.end[on]]))


@dataclass(frozen=True)
class PhaseTimes:
    """Each (rank, phase) group's figures (``group = ipu * phases + phase``, ``phase`` a code into ``names``), and
    the time each pair of phases overlapped (``pair = (ipu * phases + phase) * phases + other``, ``pair_ns``)."""

    phases: int
    names: np.ndarray  # each phase code's name
    kernels: np.ndarray
    gpu_ns: np.ndarray
    overlap_ns: np.ndarray
    spans: np.ndarray
    pair: np.ndarray
    pair_ns: np.ndarray


def phase_times(k: Kernels, spans: TraceSpans, rows: int | None = None) -> PhaseTimes:
    """``kernel_phase_times`` of pieces of about ``rows`` kernels, summed: the pieces are cut where no kernel of the
    rank runs (``idle_cuts``), so that no segment of a rank's time holds kernels of two pieces and each figure is a
    sum over the pieces (the spans counted once). What the figure holds is a piece's arrays, not a rank's: a long
    rank's (1.6 M kernels, a 10 GB import in 4 ranks) took 190 MiB at once. The phases are numbered among
    themselves (``phase_spans``)."""
    spans = phase_spans(spans)
    parts = [kernel_phase_times(piece, spans) for piece in k.pieces(rows, fields=("launch_start", "stream"))]
    if len(parts) == 1:
        return parts[0]
    pair, at = np.unique(np.concatenate([p.pair for p in parts]), return_inverse=True)
    first = parts[0]
    return PhaseTimes(phases=first.phases, names=first.names, kernels=sum(p.kernels for p in parts),
                      gpu_ns=sum(p.gpu_ns for p in parts), overlap_ns=sum(p.overlap_ns for p in parts),
                      spans=first.spans, pair=pair,
                      pair_ns=sum_by(at.ravel(), np.concatenate([p.pair_ns for p in parts]), len(pair)))


def phase_spans(spans: TraceSpans) -> TraceSpans:
    """The ``PHASE`` spans alone, their names numbered among themselves in the order of their codes: the figures'
    arrays are then a rank's phases wide, not its every span's name (a long run's steps are a name each: a 10 GB
    import in 4 ranks has 17,403 names for 3 phases, and each piece's sums were 4 x 17,403 wide)."""
    phase = spans.take(np.flatnonzero(spans.kind == PHASE))
    used, code = np.unique(phase.name, return_inverse=True)
    return TraceSpans(phase.ipu, phase.start, phase.end, phase.kind, phase.stream, code.ravel().astype(CODE),
                      np.asarray(spans.names, dtype=object)[used])


def kernel_phase_times(k: Kernels, spans: TraceSpans) -> PhaseTimes:
    """The phases' GPU time and overlaps. A phase's kernels are its ``memberships`` (a kernel once a phase); its
    ``gpu_ns`` the time one of them runs; its ``overlap_ns`` the part of that time a kernel of another phase,
    not its own, runs too (on another stream: a stream runs one kernel at a time). The pairs name that other
    phase by its kernels' innermost phase (the span that opened last around them), so a phase nested in another
    is measured against what ran beside it, not against the phase that holds it.

    Columnar: the kernels' starts and ends cut each rank's time into segments; a kernel covers a run of them,
    so each (segment, phase) pair's count of running kernels of the phase, against the count of running
    kernels of any phase, says whether the phase ran alone there."""
    kernel, name, s, e = memberships(k, spans)
    n = max(len(spans.names), 1)
    size = k.num_ranks * n
    leaf = np.full(len(k), -1, np.int64)  # each kernel's innermost phase
    order = np.lexsort((e, -s, kernel))
    first = np.r_[True, kernel[order][1:] != kernel[order][:-1]] if len(order) else np.zeros(0, bool)
    leaf[kernel[order][first]] = name[order][first]
    member = distinct(kernel * n + name)  # each kernel once a phase, sorted
    del kernel, name, s, e, order, first  # (the arrays of a rank's kernels are let go as soon as they are used)
    kernel, name = member // n, member % n
    phased = distinct(kernel)
    ipu = np.concatenate([k.ipu[phased], k.ipu[phased]])
    times = np.concatenate([k.start[phased], k.end[phased]])
    order = np.lexsort((times, ipu))
    ipu, times = ipu[order], times[order]
    fresh = np.r_[True, (ipu[1:] != ipu[:-1]) | (times[1:] != times[:-1])] if len(ipu) else np.zeros(0, bool)
    b_ipu, b_time = ipu[fresh], times[fresh]  # each rank's segment bounds
    del ipu, times, order, fresh
    length = np.r_[np.where(b_ipu[1:] == b_ipu[:-1], np.diff(b_time), 0), 0] if len(b_ipu) else np.zeros(0, np.int64)
    first_seg = np.zeros(len(k), np.int64)
    end_seg = np.zeros(len(k), np.int64)
    first_seg[phased] = before((b_ipu, b_time), (k.ipu[phased], k.start[phased]))
    end_seg[phased] = before((b_ipu, b_time), (k.ipu[phased], k.end[phased]))
    running = np.cumsum(np.bincount(first_seg[phased], minlength=len(b_ipu) + 1)
                        - np.bincount(end_seg[phased], minlength=len(b_ipu) + 1))  # phases' kernels running
    which, seg = expand(first_seg[kernel], end_seg[kernel])
    pairs, count = distinct(seg * n + name[which], counts=True)
    del which, seg
    p_seg, p_phase = pairs // n, pairs % n
    alone = running[p_seg] <= count  # no other phase's kernel runs in the segment
    group = b_ipu[p_seg] * n + p_phase
    kind = spans.kind == PHASE
    cpu, gpu = kind & (spans.stream < 0), kind & (spans.stream >= 0)
    spans_cpu = np.bincount(spans.ipu[cpu] * n + spans.name[cpu], minlength=size)
    spans_gpu = np.bincount(spans.ipu[gpu] * n + spans.name[gpu], minlength=size)
    # the pairs: in each segment a phase shares, the innermost phases of the running kernels not its own
    shared = np.flatnonzero(~alone)
    runs, run_seg = expand(first_seg[phased], end_seg[phased])
    order = np.argsort(run_seg, kind="stable")
    run_kernel, run_seg = phased[runs][order], run_seg[order]
    q, at = expand(np.searchsorted(run_seg, p_seg[shared]), np.searchsorted(run_seg, p_seg[shared], side="right"))
    other, phase, at_seg = run_kernel[at], p_phase[shared][q], p_seg[shared][q]
    mine = np.searchsorted(member, other * n + phase)
    own = (mine < len(member)) & (member[np.minimum(mine, max(len(member) - 1, 0))] == other * n + phase) \
        if len(member) else np.zeros(len(other), bool)
    triple = distinct((at_seg[~own] * n + phase[~own]) * n + leaf[other[~own]])
    t_seg, t_phase, t_other = triple // n // n, triple // n % n, triple % n
    pair, pair_at = distinct((b_ipu[t_seg] * n + t_phase) * n + t_other, inverse=True)
    return PhaseTimes(phases=n, names=spans.names, kernels=np.bincount(k.ipu[kernel] * n + name, minlength=size)[:size],
                      gpu_ns=sum_by(group, length[p_seg], size), overlap_ns=sum_by(group, length[p_seg] * ~alone, size),
                      spans=np.where(spans_cpu > 0, spans_cpu, spans_gpu)[:size], pair=pair,
                      pair_ns=sum_by(pair_at, length[t_seg], len(pair)))


def phases(k: Kernels, spans: TraceSpans, times: PhaseTimes | None = None, n: int | None = None) -> Table:
    """Each rank's phases that ran a kernel (``PHASE_COLUMNS``), the most GPU time first, ``n`` a rank (all if
    None): its spans, kernels, GPU time, the part of it another phase's kernels ran beside (``overlap_ns``,
    ``overlap_pct`` of its GPU time), and the phase it overlapped most (``overlapped_with``, ``with_ns``;
    "" where none). ``phase_times`` says how."""
    t = times or phase_times(k, spans)
    rows = np.flatnonzero(t.kernels)
    rows = rows[np.lexsort((rows, -t.gpu_ns[rows], rows // t.phases))]
    if n is not None:
        rank = rows // t.phases
        rows = rows[np.arange(len(rows)) - np.searchsorted(rank, rank) < n]
    best = np.lexsort((t.pair, -t.pair_ns, t.pair // t.phases))  # per (rank, phase), the largest pair first
    top = best[np.r_[True, t.pair[best][1:] // t.phases != t.pair[best][:-1] // t.phases]] if len(best) else best
    found = np.searchsorted(t.pair[top] // t.phases, rows)
    hit = (found < len(top)) & (t.pair[top][np.minimum(found, max(len(top) - 1, 0))] // t.phases == rows) \
        if len(top) else np.zeros(len(rows), bool)
    pick = top[np.minimum(found, max(len(top) - 1, 0))] if len(top) else np.zeros(len(rows), np.int64)
    names = np.asarray(t.names, dtype=object)
    partner, partner_ns = ((names[t.pair[pick] % t.phases], t.pair_ns[pick]) if len(top) else
                           (np.full(len(rows), "", dtype=object), np.zeros(len(rows), np.int64)))
    return Table({"rank": k.ranks[rows // t.phases], "phase": names[rows % t.phases] if len(rows) else names[:0],
                  "spans": t.spans[rows], "kernels": t.kernels[rows], "gpu_ns": t.gpu_ns[rows],
                  "overlap_ns": t.overlap_ns[rows], "overlap_pct": pct(t.overlap_ns[rows], t.gpu_ns[rows]),
                  "overlapped_with": np.where(hit, partner, "").astype(object),
                  "with_ns": np.where(hit, partner_ns, 0)})


def phase_overlaps(k: Kernels, spans: TraceSpans, times: PhaseTimes | None = None) -> Table:
    """Each pair of phases that ran at once (``PAIR_COLUMNS``): the time ``phase``'s kernels ran beside kernels of
    ``other`` (their innermost phase) not its own; per rank, the largest first (``phase_times``)."""
    t = times or phase_times(k, spans)
    order = np.lexsort((t.pair, -t.pair_ns, t.pair // t.phases // t.phases))
    pair = t.pair[order]
    names = np.asarray(t.names, dtype=object)
    return Table({"rank": k.ranks[pair // t.phases // t.phases], "phase": names[pair // t.phases % t.phases],
                  "other": names[pair % t.phases], "overlap_ns": t.pair_ns[order]})
