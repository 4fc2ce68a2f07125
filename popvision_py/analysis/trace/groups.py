"""The trace's summary folded over its row groups on all the machine's cores at once.

Row groups are independent: every figure of the summary (``trace.scan.Aggregates``) is a sum, a
count, an extreme or a set union, so each worker thread folds the row groups it takes into a fold
of its own (``trace.scan._Fold``), and the folds are merged at the end; the runs of rows the stages
report re-times are put back in the trace's order (row group, then batch). The threads run at once
because pyarrow decodes, and NumPy reduces, without the GIL.

Memory stays bounded whatever the trace's length: a worker decodes one batch (about a row group)
at a time and takes the next row group only once it has folded the last, so at most one row group
per worker is in flight. The folds' dense arrays are small (IPUs x stages x passes x phases, IPUs x
steps), and the (run, iteration, stage, micro-batch) set, when sized from the footer, is shared by
all workers (they only ever set cells).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from popvision_py.analysis.trace.scan import BATCH_ROWS, SUMMARY_COLUMNS, Aggregates, _Fold, arrays, summarise
from popvision_py.analysis.trace.steps import Settler, group_starts

if TYPE_CHECKING:
    from popvision_py.format.reader import Profile

# Each worker's own fold costs its dense arrays and a batch in flight: more workers than cores only add that.
MAX_WORKERS = 8
# Rows per batch of a trace not cut into supersteps (an imported one): each of its rows is about a run of its own,
# so a batch's runs and the fold's temporaries take some 150 bytes a row besides the decoded batch; at 2**15 rows
# they stay under 8 MiB per worker, where a row group of the import's (262,144 rows) took 30 MiB. An emulated
# trace's runs are few (it repeats its supersteps): its batches stay a row group (``BATCH_ROWS``), which folds
# 10M rows in 0.22 s against 0.37 s in batches of 2**16 (two workers).
RUNS_BATCH_ROWS = 1 << 15


def workers_for(groups: int) -> int:
    """How many threads fold a trace of ``groups`` row groups: one per core this process may use
    (at most MAX_WORKERS), never more than the row groups."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS, groups))


