"""The system timeline: where each host process's time went, and a zoomable view of millions of events.

Inputs: a run's system timeline files (``format.system``, one per process). ``events.load_files`` gathers
their rows into ``Events``: strings as codes, one *row* per (process, thread), events sorted by row and
start. ``processes``, ``by_name`` and ``counters`` answer ``popvision report --section system``;
``SystemIndex`` and ``window`` answer the dashboard's System page. Formulas: docs/reports.md,
"System timeline".

Names that differ only by a trailing number (``ProfilerStep#3``, ``Forward 2``, ``PP:1F3``) are one
*family*: a step or micro-batch number is not another kind of work, so the summaries give one row
and the page one colour per family.

``window`` answers a zoom in time whatever the number of events inside, as the trace's timeline does
(``trace.timeline``): for each (row, name), the spans sorted by start and the running length of
their union, so the time a name covers before any instant ``x`` is a ``np.searchsorted`` and a
bin's time the difference at its edges; the events in a bin are the starts before its end less
the ends before its start. Points (instants, counters) are counted, and counters averaged, the same
way from sorted times and running sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import SpanUnion, Table, bin_edges
from popvision_py.analysis.host.events import (  # noqa: F401 (the loading's names, as they were here)
    Events, family, load, load_files, load_tables, natural)
from popvision_py.format import system as S

SPAN, INSTANT, COUNTER = (S.KINDS.index(k) for k in ("span", "instant", "counter"))
WINDOW_COLUMNS = ["row", "process", "thread", "channel", "name", "family", "kind", "start_ns", "end_ns", "time_ns",
                  "events", "value", "depth"]
PROCESS_COLUMNS = ["process", "pid", "threads", "events", "wall_ms", "model_calls", "samples_per_second",
                   "wait_for_data_ms", "wait_for_data_pct"]
NAME_COLUMNS = ["process", "channel", "name", "kind", "count", "total_ms", "mean_ms", "max_ms", "wall_pct"]
COUNTER_COLUMNS = ["process", "name", "count", "median", "least", "most"]
NAME_BLOCK = 1 << 16  # events grouped at a time by ``by_name``
MAX_EVENTS = 2000  # a window with more events than this is drawn in bins
MAX_BINS = 500


# -- popvision report --section system ---------------------------------------------------------------


def _per_process(events: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each process's first start, last end and wall time (ns)."""
    n = len(events.processes)
    process = events.process
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, process, events.start)
    np.maximum.at(last, process, events.end)
    return first, last, np.maximum(last - first, 0)


def _named(events: Events, name: str, kind: int) -> np.ndarray:
    """The events called ``name`` of ``kind`` (a mask)."""
    codes = [k for k, n in enumerate(events.names) if n == name]
    return (events.kind == kind) & np.isin(events.name, codes)


def _code(words: Sequence[str], word: str) -> int:
    """``word``'s code among ``words``; -1, which no event has, where it is not one of them."""
    return words.index(word) if word in words else -1


# What an imported rank's model calls are: PyTorch profiler's ``ProfilerStep#N`` spans (``importer.system``)
STEP_FAMILY = "ProfilerStep"


