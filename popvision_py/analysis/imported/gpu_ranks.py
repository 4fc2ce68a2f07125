"""The GPU's figures (``gpu``, ``bound``, ``collectives``) a rank at a time: each rank's kernels read from the row
groups of the ``kernels`` table that hold them (the table is written rank by rank), every figure computed on them
and the rank's CPU spans, and the ranks' rows joined. What a report holds is then one rank's kernels, not the run's:
a 10 GB import's 6.3 M kernels are four ranks of 1.6 M.

Every figure but ``kernel_types`` is one rank's rows, in rank order, as its function gives them for the whole
table; ``kernel_types`` sums the ranks' ``gpu.type_times``. ``tests/analysis/test_gpu_ranks.py`` checks that each
figure is the whole table's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.analysis.common.tables import Columns, Table, TABLE_COLUMNS
from popvision_py.analysis.imported import bound, collectives, gpu, stragglers
from popvision_py.analysis.imported.ranks import rank_numbers
from popvision_py.format.arrays import numbers
from popvision_py.format.values import statistics


@dataclass
class Rank:
    """What a figure takes of one rank: its kernels (``k``), those HTA keeps (``hta``), the profiled steps
    (``window``, every rank's) and its CPU timeline's spans (``bound.TraceSpans``), its phases' times worked out
    once for the two figures that show them."""

    k: gpu.Kernels
    hta: gpu.Kernels
    window: tuple[np.ndarray, np.ndarray]
    spans: bound.TraceSpans
    _times: list[bound.PhaseTimes] = field(default_factory=list)

    @property
    def times(self) -> bound.PhaseTimes:
        if not self._times:
            self._times.append(bound.phase_times(self.k, self.spans))
        return self._times[0]


# Each figure of a ``Rank``, with its arguments.
Figure = Callable[..., Table]
FIGURES: dict[str, Figure] = {
    "by_rank": lambda r: gpu.by_rank(r.k, r.window),
    "by_stream": lambda r: gpu.by_stream(r.k, r.window),
    "kernels_by_name": lambda r, n: gpu.kernels_by_name(r.k, r.window, n),
    "temporal": lambda r: gpu.temporal(r.hta),
    "kernel_types_by_rank": lambda r: gpu.kernel_types_by_rank(r.hta),
    "overlap": lambda r: gpu.comm_comp_overlap(r.hta),
    "top_kernels": lambda r, num_kernels, ratio: gpu.top_kernels(r.hta, num_kernels, ratio),
    "launch_summary": lambda r: gpu.launch_summary(r.hta),
    "idle_breakdown": lambda r, wait_ns: gpu.idle_breakdown(r.hta, wait_ns),
    "launches": lambda r: gpu.launches(r.hta),
    "collectives": lambda r: collectives.collectives(r.k, r.window),
    "bounds": lambda r: bound.step_bounds(r.k, r.spans, r.window),
    "worth_a_look": lambda r: bound.worth_a_look(r.k, r.window),
    "phases": lambda r, n: bound.phases(r.k, r.spans, r.times, n),
    "phase_overlaps": lambda r: bound.phase_overlaps(r.k, r.spans, r.times),
    "arrivals": lambda r: stragglers.arrivals(r.k, r.spans, r.window),
}
# The figures a report shows, at the arguments it shows them with: made in one pass over the ranks, with
# ``kernel_types`` (the ranks' ``gpu.type_times`` summed).
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "by_rank": (), "by_stream": (), "kernels_by_name": (10,), "temporal": (), "kernel_types_by_rank": (),
    "overlap": (), "top_kernels": (10, 0.8), "launch_summary": (), "idle_breakdown": (gpu.KERNEL_WAIT_NS,),
    "collectives": (), "bounds": (), "worth_a_look": (), "phases": (20,), "phase_overlaps": (),
    "arrivals": ()}


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
    schema before 5). The table's row groups are read once each, in order, each IPU's rows taken as they
    complete (``sorted_ranks``): a row group holds many small ranks, which one read a rank would decode again
    for each. A table not sorted by ipu is read by each IPU's row groups (``rank_kernels``)."""
    if "kernels" not in profile.tables:
        for _ in range(len(ranks)):
            yield gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)
        return
    streamed = sorted_ranks(profile, ranks)
    for ipu in range(len(ranks)):
        k = next(streamed, None)
        if k is None:  # not sorted by ipu: this IPU's and the rest by their row groups
            streamed = iter(())
            k = rank_kernels(profile, ipu, ranks)
        yield k


