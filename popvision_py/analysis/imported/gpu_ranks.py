"""The GPU's figures (``gpu``) a rank at a time: each rank's kernels read from the row groups of the ``kernels``
table that hold them (the table is written rank by rank), every figure computed on them, and the ranks' rows
joined. What a report holds is then one rank's kernels, not the run's: a 10 GB import's 6.3 M kernels are four
ranks of 1.6 M.

Every figure but ``kernel_types`` is one rank's rows, in rank order, as ``gpu``'s function gives them for the
whole table; ``kernel_types`` sums the ranks' ``gpu.type_times``. ``tests/analysis/test_gpu_ranks.py`` checks
that each figure is the whole table's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.analysis.common.tables import Columns, Table, TABLE_COLUMNS
from popvision_py.analysis.imported import gpu
from popvision_py.analysis.imported.ranks import rank_numbers
from popvision_py.format.arrays import numbers
from popvision_py.format.values import statistics

# Each figure of one rank's kernels (``k``), of those HTA keeps (``hta``), within the profiled steps (``window``),
# and its arguments.
Figure = Callable[..., Table]
FIGURES: dict[str, Figure] = {
    "by_rank": lambda k, hta, window: gpu.by_rank(k, window),
    "by_stream": lambda k, hta, window: gpu.by_stream(k, window),
    "kernels_by_name": lambda k, hta, window, n: gpu.kernels_by_name(k, window, n),
    "temporal": lambda k, hta, window: gpu.temporal(hta),
    "kernel_types_by_rank": lambda k, hta, window: gpu.kernel_types_by_rank(hta),
    "overlap": lambda k, hta, window: gpu.comm_comp_overlap(hta),
    "top_kernels": lambda k, hta, window, num_kernels, ratio: gpu.top_kernels(hta, num_kernels, ratio),
    "launch_summary": lambda k, hta, window: gpu.launch_summary(hta),
    "idle_breakdown": lambda k, hta, window, wait_ns: gpu.idle_breakdown(hta, wait_ns),
    "launches": lambda k, hta, window: gpu.launches(hta),
}
# The figures a report shows, at the arguments it shows them with: made in one pass over the ranks, with
# ``kernel_types`` (the ranks' ``gpu.type_times`` summed).
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "by_rank": (), "by_stream": (), "kernels_by_name": (10,), "temporal": (), "kernel_types_by_rank": (),
    "overlap": (), "top_kernels": (10, 0.8), "launch_summary": (), "idle_breakdown": (gpu.KERNEL_WAIT_NS,)}


def row_groups(profile: Any, ipu: int) -> list[int]:
    """The row groups of the ``kernels`` table that may hold IPU ``ipu``'s rows, by their footer's statistics
    (every group where they are missing or not to be trusted)."""
    metadata = profile.metadata("kernels")
    groups = list(range(metadata.num_row_groups))
    if not profile.footer_verified("kernels"):
        return groups
    stated = [statistics(metadata, g, "ipu") for g in groups]
    return [g for g, s in zip(groups, stated) if s is None or s[0] <= ipu <= s[1]]


def rank_kernels(profile: Any, ipu: int, ranks: np.ndarray) -> gpu.Kernels:
    """IPU ``ipu``'s kernels (``gpu.Kernels``, its rows of the table only; ``ranks``: each IPU's rank)."""
    names = [c for c in TABLE_COLUMNS["kernels"] if profile.has_column("kernels", c)]
    batches = list(profile.iter_batches("kernels", names, row_groups=row_groups(profile, ipu)))
    if not batches:
        return gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)
    table = pa.Table.from_batches(batches)
    del batches
    ipus = numbers(table["ipu"])
    if not (ipus == ipu).all():  # a row group shared with the ranks before or after: the table is sorted by ipu
        first, last = np.searchsorted(ipus, [ipu, ipu + 1]) if (np.diff(ipus) >= 0).all() else (None, None)
        table = table.slice(first, last - first) if first is not None else table.filter(pc.equal(table["ipu"], ipu))
    del ipus
    return gpu.Kernels.from_columns(Columns(table), ranks)


def each_rank(profile: Any, ranks: np.ndarray) -> Iterator[gpu.Kernels]:
    """Each IPU's kernels in turn (an empty ``gpu.Kernels`` each where the profile has no kernels table: a
    schema before 5)."""
    for ipu in range(len(ranks)):
        if "kernels" not in profile.tables:
            yield gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)
        else:
            yield rank_kernels(profile, ipu, ranks)


def figures(profile: Any, window: tuple[np.ndarray, np.ndarray], last_step_starts: np.ndarray | None,
            wanted: dict[str, tuple[Any, ...]] | None = None) -> dict[str, Table]:
    """Each figure of ``wanted`` (name: its arguments after the kernels and window; ``DEFAULTS`` and
    ``kernel_types`` by default) over the whole table, computed a rank at a time (``each_rank``);
    ``last_step_starts``: ``gpu.hta_selection``'s."""
    ranks = rank_numbers(profile.run, int(profile.target.get("num_ipus", 1)))
    every = wanted is None
    wanted = DEFAULTS if wanted is None else wanted
    parts: dict[str, list[Table]] = {name: [] for name in wanted}
    types = np.zeros(1 << len(gpu.HTA_TYPES), np.int64)
    for ipu, k in enumerate(each_rank(profile, ranks)):
        hta = k.take(gpu.hta_selection(k, last_step_starts))
        for name, args in wanted.items():
            answer = FIGURES[name](k, hta, window, *args)
            if name == "by_rank":  # a row for every rank, the others' empty
                answer = Table({c: v[ipu:ipu + 1] for c, v in answer.columns.items()})
            parts[name].append(answer)
        if every:
            types += gpu.type_times(hta)
        del k, hta
    found = {name: joined(tables) for name, tables in parts.items()}
    if every:
        found["kernel_types"] = gpu.kernel_types_of(types)
    return found


def figure(memo: Callable[[Any, Callable[[], Any]], Any], profile: Any, window: Callable[[], Any],
           last_step_starts: Callable[[], np.ndarray | None], name: str, args: tuple[Any, ...]) -> Table:
    """``figures``' ``name`` at ``args``, kept by ``memo`` (a view's cache: key, compute): a figure at the arguments a
    report shows it with is made with every such figure, in one read of each rank's kernels; else in one of its
    own. ``window`` and ``last_step_starts`` give ``figures``' (asked for only when made)."""
    shown = name == "kernel_types" or DEFAULTS.get(name) == args
    return memo("figures" if shown else (name, *args), lambda: figures(
        profile, window(), last_step_starts(), None if shown else {name: args}))[name]


def joined(tables: list[Table]) -> Table:
    """The tables' rows one after the other (the ranks' rows in rank order); tables without rows left out, as
    their columns' dtypes may be an empty answer's."""
    full = [t for t in tables if len(t)] or tables[:1]
    if len(full) == 1:
        return full[0]
    return Table({c: np.concatenate([t[c] for t in full]) for c in full[0].names})