def processes(events: Events, imported: bool = False) -> Table:
    """Per process (``PROCESS_COLUMNS``): its wall time (first event to last), its threads and events, its
    model calls, the median of its samples-per-second counter, and its waits for data (total, % of wall).

    ``imported`` (a rank's CPU time line, ``popvision import``): its model calls are its profiler steps
    (``ProfilerStep#N``) and its waits for data the training loop's DataLoader fetches (channel ``dataloader``:
    ``enumerate(DataLoader)#...__next__``, the time it spent getting its next batch); it has no samples per second.
    """
    n = len(events.processes)
    _, _, wall = _per_process(events)
    process = events.process
    if imported:  # the spans of the steps' family, and of the DataLoader's channel
        calls = (events.kind == SPAN) & (events.family_of[events.name] == _code(events.families, STEP_FAMILY))
        wait = (events.kind == SPAN) & (events.channel == _code(events.channels, S.DATALOADER))
    else:
        calls = _named(events, S.MODEL_CALL, SPAN)
        wait = _named(events, S.WAIT_FOR_DATA, SPAN)
    waited = np.rint(np.bincount(process[wait], weights=(events.end - events.start)[wait], minlength=n))
    waited = waited.astype(np.int64)
    samples = _named(events, S.SAMPLES_PER_SECOND, COUNTER)
    rate = pd.Series(events.value[samples]).groupby(process[samples]).median().reindex(range(n)).to_numpy(np.float64)
    return Table({
        "process": np.asarray(events.processes, object), "pid": events.pids,
        "threads": np.bincount(events.row_process, minlength=n).astype(np.int64),
        "events": np.bincount(process, minlength=n).astype(np.int64), "wall_ms": wall / 1e6,
        "model_calls": np.bincount(process[calls], minlength=n).astype(np.int64), "samples_per_second": rate,
        "wait_for_data_ms": waited / 1e6,
        "wait_for_data_pct": np.where(wall > 0, 100.0 * waited / np.maximum(wall, 1), 0.0),
    })


def by_name(events: Events) -> Table:
    """Per process and event name (its family), spans and instants (``NAME_COLUMNS``): how many, their total,
    mean and longest time, and the total as a share of the process's wall time, the largest total first.

    Shares overlap where spans nest (a model call holds its optimizer updates), so they need not sum to 100.
    """
    nf, nc = len(events.families), max(len(events.channels), 1)
    row_process = events.row_process
    # one group per (process, channel, family, kind) as one number, ``NAME_BLOCK`` events at a time: what it holds
    # is a block's arrays and the groups so far, not a column of every event for each (765,600 events: 65 MiB)
    groups, count = np.zeros(0, np.int64), np.zeros(0, np.int64)
    total, longest = np.zeros(0, np.float64), np.zeros(0, np.int64)
    for a in range(0, len(events), NAME_BLOCK):
        part = slice(a, a + NAME_BLOCK)
        keep = events.kind[part] != COUNTER
        key = row_process[events.row[part][keep]] * nc + events.channel[part][keep]
        key *= nf
        key += events.family_of[events.name[part][keep]]
        key *= len(S.KINDS)
        key += events.kind[part][keep]
        duration = (events.end[part] - events.start[part])[keep]
        found, inverse = np.unique(key, return_inverse=True)
        merged = np.union1d(groups, found)
        grown = [np.zeros(len(merged), so_far.dtype) for so_far in (count, total, longest)]
        for into, so_far in zip(grown, (count, total, longest)):
            into[np.searchsorted(merged, groups)] = so_far
        (count, total, longest), groups, at = grown, merged, np.searchsorted(merged, found)
        count[at] += np.bincount(inverse, minlength=len(found))
        total[at] += np.bincount(inverse, weights=duration, minlength=len(found))  # (whole ns: exact sums)
        np.maximum.at(longest, at[inverse], duration)
    g_kind = groups % len(S.KINDS)
    g_fam = groups // len(S.KINDS) % nf
    g_channel = groups // len(S.KINDS) // nf % nc
    g_process = groups // len(S.KINDS) // nf // nc
    _, _, wall = _per_process(events)
    span = g_kind == SPAN
    # by process, then the largest total first (instants after the spans), then by name (families are sorted), then
    # by channel and kind: an order of the words, not of the order the files gave them in (``system_figures``)
    channel_rank = np.argsort(np.argsort(np.asarray(events.channels, dtype=str), kind="stable")) \
        if events.channels else np.zeros(1, np.int64)
    order = np.lexsort((g_kind, channel_rank[g_channel], g_fam, -np.where(span, total, -1.0), g_process))
    return Table({
        "process": np.asarray(events.processes, object)[g_process][order],
        "channel": np.asarray(events.channels, object)[g_channel][order],
        "name": np.asarray(events.families, object)[g_fam][order],
        "kind": np.asarray(S.KINDS, object)[g_kind][order],
        "count": count[order],
        "total_ms": np.where(span, total / 1e6, np.nan)[order],
        "mean_ms": np.where(span, total / np.maximum(count, 1) / 1e6, np.nan)[order],
        "max_ms": np.where(span, longest / 1e6, np.nan)[order],
        "wall_pct": np.where(span & (wall[g_process] > 0), 100.0 * total / np.maximum(wall[g_process], 1),
                             np.nan)[order],
    })


