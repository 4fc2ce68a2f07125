"""Each rank's time line, cut into what the rank was doing: the rows of the profile's trace.

A rank's time is given, moment by moment, to the first of these that holds it (``LABELS``' order):

1. ``comm_call``: a communication call the training thread is inside (``c10d::send``, ``c10d::recv_``,
   ``c10d::allreduce_``...): the thread is blocked in it, so its time is exposed communication;
2. ``pp_comm``: a pipeline schedule's communication action (``PP:2RECV_F3``, ``PP:1SEND_B0``,
   ``PP:0REDUCE_GRAD``) outside any call of (1);
3. ``pass``: a pass of a stage over a micro-batch (less the moments inside it when no operator runs
   and a transfer is in flight: the pass waiting for its input, counted under (6)): ``Forward {i}`` /
   ``Backward {i}`` (GPipe), ``PP:{stage}F{i}`` (and ``B``, ``I``, ``W``) of the multi-stage schedules,
   or the stage's ``forward_one_chunk`` / ``backward_one_chunk`` frames (1F1B recorded ``with_stack``:
   the k-th of a step is micro-batch k, as 1F1B runs each stage's micro-batches in order);
4. ``update``: the optimiser's step (``Optimizer.step#...``);
5. ``busy``: any other operator on the training thread (or kernel on the GPU): compute of no pass;
6. ``comm_flight``: communication in flight (``gloo:...`` / ``nccl:...``) while the rank does nothing
   else: it waits for the transfer, so that time is exposed too. Where a transfer overlaps (3) to
   (5), it is hidden: the transfer's whole time is its ``exchanges`` row, its exposed part its
   program step's cycles (the format's convention for a transfer that overlaps compute);
7. otherwise the rank is idle, and so is any moment of (1), (2) or (6) before the other side of a
   point-to-point transfer had called (``peer_ready``): the rank waits for its peer, the pipeline's
   bubble, not for the transfer.

On a GPU trace the time is the GPU's (``gpu_rank_rows``): a moment is compute while a compute kernel
runs (a ``pass`` or ``update`` where the GPU-side annotation of one covers it, else ``busy``), else
communication (``comm_flight``) while a communication kernel runs, else ``memory`` while a copy or a set
runs, else idle. The CPU's spans (a blocked ``c10d`` call, an ``Optimizer.step`` on the CPU's clock) only
say which pass the GPU's time belongs to where the GPU itself annotates it; they never make the GPU busy.

Everything is columnar: the boundaries of every span sorted once, each class's cover found with
``searchsorted``, and equal neighbours merged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from popvision_py.importer.parts import any_of, merge_intervals
from popvision_py.importer.kernels import KERNEL_KIND
from popvision_py.importer.read import KIND, RankTrace
from popvision_py.importer.spill_files import filled, release

LABELS = ("comm_call", "pp_comm", "pass", "update", "busy", "comm_flight", "memory", "idle")
LABEL = {name: i for i, name in enumerate(LABELS)}
PASS_KINDS = (KIND["forward"], KIND["backward"], KIND["backward_input"], KIND["backward_weight"])
# the profile's pass of each span kind (the format's passes: forward, backward, update, none)
PASS_NAME = {KIND["forward"]: "forward", KIND["backward"]: "backward", KIND["backward_input"]: "backward",
             KIND["backward_weight"]: "backward", KIND["update"]: "update"}
COLLECTIVE_WORDS = ("all_reduce", "allreduce", "reduce_scatter", "all_gather", "allgather", "broadcast",
                    "all_to_all", "alltoall", "barrier", "reduce")


@dataclass
class Rows:
    """One rank's rows: [start, end) in ns, the label, and the span (index into the rank's spans) behind it."""

    start: np.ndarray
    end: np.ndarray
    label: np.ndarray
    span: np.ndarray  # -1 for busy and idle rows


def unique_first(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, sorted, and where each first is: ``np.unique(values, return_index=True)`` by a
    stable sort (numpy 2's hashing np.unique is 20 times slower on millions of times)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.ones(len(ordered), bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return ordered[first], order[first]


def _cover(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in ``at``, the index of a span covering it (the latest to start), or -1.

    Spans of one class are sorted by start; where they nest, the outer one holds its whole time.
    """
    if len(starts) == 0:
        return np.full(len(at), -1, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    # an outer span covers what its nested spans cover: keep each span's reach (the furthest end so far)
    reach = np.maximum.accumulate(e)
    outer = np.ones(len(s), bool)
    outer[1:] = e[1:] > reach[:-1]  # a span wholly inside an earlier one adds nothing
    s, e, order = s[outer], e[outer], order[outer]
    k = np.searchsorted(s, at, side="right") - 1
    inside = (k >= 0) & (e[np.maximum(k, 0)] > at)
    return np.where(inside, order[np.maximum(k, 0)], -1)


def peer_ready(traces: list[RankTrace], folder: Path | None = None) -> list[np.ndarray]:
    """For each rank's spans, when the other side of a point-to-point transfer was ready (-1 if none).

    The k-th ``c10d::send`` from rank a to rank b pairs with the k-th ``c10d::recv_`` on b from a (both
    in time order: a pair of ranks' transfers are matched in the order they were posted). Until both
    sides have called, neither can move data: a rank waiting before then waits for its peer (the
    pipeline's bubble), not for the transfer. Ranks' clocks are taken to agree (one machine, or
    synchronised clocks: ``baseTimeNanoseconds`` is wall-clock time). The arrays lie in a spill file in
    ``folder`` where given (``spill.filled``). Each rank's pages (and its peers') are handed back once its
    sends are matched: holding every rank's at once would be the spans of the whole job (300 MiB of 5 GB of
    traces in 4,096 ranks).
    """
    ready = filled(folder, [len(t.kind) for t in traces], -1)
    by_rank = {t.rank: k for k, t in enumerate(traces)}

    def calls(t: RankTrace, word: str) -> np.ndarray:
        """Whether each span is a point-to-point call of this name (``c10d::send`` or ``c10d::recv_``)."""
        is_call = (t.kind == KIND["comm_call"]) & (t.peer >= 0)
        if not len(t.names):
            return is_call
        return is_call & (t.name == t.names.index(word)) if word in t.names else np.zeros(len(is_call), bool)

    for a, t in enumerate(traces):
        send = calls(t, "c10d::send")
        for b_rank in np.unique(t.peer[send]):
            b = by_rank.get(int(b_rank))
            if b is None:
                continue
            u = traces[b]
            sends = np.flatnonzero(send & (t.peer == b_rank))
            recvs = np.flatnonzero(calls(u, "c10d::recv_") & (u.peer == t.rank))
            sends = sends[np.argsort(t.start[sends], kind="stable")]
            recvs = recvs[np.argsort(u.start[recvs], kind="stable")]
            n = min(len(sends), len(recvs))
            both = np.maximum(t.start[sends[:n]], u.start[recvs[:n]])
            ready[a][sends[:n]] = both
            ready[b][recvs[:n]] = both
            release(u, ready[b])
        release(t, ready[a])
    return ready


def _merged_rows(at: np.ndarray, b: int, label: np.ndarray, span: np.ndarray) -> Rows:
    """Rows from the moments ``at`` (the last ending at ``b``), neighbours of one label and one span merged."""
    new = np.ones(len(at), bool)
    new[1:] = (label[1:] != label[:-1]) | (span[1:] != span[:-1])
    first = np.flatnonzero(new)
    ends = np.append(at[first[1:]], b) if len(first) else np.zeros(0, np.int64)
    return Rows(start=at[first], end=ends, label=label[first], span=span[first])


def gpu_rank_rows(trace: RankTrace, window: tuple[int, int], within: tuple[int, int] | None = None) -> Rows:
    """A GPU rank's rows over ``window`` (or the part ``within`` it), from its GPU's kernels (see the module's
    docstring): compute, communication, copies and sets, idle; a compute moment is the pass or update whose
    GPU-side annotation covers it."""
    lo, hi = window
    a, b = within or window
    kernels = trace.kernels
    kind = kernels[:, 3]
    covers = {}
    for name, codes in (("compute", [KERNEL_KIND["compute"]]), ("communication", [KERNEL_KIND["communication"]]),
                        ("memory", [KERNEL_KIND["memcpy"], KERNEL_KIND["memset"]])):
        covers[name] = merge_intervals(np.clip(kernels[any_of(kind, codes), :2], a, b))
    start, end = np.clip(trace.start, lo, hi), np.clip(trace.end, lo, hi)
    classes = {"pass": any_of(trace.kind, PASS_KINDS), "update": trace.kind == KIND["update"],
               "comm_flight": trace.kind == KIND["comm_flight"]}
    used = classes["pass"] | classes["update"] | classes["comm_flight"]
    edges = unique_first(np.clip(np.concatenate([[a, b], start[used], end[used],
                                                 *(c.ravel() for c in covers.values())]), a, b))[0]
    at = edges[:-1]
    on = {name: _cover(c[:, 0], c[:, 1], at) >= 0 for name, c in covers.items()}
    label = np.full(len(at), LABEL["idle"], np.int8)
    span = np.full(len(at), -1, np.int64)
    free = np.ones(len(at), bool)
    for name, gpu in (("pass", on["compute"]), ("update", on["compute"]), ("busy", on["compute"]),
                      ("comm_flight", on["communication"]), ("memory", on["memory"])):
        take = free & gpu
        if name in classes:
            index = np.flatnonzero(classes[name])
            hit = _cover(start[index], end[index], at) if len(index) else np.full(len(at), -1, np.int64)
            if name != "comm_flight":
                take &= hit >= 0  # a pass or update only where its annotation covers the moment
            span[take] = np.where(hit[take] >= 0, index[np.maximum(hit[take], 0)], -1)
        label[take] = LABEL[name]
        free &= ~take
    return _merged_rows(at, b, label, span)


def rank_rows(trace: RankTrace, window: tuple[int, int], ready: np.ndarray | None = None,
              within: tuple[int, int] | None = None) -> Rows:
    """The rank's rows over ``window``: contiguous, from its start to its end. ``ready`` (``peer_ready``):
    a moment of waiting before a transfer's peer was ready is idle, after it exposed communication.
    ``within``: only the rows of this part of the window (``rank_rows_by_window``). A rank with a GPU
    timeline (``kernels``) is cut by ``gpu_rank_rows``."""
    if len(getattr(trace, "kernels", ())):
        return gpu_rank_rows(trace, window, within)
    lo, hi = window
    kind = trace.kind
    classes = {
        "comm_call": kind == KIND["comm_call"],
        "pp_comm": kind == KIND["pp_comm"],
        "pass": any_of(kind, PASS_KINDS),
        "update": kind == KIND["update"],
        "comm_flight": kind == KIND["comm_flight"],
    }
    start = np.clip(trace.start, lo, hi)
    end = np.clip(trace.end, lo, hi)
    busy = np.clip(trace.busy, lo, hi) if len(trace.busy) else np.zeros((0, 2), np.int64)
    used = np.zeros(len(kind), bool)
    for mask in classes.values():
        used |= mask
    a, b = within or window
    edges = unique_first(np.clip(np.concatenate([[a, b], start[used], end[used], busy.ravel()]), a, b))[0]
    at = edges[:-1]
    label = np.full(len(at), LABEL["idle"], np.int8)
    span = np.full(len(at), -1, np.int64)
    free = np.ones(len(at), bool)
    working = _cover(busy[:, 0], busy[:, 1], at) >= 0 if len(busy) else np.zeros(len(at), bool)
    flight = np.flatnonzero(classes["comm_flight"])
    # inside a pass, a moment with no operator running while a transfer is in flight is a wait for it
    # (GPipe's Forward {i} holds the wait for its input); any other moment is the pass's own time
    waiting = (_cover(start[flight], end[flight], at) >= 0) & ~working if len(flight) else np.zeros(len(at), bool)
    # waiting for the peer of a point-to-point transfer: from the call until the peer's call
    early = np.flatnonzero(ready > trace.start) if ready is not None else np.zeros(0, np.int64)
    for_peer = _cover(start[early], np.clip(ready[early], lo, hi), at) >= 0 if len(early) else np.zeros(len(at), bool)
    # a moment in communication (1, 2, or 6 while no operator runs) before the peer was ready is idle
    in_comm = waiting.copy()
    for name in ("comm_call", "pp_comm"):
        index = np.flatnonzero(classes[name])
        if len(index):
            in_comm |= _cover(start[index], end[index], at) >= 0
    free &= ~(for_peer & in_comm)
    for name in LABELS[:-1]:
        if name == "memory":  # a GPU's copies and sets: none on a CPU trace
            continue
        if name == "busy":
            covered = working
            owner = np.full(len(at), -1, np.int64)
        else:
            index = np.flatnonzero(classes[name])
            if len(index) == 0:
                continue
            hit = _cover(start[index], end[index], at)
            covered = hit >= 0
            if name in ("pass", "update"):
                covered &= ~waiting
            owner = np.where(covered, index[np.maximum(hit, 0)], -1)
        take = free & covered
        label[take] = LABEL[name]
        span[take] = owner[take]
        free &= ~take
    return _merged_rows(at, b, label, span)


# A window of a rank's time line holds about this many of its busy rows: its rows, and the arrays that cut them
# and make them table rows, take about 1 KB a busy row.
WINDOW_BUSY_ROWS = 1 << 15


@dataclass
class _Spans:
    """Some of a rank's spans and busy rows: what ``rank_rows`` reads of a ``RankTrace``."""

    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray
    kernels: np.ndarray  # the GPU's kernels that overlap the window (parts.KERNEL_COLUMNS)


def rank_rows_by_window(trace: RankTrace, window: tuple[int, int], ready: np.ndarray | None = None,
                        busy_rows: int = WINDOW_BUSY_ROWS) -> Iterator[Rows]:
    """``rank_rows(trace, window, ready)``, a window of time at a time (each at most about ``busy_rows`` of the
    rank's busy rows long, and of its GPU's kernels, which a busy row may hold many of): the same rows, in order,
    their spans indices into the rank's spans.

    A window's rows are those of the spans that overlap it (a span that ended before it, or began after,
    covers none of its moments, and does not change which of the others covers one; a call waiting for
    its peer reaches to the peer's call), and a row that
    runs across the end of a window is one row: it is held back until the next window says where it ends.
    """
    lo, hi = window
    kernels = trace.kernels
    inside = np.concatenate([trace.busy[busy_rows::busy_rows, 0], kernels[busy_rows::busy_rows, 0]])
    cuts = [lo, *np.unique(inside[(inside > lo) & (inside < hi)]).tolist(), hi] if hi > lo else [lo, hi]
    reach = Reach(kernels)
    held: Rows | None = None
    for a, b in zip(cuts[:-1], cuts[1:]):
        # a span's reach: its end, or its peer's call where that came later (it waits for its peer until then)
        reaches = (trace.end > a) | (ready > a) if ready is not None else trace.end > a
        picked = np.flatnonzero(reaches & (trace.start < b))
        i0 = int(np.searchsorted(trace.busy[:, 1], a, side="right")) if len(trace.busy) else 0
        i1 = int(np.searchsorted(trace.busy[:, 0], b, side="left")) if len(trace.busy) else 0
        k0, k1 = reach.first_past(a), reach.first_at(b)
        part = _Spans(trace.kind[picked], trace.start[picked], trace.end[picked],
                      trace.busy[i0:max(i0, i1)] if len(trace.busy) else trace.busy, kernels[k0:max(k0, k1)])
        rows = rank_rows(part, window, ready[picked] if ready is not None else None, (a, b))  # type: ignore[arg-type]
        if len(picked):  # no span in the window (a trace without ProfilerStep#N): every row is busy or idle
            rows.span = np.where(rows.span >= 0, picked[np.maximum(rows.span, 0)], -1)
        if held is not None:
            if len(rows.start) and rows.label[0] == held.label[0] and rows.span[0] == held.span[0]:
                rows.start[0] = held.start[0]  # one row across the cut
            else:
                rows = Rows(*(np.concatenate([x, y]) for x, y in zip(
                    (held.start, held.end, held.label, held.span), (rows.start, rows.end, rows.label, rows.span))))
        if b == hi:
            yield rows
            return
        held = Rows(rows.start[-1:], rows.end[-1:], rows.label[-1:], rows.span[-1:])
        yield Rows(rows.start[:-1], rows.end[:-1], rows.label[:-1], rows.span[:-1])


class Reach:
    """Where a window's kernels begin and end in a rank's kernels (sorted by start), for windows in rising order:
    the first whose reach (the furthest end of it and every kernel before it) passes a time, and the first to start
    at or after one. The kernels are read forward once in all, a block at a time (never their whole reach)."""

    BLOCK = 1 << 16

    def __init__(self, kernels: np.ndarray) -> None:
        self.kernels = kernels
        self.past = 0  # kernels before this one all end at or before the last time asked for
        self.reach = np.iinfo(np.int64).min  # their furthest end
        self.at = 0  # kernels before this one all start before the last time asked for

    def first_past(self, a: int) -> int:
        """The first kernel whose reach passes ``a`` (no earlier ``a`` than the last asked for)."""
        kernels = self.kernels
        while self.past < len(kernels) and self.reach <= a:
            ends = np.asarray(kernels[self.past:self.past + self.BLOCK, 1])
            reach = np.maximum.accumulate(np.maximum(ends, self.reach))
            beyond = int(np.searchsorted(reach, a, side="right"))
            if beyond < len(ends):  # found: the reach of the kernels before it is kept
                self.reach = int(reach[beyond - 1]) if beyond else self.reach
                self.past += beyond
                return self.past
            self.reach = int(reach[-1])
            self.past += len(ends)
        return self.past

    def first_at(self, b: int) -> int:
        """The first kernel starting at or after ``b`` (no earlier ``b`` than the last asked for)."""
        kernels = self.kernels
        while self.at < len(kernels):
            starts = np.asarray(kernels[self.at:self.at + self.BLOCK, 0])
            k = int(np.searchsorted(starts, b, side="left"))
            self.at += k
            if k < len(starts):
                break
        return self.at


def is_collective(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in COLLECTIVE_WORDS) and "send" not in low and "recv" not in low