def summarise_groups(read: Callable[[int], Iterable[pa.RecordBatch]], groups: int,
                     bounds: dict[str, tuple[int, int]] | None = None, workers: int | None = None,
                     starts: np.ndarray | None = None, settle_runs: int | None = None,
                     progress: Callable[[int], None] | None = None, cut: bool = True) -> Aggregates:
    """``trace.scan.summarise`` of a trace of ``groups`` row groups, ``read(g)`` giving row group
    ``g``'s batches (of ``SUMMARY_COLUMNS``), folded by ``workers`` threads (``workers_for``).

    The result is the one a single pass gives. An error in any worker (a corrupt page, a value the
    schema forbids) stops the others and is raised here; so is a Ctrl-C, once the workers have
    stopped at their next batch. ``starts`` (each row group's first start, ``trace.steps.group_starts``)
    with ``bounds``: each row group's runs of rows are handed to a ``trace.steps.Settler`` as it is
    folded, which cuts the supersteps behind the horizon, so that memory does not grow with the trace
    (``settle_runs``: runs it holds before it cuts, ``trace.steps.SETTLE_RUNS`` by default).
    ``cut=False`` (a run that is not bulk-synchronous, with ``bounds``): no supersteps are cut, and each
    batch's runs are merged into the first iterations' Gantt bars as soon as it is folded
    (``Settler.add_bars``): ``slots`` holds those bars only and ``supersteps`` is ``None``.
    ``progress(g)`` is called, from the worker that folded it, once row group ``g`` is folded.
    """
    workers = workers_for(groups) if workers is None else max(1, min(workers, groups))
    first = _Fold(bounds)
    folds = [first] + [_Fold(bounds, seen=first.seen if first.whole_seen else None) for _ in range(workers - 1)]
    taken = iter(range(groups))
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    settler = None
    if not cut and bounds is not None:
        settler = Settler(None, bounds, bounds["iteration"][1] + 1, cut=False)
    elif starts is not None and bounds is not None and len(starts) == groups:
        settler = Settler(starts, bounds, bounds["iteration"][1] + 1, settle_runs)

    def work(fold: _Fold) -> None:
        try:
            while not stop.is_set():
                with lock:
                    group = next(taken, None)
                if group is None:
                    return
                for index, batch in enumerate(read(group)):
                    if stop.is_set():
                        return
                    fold.add(arrays(batch, SUMMARY_COLUMNS), (group, index))
                    if settler is not None and not settler.cut:  # bars only: the batch's runs at once
                        settler.add_bars(fold.slots.parts)
                        fold.slots.parts = []
                if settler is not None and settler.cut:  # the row group's runs, now that all its batches are folded
                    settler.add(group, fold.slots.parts)
                    fold.slots.parts = []
                if progress is not None:
                    progress(group)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=work, args=(fold,), name=f"popvision-trace-fold-{i}", daemon=True)
               for i, fold in enumerate(folds[1:], 1)]
    for thread in threads:
        thread.start()
    try:
        work(folds[0])  # this thread is a worker too
    finally:
        for thread in threads:
            while thread.is_alive():
                try:
                    thread.join()
                except KeyboardInterrupt:  # stop the workers, wait for them, then pass the Ctrl-C on
                    stop.set()
                    errors.append(KeyboardInterrupt())
    if errors:
        raise errors[0]
    for fold in folds[1:]:
        first.merge(fold)
    if settler is None:
        return first.result()
    if not settler.settled:  # too few runs to have settled any: cut at the end, as without a settler
        first.slots.parts = settler.pending + first.slots.parts
        return first.result()
    bars, steps = settler.finish(first.slots.parts)
    first.slots.parts = []
    return dataclasses.replace(first.result(), slots=bars, supersteps=steps, first_bars=True)


def summarise_profile(profile: Profile, bounds: dict[str, tuple[int, int]] | None,
                      batches: Callable[[tuple[str, ...]], Iterable[pa.RecordBatch]],
                      progress: Callable[[int], None] | None = None, cut: bool = True) -> Aggregates:
    """The summary of ``profile``'s trace: its row groups folded on every core when it has several
    and the process more than one core; else one pass over ``batches(SUMMARY_COLUMNS)`` (the
    report's reader, which decodes the next batch while this one is folded). ``progress(rows)`` is
    called as rows are folded (a row group's, or a batch's), for a progress bar: they add up to the
    trace's rows."""
    footer = profile.metadata("trace")
    groups = footer.num_row_groups
    if workers_for(groups) <= 1 and (cut or bounds is None):
        return summarise(_counted(batches(SUMMARY_COLUMNS), progress), bounds)

    def read(group: int) -> Iterable[pa.RecordBatch]:
        # each worker decodes its row group itself (pyarrow releases the GIL): on pyarrow's pool instead,
        # a worker sat waiting for the pool while the other waited for the GIL (10M rows: 150 ms, not 131)
        return profile.iter_batches("trace", SUMMARY_COLUMNS, batch_size=BATCH_ROWS if cut else RUNS_BATCH_ROWS,
                                    row_groups=[group], use_threads=False)

    starts = group_starts(footer) if bounds is not None else None
    folded = None if progress is None else (lambda group: progress(footer.row_group(group).num_rows))
    return summarise_groups(read, groups, bounds, starts=starts, progress=folded, cut=cut)


def _counted(batches: Iterable[pa.RecordBatch], progress: Callable[[int], None] | None) -> Iterable[pa.RecordBatch]:
    """``batches``, each one's rows passed to ``progress`` once it has been folded (asked for the next)."""
    if progress is None:
        yield from batches
        return
    for batch in batches:
        yield batch
        progress(batch.num_rows)