def counters(events: Events) -> Table:
    """Per process and counter (``COUNTER_COLUMNS``): how many samples, their median, least and most."""
    keep = events.kind == COUNTER
    frame = pd.DataFrame({"process": events.process[keep], "name": events.name[keep], "value": events.value[keep]})
    stats = frame.groupby(["process", "name"], sort=True)["value"].agg(["count", "median", "min", "max"]).reset_index()
    # each process's counters by name: an order of the words, not of the order the files gave them in
    words = np.asarray(events.names, object)[stats["name"].to_numpy(np.int64)]
    stats = stats.iloc[np.lexsort((words.astype(str), stats["process"].to_numpy(np.int64)))] if len(stats) else stats
    return Table({
        "process": np.asarray(events.processes, object)[stats["process"].to_numpy(np.int64)],
        "name": np.asarray(events.names, object)[stats["name"].to_numpy(np.int64)],
        "count": stats["count"].to_numpy(np.int64), "median": stats["median"].to_numpy(np.float64),
        "least": stats["min"].to_numpy(np.float64), "most": stats["max"].to_numpy(np.float64),
    })


# -- the System page: a window at a level of detail ------------------------------------------------------


@dataclass(frozen=True)
class _EventGroup:
    """The events of one (row, name, kind), in start order, with what a window needs of them."""

    row: int
    name: int
    kind: int
    first: int  # its first event's place in the index's columns (``SystemIndex.start``...): its events follow it
    start: np.ndarray
    end: np.ndarray
    reach: np.ndarray  # the latest end so far: spans before the first reach > a all end by a
    ends: np.ndarray  # ends sorted
    union: SpanUnion  # the spans' union, and the time it covers before any instant
    values: np.ndarray  # a counter's running sum of values (0 first); another kind's: NO_VALUES


NO_VALUES = np.zeros(1)  # a group's values that is not a counter's
NO_VALUES.setflags(write=False)


def _group(index: SystemIndex, k: int, a: int, b: int) -> _EventGroup:
    """Group ``k``'s arrays: its events are the index's ``a`` to ``b``, its times slices of the index's columns. Where
    its spans are disjoint, in order (a thread's spans of one name, mostly), the latest end so far, the ends sorted
    and the union are those slices too, not copies: at 10 GB of traces in 4 ranks, the index was 72 bytes an
    event."""
    start, end = index.start[a:b], index.end[a:b]
    kind = int(index.group_kind[k])
    values = NO_VALUES
    if kind == COUNTER:
        values = np.zeros(b - a + 1)
        np.cumsum(index.value[a:b], out=values[1:])
    reach = np.maximum.accumulate(end)
    if len(end) < 2 or bool((start[1:] > reach[:-1]).all()):
        reach = ends = end
    else:
        ends = np.sort(end)
    return _EventGroup(int(index.group_row[k]), int(index.group_name[k]), kind, a, start, end, reach, ends,
                       SpanUnion.of(start, end), values)


def _depths(events: Events) -> tuple[np.ndarray, np.ndarray]:
    """Each event's depth (how many spans of its row hold it; 0 for points), and each name's usual depth, for bins
    (which mix the spans of a name). Its spans' places are let go on return, before the index makes its groups
    (765,600 events: 6 MiB)."""
    depth = np.zeros(len(events), np.int32)
    spans = np.flatnonzero(events.kind == SPAN)
    for part in np.split(spans, np.flatnonzero(np.diff(events.row[spans])) + 1) if len(spans) else []:
        # events are in (start, longer first) order: the spans before one in its row that have not ended by its
        # start hold it
        ended = np.searchsorted(np.sort(events.end[part]), events.start[part], "right")
        depth[part] = np.maximum(np.arange(len(part)) - ended, 0)
    most = int(depth.max()) + 1 if len(depth) else 1
    votes = np.bincount(events.name[spans].astype(np.int64) * most + depth[spans], minlength=len(events.names) * most)
    return depth, votes.reshape(len(events.names), most).argmax(axis=1) if len(events.names) else votes


