"""Small ranks' table rows cut by processes forked once the profile's plan is made, and written by the parent in
rank order as it would have cut them itself.

A job of thousands of small ranks spent a third of its import in the parent cutting each rank's few rows into the
tables' columns (``profile.rank_items``: about 0.8 ms of CPU a rank, a few hundred NumPy calls) while the
processes that had read the ranks were gone. Here runs of consecutive small ranks are cut by ``jobs - 1`` worker
processes forked after the plan (``fork``: each holds the ranks and the plan as the parent does; nothing of them is
sent) and by the parent while the run it needs next is not back (``Runs``). A run's rows come back as a few long
arrays a table (``Packed``: sending a rank's hundred-odd arrays apart cost as much as cutting them), and the
parent hands them to each table's batching as the ranks one by one would have filled it (``profile.Batched.
write_packed``): the same row groups, and the profile the same byte for byte. A large rank, and every rank where
processes cannot be forked (not Linux), where there are few small ranks or where ``jobs`` is 1, is cut by the
parent.
"""

from __future__ import annotations

import gc
import multiprocessing
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from popvision_py.importer.read import RankTrace, TraceError
from popvision_py.importer.tables import Coded, LazyColumn

HIDDEN = "hidden_comm_ns"  # the item that ends a rank's: the nanoseconds its communication was hidden
SMALL_ROWS = 1 << 14  # a rank of at most this many spans, busy rows and kernels together is small
FORKED_PAST = 64  # small ranks past which they are cut by forked processes
RUN_ROWS = 1 << 16  # a run of small ranks sent to a process holds about this many of their rows...
RUN_RANKS = 64  # ... and at most this many ranks

_SHARED: list[Any] = []  # (traces, plan, busy_rows, cut) while a pool's processes are forked from this one

Item = tuple[str, Any]  # (table, its columns), or (HIDDEN, nanoseconds)


def rank_rows(t: RankTrace) -> int:
    """The rows that size a rank's cut: its spans, busy rows and kernels."""
    return len(t.kind) + len(t.busy) + len(t.kernels)