def sorted_ranks(profile: Any, ranks: np.ndarray) -> Iterator[gpu.Kernels]:
    """Each IPU's kernels from the table's row groups read in order, each once, while its ``ipu`` column rises; it
    stops early at rows out of order. An IPU without rows: ``rank_kernels``'s empty ``gpu.Kernels``."""
    names = [c for c in TABLE_COLUMNS["kernels"] if profile.has_column("kernels", c)]
    held: pa.Table | None = None  # the rows of the last IPU read so far (its rows may go on in the next group)
    ipu = 0
    for group in range(profile.metadata("kernels").num_row_groups):
        batches = list(profile.iter_batches("kernels", names, row_groups=[group]))
        if not batches:
            continue
        table = pa.Table.from_batches(batches)
        table = table if held is None else pa.concat_tables([held, table])
        del batches
        ipus = numbers(table["ipu"])
        if len(ipus) and ((np.diff(ipus) < 0).any() or ipus[0] < ipu):
            return
        last = int(ipus[-1]) if len(ipus) else ipu
        bounds = np.searchsorted(ipus, np.arange(ipu, last + 1))
        for at in range(ipu, last):  # the IPUs before the last one read: all their rows are here
            a, b = bounds[at - ipu], bounds[at - ipu + 1]
            yield gpu.Kernels.from_columns(Columns(table.slice(a, b - a)), ranks)
        held, ipu = table.slice(bounds[-1]), last
    if held is not None:
        yield gpu.Kernels.from_columns(Columns(held), ranks)
        ipu += 1
    for _ in range(ipu, len(ranks)):
        yield gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)


def figures(profile: Any, window: tuple[np.ndarray, np.ndarray], last_step_starts: np.ndarray | None,
            spans: bound.TraceSpans, wanted: dict[str, tuple[Any, ...]] | None = None) -> dict[str, Table]:
    """Each figure of ``wanted`` (name: its arguments after the ``Rank``; ``DEFAULTS`` and ``kernel_types`` by
    default) over the whole table, computed a rank at a time (``each_rank``), each rank's rows kept;
    ``last_step_starts``: ``gpu.hta_selection``'s; ``spans``: every rank's (``bound.TraceSpans``)."""
    ranks = rank_numbers(profile.run, int(profile.target.get("num_ipus", 1)))
    every = wanted is None
    wanted = DEFAULTS if wanted is None else wanted
    parts: dict[str, list[Table]] = {name: [] for name in wanted}
    types = np.zeros(1 << len(gpu.HTA_TYPES), np.int64)
    for ipu, k in enumerate(each_rank(profile, ranks)):
        rank = Rank(k, k.take(gpu.hta_selection(k, last_step_starts)), window, spans.take(spans.ipu == ipu))
        for name, args in wanted.items():
            answer = FIGURES[name](rank, *args)
            mine = np.asarray(answer["rank"]) == ranks[ipu]  # a figure may give every rank a row: the others' empty
            parts[name].append(answer if mine.all() else Table({c: v[mine] for c, v in answer.columns.items()}))
        if every:
            types += gpu.type_times(rank.hta)
        del k, rank
    found = {name: joined(tables) for name, tables in parts.items()}
    if every:
        found["kernel_types"] = gpu.kernel_types_of(types)
    return found


def figure(memo: Callable[[Any, Callable[[], Any]], Any], profile: Any, window: Callable[[], Any],
           last_step_starts: Callable[[], np.ndarray | None], spans: Callable[[], bound.TraceSpans], name: str,
           args: tuple[Any, ...]) -> Table:
    """``figures``' ``name`` at ``args``, kept by ``memo`` (a view's cache: key, compute): a figure at the arguments a
    report shows it with is made with every such figure, in one read of each rank's kernels; else in one of its
    own. ``window``, ``last_step_starts`` and ``spans`` give ``figures``' (asked for only when made)."""
    shown = name == "kernel_types" or DEFAULTS.get(name) == args
    return memo("figures" if shown else (name, *args), lambda: figures(
        profile, window(), last_step_starts(), spans(), None if shown else {name: args}))[name]


def joined(tables: list[Table]) -> Table:
    """The tables' rows one after the other (the ranks' rows in rank order); tables without rows left out, as
    their columns' dtypes may be an empty answer's."""
    full = [t for t in tables if len(t)] or tables[:1]
    if len(full) == 1:
        return full[0]
    return Table({c: np.concatenate([t[c] for t in full]) for c in full[0].names})