class SystemIndex:
    """``Events`` cut into (row, name, kind) groups, each ready for ``window`` (``groups``: None for a group of
    one span, which ``single`` and its arrays hold); and each span's depth (how many spans of its row hold it),
    which the page draws as thinner bars inside thicker ones.

    The index holds the events' times, values and depths itself, in the groups' order (``start``, ``end``,
    ``value``, ``depth``; a group's events are a run of them), and of the ``Events`` their words alone
    (``events``: ``Events.words_only``). Handed a list holding the events (the dashboard's System page), it takes
    them out of it and lets each of their columns go as it holds its own: the page then holds the events once, not
    as ``Events`` and again as its groups' copies (10 GB of traces in 4 ranks: 765,600 events, 30 MiB less)."""

    def __init__(self, given: Events | list[Events]) -> None:
        events = given.pop() if isinstance(given, list) else given
        self.events = events.words_only()
        # the run as a half-open window [start_ns, end_ns): the last event's end included
        self.start_ns, self.end_ns = events.extent[0], events.extent[1] + 1
        n = len(events)
        key = (events.row.astype(np.int64) * max(len(events.names), 1) + events.name) * len(S.KINDS) + events.kind
        order = np.argsort(key, kind="stable")  # stable: start order inside each group
        key = key[order]
        begins = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1] if n else np.zeros(0, np.int64)
        del key
        if n < 1 << 31:
            order = order.astype(np.int32)
        sizes = np.diff(np.r_[begins, n])
        first = order[begins]  # each group's first event
        depth, self.name_depth = _depths(events)
        # each group's row, name, kind and channel, by its place
        self.group_row, self.group_name = events.row[first], events.name[first]
        self.group_kind, self.group_channel = events.kind[first], events.channel[first]
        del first
        columns = {"start": events.start, "end": events.end, "value": events.value}
        del events  # (where the index was handed a list: the events' other columns go with them here)
        self.start = columns.pop("start")[order]  # each column in the groups' order, the events' let go
        self.end = columns.pop("end")[order]
        self.value = columns.pop("value")[order]
        self.depth = depth[order]
        del depth, order
        # the groups of one span (a long run's steps, a name each) apart, with their span, for ``count`` and
        # ``window`` to take them all at once: only the others are made groups (``_EventGroup``, None in their place
        # for those of one span: at 10 GB of traces in 4 ranks, 69,600 groups of one step each held 120 MiB of small
        # arrays)
        one = (sizes == 1) & (self.group_kind == SPAN)
        self.single, self.others = np.flatnonzero(one), np.flatnonzero(~one)
        self.groups: list[_EventGroup | None] = [None] * len(begins)
        for k in self.others.tolist():
            self.groups[k] = _group(self, k, int(begins[k]), int(begins[k] + sizes[k]))
        self.single_event = begins[one]  # each such group's event's place in the columns
        self.single_start, self.single_end = self.start[self.single_event], self.end[self.single_event]
        # a name that is its family's and a number (``ProfilerStep#3``): binned with the family's others
        numbered = np.array([family(n) != n for n in self.events.names], bool)
        self.single_numbered = numbered[self.group_name[self.single]] if len(numbered) else np.zeros(0, bool)

    def __len__(self) -> int:
        return len(self.start)

    def count(self, a: int, b: int) -> int:
        """Events in [a, b): spans that overlap it, points inside it."""
        total = int(np.count_nonzero(self.single_start < b) - np.count_nonzero(self.single_end <= a))
        for k in self.others.tolist():
            g = self.groups[k]
            if g.kind == SPAN:
                total += int(np.searchsorted(g.start, b, "left") - np.searchsorted(g.ends, a, "right"))
            else:
                total += int(np.searchsorted(g.start, b, "left") - np.searchsorted(g.start, a, "left"))
        return total


@dataclass(frozen=True)
class SystemWindow:
    """One zoom window: ``level`` is ``"events"`` (each event) or ``"bins"``; ``frame`` has WINDOW_COLUMNS."""

    level: str
    frame: pd.DataFrame
    start_ns: int
    end_ns: int
    events: int  # events in the window


