"""The System section's figures of many timeline files without every event held at once.

``processes``, ``by_name`` and ``counters`` (``host.system``) are each process's own: no figure of one process
reads another's events. So where each process's events are in files of their own, the files are read a run at a
time (``RUN_BYTES`` of Parquet, at most ``events.FILES_AT_ONCE`` files), each run's figures made and its events let
go, and the runs' rows put in the processes' order. What this holds is a run's events, not every event (10 GB of
traces in 4 ranks: 765,600 events, 41 MiB as ``Events`` and as much again to load them). Where a process's events
are in two runs, ``figures`` says so (None) and the caller loads them all, as the dashboard's System page does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.host import events, system

RUN_BYTES = 1 << 20  # Parquet bytes of timeline files read at a time (about 100,000 events)
FIGURES = ("processes", "by_name", "counters")


def runs_of(paths: Sequence[str | os.PathLike[str]]) -> list[list[str | os.PathLike[str]]]:
    """``paths`` in runs of consecutive files, each of ``RUN_BYTES`` or fewer (a larger file alone) and at most
    ``events.FILES_AT_ONCE`` files."""
    runs: list[list[str | os.PathLike[str]]] = []
    size = 0
    for path in paths:
        grown = os.path.getsize(path)
        if not runs or size + grown > RUN_BYTES or len(runs[-1]) >= events.FILES_AT_ONCE:
            runs.append([])
            size = 0
        runs[-1].append(path)
        size += grown
    return runs


def figures(paths: Sequence[str | os.PathLike[str]], imported: bool) -> dict[str, Table] | None:
    """``FIGURES`` of the files at ``paths`` (``system.processes(events, imported)``, ``by_name``, ``counters`` of
    their events), a run of files at a time (``runs_of``); None where one process's events are in two runs."""
    parts: dict[str, list[Table]] = {name: [] for name in FIGURES}
    seen: set[str] = set()
    for run in runs_of(paths):
        events = system.load_files(run)
        if seen.intersection(events.processes):
            return None
        seen.update(events.processes)
        for name, table in of_events(events, imported).items():
            parts[name].append(table)
        del events
    return {name: by_process(tables) for name, tables in parts.items()}


def of_events(events: system.Events, imported: bool) -> dict[str, Table]:
    """``FIGURES`` of ``events`` (``system.processes(events, imported)``, ``by_name``, ``counters``)."""
    return {"processes": system.processes(events, imported), "by_name": system.by_name(events),
            "counters": system.counters(events)}


def by_process(tables: list[Table]) -> Table:
    """The rows of ``tables`` (each a run's, its processes' rows together) with the processes in natural order, each
    process's rows in its table's order: as the table of all their events has them."""
    if len(tables) == 1:
        return tables[0]
    names = {c: np.concatenate([np.asarray(t[c]) for t in tables]) for c in tables[0].names}
    processes = names["process"].tolist()
    rank = {p: k for k, p in enumerate(sorted(set(processes), key=system.natural))}
    order = np.argsort(np.fromiter((rank[p] for p in processes), np.int64, len(processes)), kind="stable")
    return Table({c: column[order] for c, column in names.items()})