def forkable() -> bool:
    """Whether worker processes can be forked here, holding what this one holds: Linux (elsewhere ``fork`` is not
    offered, or, on macOS, not safe with the system's libraries)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def runs(traces: list[RankTrace]) -> list[range]:
    """The runs of consecutive small ranks that are sent to a process each (``RUN_ROWS``, ``RUN_RANKS``)."""
    out: list[range] = []
    first, rows = None, 0
    for ipu, t in enumerate(traces):
        n = rank_rows(t)
        if n > SMALL_ROWS:
            if first is not None:
                out.append(range(first, ipu))
            first, rows = None, 0
            continue
        if first is not None and (ipu - first >= RUN_RANKS or rows + n > RUN_ROWS):
            out.append(range(first, ipu))
            first, rows = None, 0
        if first is None:
            first = ipu
        rows += n
    if first is not None:
        out.append(range(first, len(traces)))
    return out


def rank_items_in_order(traces: list[RankTrace], plan: Any, busy_rows: int, jobs: int,
                        cut: Any) -> Iterator[tuple[int, Iterator[Item]] | tuple[range, Packed]]:
    """Each rank's items (``cut(t, ipu, plan, busy_rows)``'s: ``profile.rank_items``), in rank order: a rank's as
    (its number, its items), a run of small ranks' as (their range, ``Packed``). Where there are more than
    ``FORKED_PAST`` small ranks and ``jobs`` > 1, runs of them are cut by ``jobs - 1`` forked processes (at most one
    a run) and, while the next run is not back, by this one (``Runs``); any other rank is cut here as it is asked
    for (a large rank's windows one at a time). ``jobs - 1``, not ``jobs``: this process would otherwise wait on
    them, and each forked process is a copy of this one's resident set (in pages shared with it, but counted in each
    one's)."""
    chosen = runs(traces) if jobs > 1 and forkable() else []
    if sum(len(r) for r in chosen) <= FORKED_PAST:
        for ipu, t in enumerate(traces):
            yield ipu, cut(t, ipu, plan, busy_rows)
        return
    _SHARED[:] = [traces, plan, busy_rows, cut]
    # the objects so far kept out of the collector's passes: a forked process's first pass would otherwise write to
    # every object's header, and so copy every page of this process's heap that holds one
    gc.freeze()
    try:
        workers = min(jobs - 1, len(chosen))  # no more processes than runs
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            try:
                started(pool, context)
                taken = Runs(pool, chosen, workers)
                ipu = 0
                for k, r in enumerate(chosen):
                    for ipu in range(ipu, r.start):  # a large rank between runs
                        yield ipu, cut(traces[ipu], ipu, plan, busy_rows)
                    yield r, taken.take(k)
                    ipu = r.stop
                for ipu in range(ipu, len(traces)):
                    yield ipu, cut(traces[ipu], ipu, plan, busy_rows)
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
    finally:
        _SHARED.clear()
        gc.unfreeze()


def started(pool: ProcessPoolExecutor, context: Any) -> None:
    """``pool``'s processes (of the multiprocessing ``context``) started (a first task run) with Ctrl-C blocked,
    where they are forked from this one: they inherit the block, so a Ctrl-C is this process's alone to handle (it
    stops the pool), and one that lands while they start is not raised in a process half started, which printed its
    traceback under the command's one sentence. One that comes meanwhile is handled here once unblocked."""
    if not forkable() or context.get_start_method() != "fork":
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pool.submit(int).result()
    except BrokenProcessPool:
        raise TraceError("A process of the import died as it started (killed, or out of memory).") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


HELD_RUNS = 4  # runs this process cuts ahead of the one it waits for, at most


class Runs:
    """The runs of small ranks, each cut once: by the pool (at most two a process handed to it ahead of the run
    taken), or, while the run taken next is still being cut there, the next run no one has by this process, held
    until its turn (at most ``HELD_RUNS``). Each run's items are taken in order (``take``)."""

    def __init__(self, pool: ProcessPoolExecutor, chosen: list[range], workers: int) -> None:
        self.pool, self.chosen, self.workers = pool, chosen, workers
        self.futures: dict[int, Future] = {}
        self.held: dict[int, Packed] = {}
        self.assigned = 0  # the runs handed out so far, in order

    def take(self, k: int) -> Packed:
        """Run ``k``'s ranks' items; a process of the pool that died is one sentence."""
        try:
            return self._take(k)
        except BrokenProcessPool:
            rank = _SHARED[0][self.chosen[k].start].rank
            raise TraceError(f"A process cutting the ranks' rows died (killed, or out of memory) before rank "
                             f"{rank:,} was written.") from None

    def _take(self, k: int) -> Packed:
        while self.assigned < len(self.chosen) and len(self.futures) < 2 * self.workers:
            r = self.chosen[self.assigned]
            self.futures[self.assigned] = self.pool.submit(_cut_run, r.start, r.stop)
            self.assigned += 1
        if k in self.held:
            return self.held.pop(k)
        future = self.futures.pop(k, None)
        if future is None:  # handed to no one yet (no process at all): cut here
            self.assigned = max(self.assigned, k + 1)
            return _cut_here(self.chosen[k])
        while not future.done() and self.assigned < len(self.chosen) and len(self.held) < HELD_RUNS:
            self.held[self.assigned] = _cut_here(self.chosen[self.assigned])
            self.assigned += 1
        return future.result()


def _cut_here(r: range) -> Packed:
    traces, plan, busy_rows, cut = _SHARED
    return Packed([list(cut(traces[ipu], ipu, plan, busy_rows)) for ipu in r])


def _cut_run(first: int, stop: int) -> Packed:
    """In a forked process: the ranks [first, stop)'s items, packed."""
    return _cut_here(range(first, stop))


class PackedTable:
    """One table's items of a run of ranks, one after the other: each item's rows, its column names and each coded
    column's words, and each column of every item joined (a column whose items differ in type kept as a list of
    them: a concatenation would cast it)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.names: list[tuple[str, ...]] = []
        self.words: list[dict[str, tuple[str, ...]]] = []
        self.columns: dict[str, Any] = {}

    def add(self, columns: dict[str, Any]) -> None:
        words = {}
        self.rows.append(len(next(iter(columns.values()))) if columns else 0)
        self.names.append(tuple(columns))
        for name, column in columns.items():
            if isinstance(column, LazyColumn):
                column = column[0:len(column)]
            if isinstance(column, Coded):
                words[name], column = column.words, column.codes
            self.columns.setdefault(name, []).append(np.asarray(column))
        self.words.append(words)

    def join(self) -> None:
        self.columns = {name: np.concatenate(arrays) if len({a.dtype for a in arrays}) == 1 else arrays
                        for name, arrays in self.columns.items()}

    def uniform(self) -> tuple[str, ...] | None:
        """The column names where every item has the same columns, coded alike, each column joined; else None."""
        names, coded = self.names[0], set(self.words[0])
        if any(n != names for n in self.names) or any(set(w) != coded for w in self.words) or any(
                isinstance(v, list) for v in self.columns.values()):
            return None
        return names

    def items(self) -> Iterator[dict[str, Any]]:
        """Each item's columns again: slices of the joined ones."""
        at = 0
        for k, (rows, names, words) in enumerate(zip(self.rows, self.names, self.words)):
            columns = {}
            for name in names:
                values = self.columns[name]
                column = values[k] if isinstance(values, list) else values[at:at + rows]
                columns[name] = Coded(column, words[name]) if name in words else column
            at += rows
            yield columns


class Packed:
    """A run of ranks' items (``profile.rank_items``'), each table's joined (``PackedTable``), and each rank's
    hidden nanoseconds: a few long arrays to send from a forked process and to write, not a few hundred a rank."""

    def __init__(self, ranks: list[list[Item]]) -> None:
        self.tables: dict[str, PackedTable] = {}
        self.hidden: list[Any] = []
        for items in ranks:
            for table, columns in items:
                if table == HIDDEN:
                    self.hidden.append(columns)
                else:
                    self.tables.setdefault(table, PackedTable()).add(columns)
        for packed in self.tables.values():
            packed.join()