def window(index: SystemIndex, start_ns: int | None = None, end_ns: int | None = None,
           max_events: int = MAX_EVENTS, max_bins: int = MAX_BINS) -> SystemWindow:
    """The events between two times (ns), each one while there are at most ``max_events``, else in at most
    ``max_bins`` bins per (row, name): a span group's time in each bin and its events there, an instant
    group's count, a counter's mean; a numbered name's lone span (``ProfilerStep#3``: a long run's steps are a
    name each) is binned with its family's in its row, named by the family (their time summed, at most the
    bin's). A counter keeps its points on each side of the window, so its line
    reaches the window's edges. Each group's rows are gathered as arrays and made one frame at the end
    (``_Parts``): a long run's steps are a group each (``ProfilerStep#N``: 70 K groups at 10 GB of traces in
    4 ranks), and a frame a group took 1.6 ms each, minutes in all."""
    a = index.start_ns if start_ns is None else int(start_ns)
    b = index.end_ns if end_ns is None else int(end_ns)
    b = max(b, a + 1)
    inside = index.count(a, b)
    parts = _Parts(index)
    if inside <= max_events:
        # a group of one span: its span if it overlaps the window (as ``picked`` below takes it)
        shown = (index.single_end > a) & (index.single_start < b)
        rows = index.single_event[shown]
        parts.add(index.single[shown], index.single_start[shown], index.single_end[shown],
                  index.single_end[shown] - index.single_start[shown], np.ones(len(rows), np.int64),
                  index.value[rows], index.depth[rows])
        for k in index.others.tolist():
            g = index.groups[k]
            if g.kind == SPAN:
                lo, hi = int(np.searchsorted(g.reach, a, "right")), int(np.searchsorted(g.start, b, "left"))
                picked = np.arange(lo, max(hi, lo))
                picked = picked[(g.end[picked] > a) | (g.start[picked] >= a)]
            else:
                lo, hi = int(np.searchsorted(g.start, a, "left")), int(np.searchsorted(g.start, b, "left"))
                if g.kind == COUNTER:
                    lo, hi = max(lo - 1, 0), min(hi + 1, len(g.start))
                picked = np.arange(lo, hi)
            if len(picked):
                rows = g.first + picked
                parts.add(k, g.start[picked], g.end[picked], g.end[picked] - g.start[picked],
                          np.ones(len(picked), np.int64), index.value[rows], index.depth[rows])
        return SystemWindow("events", parts.frame(), a, b, inside)
    edges = bin_edges(a, b, max_bins)
    low, high = edges[:-1], edges[1:]
    _bin_single_spans(parts, index, low, high)
    for k in index.others.tolist():
        g = index.groups[k]
        if g.kind == SPAN:
            time = np.diff(g.union.before(edges))
            count = np.searchsorted(g.start, high, "left") - np.searchsorted(g.ends, low, "right")
            keep = (time > 0) | (count > 0)
            value = np.full(int(keep.sum()), np.nan)
        else:
            at = np.searchsorted(g.start, edges, "left")
            count = np.diff(at)
            keep = count > 0
            time = np.zeros(len(count), np.int64)
            value = (np.diff(g.values[at]) / np.maximum(count, 1))[keep] if g.kind == COUNTER else \
                np.full(int(keep.sum()), np.nan)
        if keep.any():
            parts.add(k, low[keep], high[keep], time[keep], count[keep], value,
                      np.full(int(keep.sum()), index.name_depth[g.name] if g.kind == SPAN else 0))
    return SystemWindow("bins", parts.frame(), a, b, inside)


