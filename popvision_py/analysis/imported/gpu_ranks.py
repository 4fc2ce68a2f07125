"""The GPU's figures (``gpu``, ``bound``, ``collectives``) a run of ranks at a time: the ``kernels`` table's row
groups read in order (the table is written rank by rank), cut into runs of whole ranks of at most ``CHUNK_KERNELS``
kernels (one rank at least), every figure computed on a run's kernels and its ranks' CPU spans at once, and the
runs' rows joined. What a report holds is then a bounded share of the run's kernels: 4,096 ranks of 90 kernels are
three runs, not 4,096 passes. A rank of ``HOLD_KERNELS`` or more (a 10 GB import's 6.3 M kernels are four ranks of
1.6 M) is held compressed as it is read (``kernels.HeldKernels``), and each figure takes it a piece at a time.

Every figure but ``kernel_types`` is one rank's rows, in rank order, as its function gives them for the whole
table; ``kernel_types`` sums the ranks' ``gpu.type_times``. ``tests/analysis/test_gpu_ranks.py`` checks that each
figure is the whole table's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.analysis.common.tables import Columns, Table, TABLE_COLUMNS
from popvision_py.analysis.imported import bound, collectives, gpu, phases, stragglers
from popvision_py.analysis.imported.kernels import HOLD_KERNELS, HeldKernels, Stored
from popvision_py.analysis.imported.ranks import rank_numbers
from popvision_py.format.arrays import numbers
from popvision_py.format.values import statistics


@dataclass
class Rank:
    """What a figure takes of one rank: its kernels (``k``), those HTA keeps (``hta``), the profiled steps
    (``window``, every rank's) and its CPU timeline's spans (``bound.TraceSpans``), its phases' times worked out
    once for the two figures that show them."""

    k: gpu.Kernels | HeldKernels
    hta: gpu.Kernels | HeldKernels
    window: tuple[np.ndarray, np.ndarray]
    spans: bound.TraceSpans
    _times: list[phases.PhaseTimes] = field(default_factory=list)

    @property
    def times(self) -> phases.PhaseTimes:
        if not self._times:
            self._times.append(phases.phase_times(self.k, self.spans))
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
    "phases": lambda r, n: phases.phases(r.k, r.spans, r.times, n),
    "phase_overlaps": lambda r: phases.phase_overlaps(r.k, r.spans, r.times),
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


TRIM_KERNELS = 1 << 20  # a run of at least this many kernels hands its figures' freed pages back after each figure
CHUNK_KERNELS = 1 << 17  # a chunk's kernels: ranks are added to it while it holds no more (one rank at least)
READ_KERNELS = 1 << 15  # the kernels decoded at once (a row group holds ``importer.profile.KERNEL_GROUP_ROWS``)


@dataclass(frozen=True)
class Chunk:
    """A run of IPUs, ``first`` to ``first + len(k.ranks)``, and their kernels, their ``ipu`` counted from ``first``
    (``k.ranks``: those IPUs' ranks), so that every figure of the chunk has a row a rank of its own only."""

    first: int
    k: gpu.Kernels | HeldKernels  # a long rank's held compressed (``kernels.HeldKernels``)

    def rows(self, ipu: np.ndarray) -> np.ndarray:
        """The rows of a column sorted by ``ipu`` (global) that hold this chunk's IPUs, as a slice's bounds."""
        return np.searchsorted(ipu, [self.first, self.first + self.k.num_ranks])


@dataclass(frozen=True)
class RankRange:
    """IPUs ``first`` to ``stop`` and the row groups of the ``kernels`` table that hold all their rows (and maybe some
    of the IPUs before or after, left out as read), in order: what one Dask task makes the figures of
    (``gpu_cluster``)."""

    first: int
    stop: int
    groups: range


def each_chunk(profile: Any, ranks: np.ndarray, rows: int = CHUNK_KERNELS,
               part: RankRange | None = None) -> Iterator[Chunk]:
    """Every IPU's kernels (of ``part``'s IPUs and row groups only, where given), in runs of IPUs (``Chunk``) of at
    most ``rows`` kernels (one IPU at least), in IPU order, every IPU once (an empty ``gpu.Kernels`` where the profile
    has no kernels table: a schema before 5). The table's row groups are read once each, in order, a run yielded
    once its IPUs' rows are all read (``sorted_chunks``): a row group holds many small ranks, and a rank's rows may
    span several groups. A table not sorted by ipu is read an IPU at a time, by its row groups (``rank_kernels``)."""
    part = part or RankRange(0, len(ranks), range(profile.metadata("kernels").num_row_groups)
                        if "kernels" in profile.tables else range(0))
    if "kernels" not in profile.tables:
        yield Chunk(part.first, gpu.Kernels.build([], [], [], [], [], [], ranks=ranks[part.first:part.stop]))
        return
    done = part.first
    for chunk in sorted_chunks(profile, ranks, rows, part):
        yield chunk
        done = chunk.first + chunk.k.num_ranks
        del chunk  # not held while the next run is read
    for ipu in range(done, part.stop):  # not sorted by ipu: this IPU's and the rest by their row groups
        k = rank_kernels(profile, ipu, ranks)
        yield Chunk(ipu, replace(k, ipu=k.ipu - ipu, ranks=ranks[ipu:ipu + 1]))


def sorted_chunks(profile: Any, ranks: np.ndarray, rows: int, part: RankRange) -> Iterator[Chunk]:
    """``each_chunk``'s runs of ``part``'s IPUs from its row groups read in order, each once (their rows of other
    IPUs left), while their ``ipu`` column rises; it stops early at rows out of order (``each_chunk`` reads the rest
    an IPU at a time). Each ``READ_KERNELS`` rows of a row
    group are made NumPy arrays as they are read (``gpu.Kernels.owned``) and their Arrow rows let go, and a run's
    pieces are joined a field at a time (``gpu.Kernels.joined``): a long rank is held once, not as Arrow rows and
    their arrays too. A run is held until the IPUs read after it could not join it: a run of more than ``rows``
    rows (one long IPU) goes as soon as the next IPU's first row is read, not once the next IPU is read whole
    (a 10 GB import in 4 ranks held two ranks' rows, 1.6 M kernels each); the IPUs after the last one with
    kernels: one run of no kernels."""
    names = [c for c in TABLE_COLUMNS["kernels"] if profile.has_column("kernels", c)]
    held: list[gpu.Kernels] = []  # the rows of the IPUs read but not yet yielded (the last one's may go on)
    ipu = part.first  # the first IPU not yet yielded
    for batch in (b for group in part.groups
                  for b in profile.iter_batches("kernels", names, batch_size=READ_KERNELS, row_groups=[group])):
        k = gpu.Kernels.from_columns(Columns(pa.Table.from_batches([batch])), ranks)
        del batch
        inside = (k.ipu >= part.first) & (k.ipu < part.stop)  # a group shared with the part before or after
        held.append((k if inside.all() else k.take(np.flatnonzero(inside))).owned())
        del k, inside
        _hold_long(held)
        values, counts = _ipu_runs(held)
        if len(values) and ((np.diff(values) < 0).any() or values[0] < ipu):
            return
        ends = _ends(values, counts, ipu, int(values[-1]) if len(values) else ipu)  # the rows up to each IPU's end
        found = runs(ends[:-1], rows)  # the IPUs before the last one read: all their rows are here
        # the last run may take IPUs still to come, unless it holds more than a run's rows (an IPU alone)
        closed = found if found and _rows_of(found[-1], ends) > rows else found[:-1]
        keep = closed[-1][1] if closed else 0
        done = [(ipu + a, b - a, _rows(held, int(ends[a - 1]) if a else 0, int(ends[b - 1]))) for a, b in closed]
        held, ipu = _rows(held, int(ends[keep - 1]) if keep else 0, None), ipu + keep
        yield from _released(done, ranks)
    values, counts = _ipu_runs(held)
    if len(values):
        ends = _ends(values, counts, ipu, int(values[-1]))
        done = [(ipu + a, b - a, _rows(held, int(ends[a - 1]) if a else 0, int(ends[b - 1])))
                for a, b in runs(ends, rows)]
        held = []
        yield from _released(done, ranks)
        ipu = int(values[-1]) + 1
    if ipu < part.stop:
        yield Chunk(ipu, gpu.Kernels.build([], [], [], [], [], [], ranks=ranks[ipu:part.stop]))


def _ipu_runs(held: list[gpu.Kernels | Stored]) -> tuple[np.ndarray, np.ndarray]:
    """The ``ipu`` of the held rows one after the other as runs of one IPU: each run's IPU and its rows (a long
    rank's compressed pieces a run each, their ``ipu`` not made an array)."""
    values, counts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for k in held:
        if not len(k):
            continue
        starts = np.r_[0, np.flatnonzero(np.diff(k.ipu)) + 1] if not isinstance(k, Stored) else np.zeros(1, np.int64)
        values.append(np.asarray(k.ipu[starts], np.int64))
        counts.append(np.diff(np.r_[starts, len(k)]))
    return np.concatenate(values), np.concatenate(counts)


def _ends(values: np.ndarray, counts: np.ndarray, first: int, last: int) -> np.ndarray:
    """The rows up to each IPU's end, of IPUs ``first`` to ``last``, from the held rows' runs (``_ipu_runs``)."""
    return np.r_[0, np.cumsum(counts)][np.searchsorted(values, np.arange(first, last + 1), side="right")]


def _hold_long(held: list[gpu.Kernels | Stored]) -> None:
    """The pieces read of one IPU alone compressed (``Stored``) once they hold a sixteenth of ``HOLD_KERNELS`` rows:
    a long rank is not held as arrays while it is read (from half of them, a 10 GB import's ranks held 512 K
    kernels as arrays, 50 MiB)."""
    last = held[-1]
    if not len(last) or last.ipu[0] != last.ipu[-1]:
        return
    mine = [i for i, k in enumerate(held) if len(k) and k.ipu[0] == last.ipu[0] == k.ipu[-1]]
    if sum(len(held[i]) for i in mine) >= HOLD_KERNELS // 16:
        for i in mine:
            held[i] = held[i] if isinstance(held[i], Stored) else Stored.of(held[i])


def _rows(pieces: list[gpu.Kernels], lo: int, hi: int | None) -> list[gpu.Kernels]:
    """Rows ``lo`` to ``hi`` (the end for None) of the pieces' rows one after the other, as pieces (views)."""
    out, at = [], 0
    for k in pieces:
        a, b = max(lo - at, 0), len(k) if hi is None else min(hi - at, len(k))
        if a < b:
            out.append(k.take(np.arange(a, b)) if (a, b) != (0, len(k)) else k)
        at += len(k)
    return out


def _released(done: list[tuple[int, int, list[gpu.Kernels]]], ranks: np.ndarray) -> Iterator[Chunk]:
    """The runs (their first IPU, IPUs and pieces) one at a time, each joined as it is asked for and let go once
    the next is, the Arrow memory pool's freed pages handed back before each: it keeps what decoding a run's row
    groups freed (5 GB of traces in 4 ranks, a run of 787 K kernels, 110 MiB, left 280 MiB more resident)."""
    done.reverse()
    while done:
        first, count, pieces = done.pop()
        pa.default_memory_pool().release_unused()
        rows = sum(len(k) for k in pieces)
        held = HeldKernels.of(pieces, first, ranks[first:first + 1]) if count == 1 and rows >= HOLD_KERNELS else None
        if held is not None:  # a long rank: held compressed, a piece given back at a time
            del pieces
            yield Chunk(first, held)
            del held
            continue
        pieces = [p.kernels(ranks) if isinstance(p, Stored) else p for p in pieces]
        long = rows >= TRIM_KERNELS  # its pieces' pages handed back as each field is joined
        k = gpu.Kernels.joined(pieces, pa.default_memory_pool().release_unused if long else None) if pieces else \
            gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)
        del pieces
        chunk = Chunk(first, k.moved(first, ranks[first:first + count]))
        del k
        yield chunk
        del chunk


def _rows_of(run: tuple[int, int], ends: np.ndarray) -> int:
    """The rows of a run ``[a, b)`` of IPUs whose rows up to each IPU's end are ``ends``."""
    a, b = run
    return int(ends[b - 1]) - (int(ends[a - 1]) if a else 0)


def runs(ends: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """IPUs ``0..len(ends)`` (``ends``: the rows up to each IPU's end, rising) cut into runs ``[a, b)`` of at most
    ``rows`` rows each, one IPU at least."""
    found, a = [], 0
    while a < len(ends):
        lo = int(ends[a - 1]) if a else 0
        b = max(int(np.searchsorted(ends, lo + rows, side="right")), a + 1)
        found.append((a, b))
        a = b
    return found


def figures(profile: Any, window: tuple[np.ndarray, np.ndarray], last_step_starts: np.ndarray | None,
            spans: bound.TraceSpans, wanted: dict[str, tuple[Any, ...]] | None = None,
            elsewhere: Callable[..., list[tuple[dict[str, Table], np.ndarray]]] | None = None) -> dict[str, Table]:
    """Each figure of ``wanted`` (name: its arguments after the ``Rank``; ``DEFAULTS`` and ``kernel_types`` by
    default) over the whole table, computed a run of ranks at a time (``each_chunk``), each rank's rows kept;
    ``last_step_starts``: ``gpu.hta_selection``'s; ``spans``: every rank's (``bound.TraceSpans``). ``elsewhere``:
    what makes them somewhere else instead, ``part_figures``' answers of runs of ranks in order, from ``figures``'
    arguments and whether every figure is wanted (``gpu_cluster.figures`` on a Dask cluster's workers)."""
    every = wanted is None
    wanted = DEFAULTS if wanted is None else wanted
    if elsewhere is not None and "kernels" in profile.tables:  # (a schema before 5: nothing to hand out)
        made = elsewhere(profile, window, last_step_starts, spans, wanted, every)
    else:
        ranks = rank_numbers(profile.run, int(profile.target.get("num_ipus", 1)))
        made = [part_figures(each_chunk(profile, ranks, CHUNK_KERNELS), window, last_step_starts, spans, wanted,
                             every)]
    found = {name: joined([tables[name] for tables, _ in made]) for name in wanted}
    if every:
        found["kernel_types"] = gpu.kernel_types_of(sum(types for _, types in made))
    return found


def part_figures(chunks: Iterator[Chunk], window: tuple[np.ndarray, np.ndarray],
                 last_step_starts: np.ndarray | None, spans: bound.TraceSpans, wanted: dict[str, tuple[Any, ...]],
                 every: bool) -> tuple[dict[str, Table], np.ndarray]:
    """``figures``' answers over the runs of ranks ``chunks``: each figure's rows of their ranks, in order, and the
    ranks' ``gpu.type_times`` summed (zeros unless ``every``). ``window`` and ``last_step_starts``: every IPU's;
    ``spans``: those of the chunks' IPUs at least."""
    parts: dict[str, list[Table]] = {name: [] for name in wanted}
    types = np.zeros(1 << len(gpu.HTA_TYPES), np.int64)
    # each IPU's spans in their order, a chunk's a slice of them: views where the timelines' files are in rank order
    # already, as an import writes them (a 10 GB import's 348,000 spans: 8 MiB of order and copies, not held)
    by_ipu = None if spans.ipu_sorted() else np.argsort(spans.ipu, kind="stable")
    span_ipu = spans.ipu if by_ipu is None else spans.ipu[by_ipu]
    for chunk in chunks:
        k, first = chunk.k, chunk.first
        last = first + k.num_ranks
        a, b = chunk.rows(span_ipu)
        mine = spans.rows(a, b) if by_ipu is None else spans.take(by_ipu[a:b])
        mine = replace(mine, ipu=mine.ipu - first)
        steps = None if last_step_starts is None else last_step_starts[first:last]
        rank = Rank(k, k.where(lambda p, s=steps: gpu.hta_selection(p, s), ("launch_start",)),
                    (window[0][first:last], window[1][first:last]), mine)
        for name, args in wanted.items():
            parts[name].append(FIGURES[name](rank, *args))
            if len(k) >= TRIM_KERNELS:  # a long rank's figure's temporaries handed back before the next one's
                pa.default_memory_pool().release_unused()
        if every:
            types += gpu.type_times(rank.hta)
        del k, rank, chunk
    pa.default_memory_pool().release_unused()  # the last run's pages, before the sections after this one
    return {name: joined(tables, consume=True) for name, tables in parts.items()}, types


def figure(memo: Callable[[Any, Callable[[], Any]], Any], profile: Any, window: Callable[[], Any],
           last_step_starts: Callable[[], np.ndarray | None], spans: Callable[[], bound.TraceSpans], name: str,
           args: tuple[Any, ...], alone: bool = False,
           elsewhere: Callable[..., list[tuple[dict[str, Table], np.ndarray]]] | None = None) -> Table:
    """``figures``' ``name`` at ``args``, kept by ``memo`` (a view's cache: key, compute): a figure at the arguments a
    report shows it with is made with every such figure, in one read of each rank's kernels; else, or ``alone``, in
    one of its own. ``window``, ``last_step_starts`` and ``spans`` give ``figures``' (asked for only when made);
    ``elsewhere``: its."""
    shown = not alone and (name == "kernel_types" or DEFAULTS.get(name) == args)
    return memo("figures" if shown else (name, *args), lambda: figures(
        profile, window(), last_step_starts(), spans(), None if shown else {name: args}, elsewhere))[name]


def joined(tables: list[Table], consume: bool = False) -> Table:
    """The tables' rows one after the other (the ranks' rows in rank order); tables without rows left out, as
    their columns' dtypes may be an empty answer's. Where ``consume``, each table's column is let go once joined:
    the ranks' rows are then held once and a column twice, not every column twice (a 10 GB import's steps and
    arrivals, 30 MiB)."""
    full = [t for t in tables if len(t)] or tables[:1]
    if len(full) == 1:
        return full[0]
    out = {}
    for c in full[0].names:
        out[c] = np.concatenate([t[c] for t in full])
        if consume:
            for t in full:
                del t.columns[c]
    return Table(out)