def _bin_single_spans(parts: _Parts, index: SystemIndex, low: np.ndarray, high: np.ndarray) -> None:
    """``window``'s bins of every group of one span at once: a span's bins are those it overlaps (one event each,
    as a group's bins count a span in each bin it overlaps), its time in each its overlap."""
    s, e = index.single_start, index.single_end
    first = np.searchsorted(high, s, "right")  # the first bin ending after the span starts
    n = np.maximum(np.searchsorted(low, e, "left") - first, 0)  # to the last bin starting before it ends
    if not n.any():
        return
    k = np.repeat(index.single, n)
    at = np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    start, end = np.repeat(s, n), np.repeat(e, n)
    time = np.maximum(np.minimum(end, high[at]) - np.maximum(start, low[at]), 0)
    depth = index.name_depth[index.group_name[k]]
    numbered = np.repeat(index.single_numbered, n)
    own = ~numbered
    parts.add(k[own], low[at[own]], high[at[own]], time[own], np.ones(int(own.sum()), np.int64),
              np.full(int(own.sum()), np.nan), depth[own])
    if not numbered.any():
        return
    # a numbered name's spans (a long run's steps, a name each): one row a bin for its family in each row
    k, at, time, depth = k[numbered], at[numbered], time[numbered], depth[numbered]
    family_of = np.asarray(index.events.family_of, np.int64)[index.group_name[k]]
    key = (index.group_row[k].astype(np.int64) * len(index.events.families) + family_of) * len(low) + at
    keys, which = np.unique(key, return_inverse=True)
    first_group = np.full(len(keys), len(index.groups), np.int64)
    np.minimum.at(first_group, which, k)
    least_depth = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least_depth, which, depth)
    bin_of = keys % len(low)
    spans_time = np.minimum(np.bincount(which, time, len(keys)).astype(np.int64), high[bin_of] - low[bin_of])
    parts.add(first_group, low[bin_of], high[bin_of], spans_time, np.bincount(which, minlength=len(keys)),
              np.full(len(keys), np.nan), least_depth, as_family=True)


class _Parts:
    """A window's rows, a group's (or many groups') at a time (``add``), then one frame of WINDOW_COLUMNS
    (``frame``), sorted by row then start, ties in the groups' order, then each group's: what joining a frame a
    group in the groups' order, then sorting by row and start, made. Each row's words (its process, thread,
    channel, name, family, kind) are taken by code for every row at once."""

    def __init__(self, index: SystemIndex) -> None:
        self.index = index
        self.columns: list[tuple[np.ndarray, ...]] = []

    def add(self, group: int | np.ndarray, start: np.ndarray, end: np.ndarray, time: np.ndarray, count: np.ndarray,
            value: np.ndarray, depth: np.ndarray, as_family: bool = False) -> None:
        """Rows of the group at ``group`` (its place in ``index.groups``), or of the group at each row's place;
        ``as_family``: rows of its name's family (named by it), not of its name alone."""
        self.columns.append((np.broadcast_to(np.asarray(group, np.int64), len(start)), start, end, time, count,
                             value, depth, np.full(len(start), as_family)))

    def frame(self) -> pd.DataFrame:
        if not self.columns:
            return _empty_window()
        index, e = self.index, self.index.events
        group, start, end, time, count, value, depth, as_family = (np.concatenate([c[i] for c in self.columns])
                                                                   for i in range(8))
        row, name = index.group_row[group], index.group_name[group]
        order = np.lexsort((group, start, row))

        def words(of: Iterable[str], codes: np.ndarray) -> np.ndarray:
            return np.array(list(of), dtype=object)[codes[order]]

        families = words(e.families, np.asarray(e.family_of, np.int64)[name])

        return pd.DataFrame({
            "row": row[order].astype(np.int64), "process": words(e.processes, e.row_process[row]),
            "thread": words((t for _, t in e.rows), row), "channel": words(e.channels, index.group_channel[group]),
            "name": np.where(as_family[order], families, words(e.names, name)), "family": families,
            "kind": words(S.KINDS, index.group_kind[group]),
            "start_ns": start[order].astype(np.int64), "end_ns": end[order].astype(np.int64),
            "time_ns": time[order].astype(np.int64), "events": count[order].astype(np.int64),
            "value": value[order].astype(np.float64), "depth": depth[order].astype(np.int64),
        })


def _empty_window() -> pd.DataFrame:
    """A window without a row: WINDOW_COLUMNS, each of its type."""
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in zip(WINDOW_COLUMNS, (
        "int64", "object", "object", "object", "object", "object", "object", "int64", "int64", "int64", "int64",
        "float64", "int64"))})
