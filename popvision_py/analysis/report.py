"""The ``Report`` facade: opens a profile, reads each table once, and hands questions to the analyzers.

::

    import popvision_py as pv
    report = pv.open("profile/profile.pop")
    report.summary.figures()          # Summary dataclass
    report.memory.by_tile()           # DataFrame
    report.stages.best_split()        # BestSplit dataclass
    report.trace.timeline(0, 10_000)  # Timeline (level + frame)

Tables are read lazily on first use and cached. The trace is never held whole: it is read once,
row group by row group, and folded into small arrays (``tracescan.summarise``), from which the Gantt
bars are merged; the execution trace's views read its levels of detail, or the row groups of a
zoomed-in window (``trace.levels()``, ``analysis.trace_levels``). Answers are
cached too (thread-safe), so asking twice is free. The analyzers themselves (``summary``,
``memory``, ``liveness``, ``stages``, ``exchange``, ``trace`` modules) are stateless functions; this module only wires them to the data. Column lists and
formulas: docs/api.md and docs/reports.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from popvision_py.analysis import exchange as _exchange
from popvision_py.analysis import fixes as _fixes
from popvision_py.analysis import host as _host
from popvision_py.analysis import imported as _imported
from popvision_py.analysis import insights as _insights
from popvision_py.analysis import liveness as _liveness
from popvision_py.analysis import memory as _memory
from popvision_py.analysis import memory_depth as _memory_depth
from popvision_py.analysis import operations as _operations
from popvision_py.analysis import programs as _programs
from popvision_py.analysis import critical_path as _critical_path
from popvision_py.analysis import stages as _stages
from popvision_py.analysis import summary as _summary
from popvision_py.analysis import system as _system
from popvision_py.analysis import tiles as _tiles
from popvision_py.analysis import trace as _trace
from popvision_py.analysis import trace_levels as _trace_levels
from popvision_py.analysis import tracegroups as _tracegroups
from popvision_py.analysis import tracescan as _tracescan
from popvision_py.analysis import whatif as _whatif
from popvision_py.analysis.tables import TABLE_COLUMNS, Columns, StepIndex, Table
from popvision_py.analysis.tracescan import Aggregates, iterations_traced
from popvision_py.errors import OutOfRangeError
from popvision_py.format import Profile, open_profile
from popvision_py.format import system as _system_files

T = TypeVar("T")
ANSWER_VIEWS = ("summary", "memory", "liveness", "stages", "exchange", "system", "programs", "operations", "insights", "tiles",
                "critical_path")


class Report:
    """An open profile and its reports: ``summary``, ``memory``, ``liveness``, ``stages``, ``exchange``, ``trace``,
    ``operations`` (``analysis.operations.OperationsReport``), ``programs`` (the program tree), ``tiles``
    (tile balance, tiles in time), and ``system``: the host processes' timelines beside it (``system``
    paths given instead override the search).

    Attributes: ``path``, ``manifest``, ``target``, ``run`` (dicts from the manifest) and
    ``profile`` (the raw ``popvision_py.format.Profile``).
    """

    def __init__(self, source: str | os.PathLike[str] | Profile,
                 system: Iterable[str | os.PathLike[str]] | None = None) -> None:
        self.profile = source if isinstance(source, Profile) else open_profile(source)
        self.path: Path = self.profile.path
        self.manifest: dict[str, Any] = self.profile.manifest
        self.target: dict[str, Any] = self.profile.target
        self.run: dict[str, Any] = self.profile.run
        self._cache: dict[Any, Any] = {}
        self._locks: dict[Any, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._prefetching: list[threading.Thread] = []
        self.summary = SummaryReport(self)
        self.memory = MemoryReport(self)
        self.liveness = LivenessReport(self)
        self.stages = StagesReport(self)
        self.exchange = ExchangeReport(self)
        self.trace = TraceReport(self)
        self.system = SystemReport(self, list(system) if system else None)
        self.programs = ProgramsReport(self)
        self.operations = _operations.OperationsReport(self)
        self.insights = _insights.InsightsView(self)  # FP32 variables, fullest tiles, memory histogram
        self.tiles = _tiles.TilesReport(self)
        self.critical_path = _critical_path.CriticalPathView(self)  # an imported pipeline re-timed: path, culprits, what-ifs

    @property
    def imported(self) -> bool:
        """Imported from PyTorch profiler traces (``popvision import``): a rank is an IPU, a cycle a nanosecond."""
        return _imported.is_imported(self.run)

    # -- data access (each read once) -----------------------------------------------------

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per Report for ``key``.

        Thread-safe: a second thread asking for a key being computed waits for that answer rather
        than computing it again (the dashboard warms up in a thread while requests arrive).
        Answers depend on each other without cycles, so the per-key locks cannot deadlock.
        """
        try:
            return self._cache[key]
        except KeyError:
            pass
        with self._lock(key):
            if key not in self._cache:
                self._cache[key] = compute()
            return self._cache[key]

    def _lock(self, key: Any) -> threading.RLock:
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
            return lock

    def columns(self, name: str) -> Columns:
        """A table other than the trace as NumPy columns: the columns in
        ``tables.TABLE_COLUMNS``, decoded in one read, once per Report (a column a later schema version
        added is left out of an older profile's: ``name in columns`` says whether it is there)."""
        return self.memo(("columns", name), lambda: Columns(self.profile.read_table(
            name, [c for c in TABLE_COLUMNS[name] if self.profile.has_column(name, c)])))

    def prefetch(self, names: Iterable[str]) -> None:
        """Decode the tables ``names`` (through ``columns``) in a background thread, in that order.

        pyarrow releases the GIL while it decodes, so the decoding overlaps the analysis going on
        in the calling thread (the trace's fold, answers from tables already decoded). A table
        asked for while it is being decoded is waited for (``memo``'s per-key lock), never read
        twice; an error is left for the analysis to raise when it asks for that table.
        ``build_report`` prefetches for ``--section all``, which reads every table.
        """
        def decode() -> None:
            for name in names:
                try:
                    self.columns(name)
                except Exception:  # noqa: BLE001 - the caller meets the same error when it asks for the table
                    return

        thread = threading.Thread(target=decode, name="popvision-prefetch", daemon=True)
        self._prefetching.append(thread)
        thread.start()

    def table(self, name: str) -> pd.DataFrame:
        """The same table as a pandas DataFrame (converted from ``columns(name)``, not read again)."""
        return self.columns(name).frame()

    def step_index(self) -> StepIndex:
        """Program steps by (ipu, step), for joins on steps."""
        return self.memo("step_index", lambda: StepIndex(self.columns("programs")))

    def trace_batches(self, columns: tuple[str, ...]):
        """The trace's ``columns``, batch by batch (about a row group each), decoded one ahead in a thread.

        A trace of one batch is read in this thread: there is nothing to overlap, and starting a
        thread costs more than folding 50k rows (bert-large).
        """
        batches = self.profile.iter_batches("trace", columns, batch_size=_tracescan.BATCH_ROWS)
        if self.profile.num_rows("trace") <= _tracescan.BATCH_ROWS:
            return batches
        return _tracescan.prefetched(batches)

    def trace_summary(self) -> Aggregates:
        """The trace folded into the small arrays every report uses: one streaming pass, once."""
        if "trace" not in self._cache:
            self.scan_trace()
        return self._cache["trace"]

    def scan_trace(self, gantt: bool = False) -> None:
        """Read the trace for what is not cached yet: its summary (``trace_summary``), the Gantt bars if asked.

        The summary is one pass over the trace's ten columns; the Gantt bars are merged from its
        runs of rows (no pass of their own). The execution trace's views read the trace out of core
        (``trace.levels()``): no pass holds its rows.
        """
        keys = ["trace"] + (["gantt_bars"] if gantt else [])
        with contextlib.ExitStack() as held:
            for key in keys:  # always in this order: "trace" first
                held.enter_context(self._lock(key))
            if "trace" not in self._cache:
                # footer statistics only when the footer was checked against a checksum at open
                trusted = self.profile.footer_verified("trace")
                bounds = (_tracescan.column_bounds(self.profile.metadata("trace"), _tracescan.BOUND_COLUMNS)
                          if trusted else None)
                self._cache["trace"] = _tracegroups.summarise_profile(self.profile, bounds, self.trace_batches)
            agg = self._cache["trace"]
            if gantt and "gantt_bars" not in self._cache:
                self._cache["gantt_bars"] = _tracescan.gantt_bars(agg)

    def iterations(self) -> int:
        return self.memo("iterations", lambda: iterations_traced(self.trace_summary(), self.run))

    def answer(self, key: str, *args: Any) -> Table:
        """An answer as a ``Table`` (NumPy columns, no DataFrame), by its key: ``answer("memory.by_ipu")``
        holds what ``memory.by_ipu()`` returns as a frame; arguments follow the method's.

        The report renderers read these: building the ~20 DataFrames of a report would cost more
        than the analysis itself on a profile the size of bert-large's.
        """
        view, _, name = key.partition(".")
        method = getattr(getattr(self, view, None), "_" + name, None) if view in ANSWER_VIEWS else None
        if method is None:
            raise KeyError(f"There is no answer {key!r}.")
        return method(*args)

    def close(self) -> None:
        for thread in self._prefetching:  # it reads the mapped file: unmapping it under a read would crash
            thread.join()
        self._cache.clear()
        self.profile.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r})"


class _View:
    def __init__(self, report: Report) -> None:
        self._r = report

    def _memo(self, key: Any, compute: Callable[[], T]) -> T:
        return self._r.memo((type(self).__name__, key), compute)


class SummaryReport(_View):
    """Target, model, configuration, time per step, throughput, FLOP utilisation; insights."""

    def figures(self) -> _summary.Summary:
        r = self._r

        def compute() -> _summary.Summary:
            trace = r.trace_summary()
            flops = _summary.total_flops(r.columns("ops"), r.columns("programs"), trace)
            return _summary.figures(r.manifest, trace, r.iterations(), flops, r.memory._tiles())

        return self._memo("figures", compute)

    def insights(self) -> pd.DataFrame:
        """``[severity, topic, finding, suggestion, effect, command]``, most severe first; ``command`` is the
        ``popvision run`` command that applies the suggestion ("" where the finding has no runnable fix)."""
        return self._insights().frame()

    def _insights(self) -> Table:
        return self._findings()[0]

    def fixes(self) -> list[_fixes.Fix | None]:
        """The ``Fix`` of each row of ``insights()`` (None where the finding has none): its changes,
        predicted figures and tag, which ``popvision report --verify`` runs."""
        return self._findings()[1]

    def _findings(self) -> tuple[Table, list[_fixes.Fix | None]]:
        r = self._r

        def compute() -> tuple[Table, list[_fixes.Fix | None]]:
            if r.imported:
                return self._imported_findings()
            oom = r.memory._out_of_memory()
            breakdown = (r.memory._tile_breakdown(int(oom["ipu"][0]), int(oom["tile"][0]))
                         if len(oom) else None)  # read only when a tile is out of memory
            return _summary.findings(self.figures(), _summary.Evidence(
                run=r.run, target=r.target, oom=oom, worst_breakdown=breakdown,
                tile_memory=r.columns("tile_memory"), tiles=r.memory._tiles(), blocks=r.stages._blocks(), costs=r.stages._costs(),
                stage_figures=r.stages.figures(), split=r.stages.best_split(), exchange=r.exchange.figures(),
                kinds=r.exchange._by_kind(), costliest=r.exchange._costliest(10), host=r.exchange.host_input(),
                precision=r.insights.precision_fixes(self.figures().worst_tile_bytes)))

        return self._memo("insights", compute)

    def _imported_findings(self) -> tuple[Table, list[_fixes.Fix | None]]:
        """An imported run's insights, in a PyTorch user's words: none has a ``popvision run`` command."""
        r = self._r
        per = r.stages._summary()
        everything = np.asarray(per["pass"], object) == "all"
        cycles = dict(zip(np.asarray(per["stage"])[everything].tolist(),
                          np.asarray(per["cycles_per_micro_batch"], np.float64)[everything].tolist()))
        rows = _imported.insights(r.run, r.stages.figures(), r.exchange._communication(), r.liveness._peaks(), cycles)
        rows += _whatif.insight(r.critical_path)  # the one change of schedule or micro-batches that helps most
        columns = {c: np.empty(len(rows), object) for c in _summary.INSIGHT_COLUMNS}
        for k, (severity, topic, finding, suggestion) in enumerate(rows):
            for c, v in zip(_summary.INSIGHT_COLUMNS, (severity, topic, finding, suggestion, "", "")):
                columns[c][k] = v
        return Table(columns), [None] * len(rows)


class MemoryReport(_View):
    """Memory per IPU and tile, by category, always-live vs not, out-of-memory tiles, variables."""

    def _tiles(self) -> _memory.TileTotals:
        """Per-tile totals as arrays (one bincount), shared by by_ipu, distribution, out_of_memory, figures."""
        return self._memo("tiles", lambda: _memory.tile_totals(self._r.columns("tile_memory"), self._r.target))

    def by_tile(self, ipu: int | None = None) -> pd.DataFrame:
        tiles = self._memo("by_tile", lambda: self._tiles().frame())
        return tiles if ipu is None else tiles[tiles["ipu"] == ipu].reset_index(drop=True)

    def by_ipu(self) -> pd.DataFrame:
        return self._by_ipu().frame()

    def _by_ipu(self) -> Table:
        return self._memo("by_ipu", lambda: _memory.by_ipu(self._tiles(), self._r.target))

    def by_category(self, ipu: int | None = None) -> pd.DataFrame:
        return self._by_category(ipu).frame()

    def _by_category(self, ipu: int | None = None) -> Table:
        return self._memo(("by_category", ipu), lambda: _memory.by_category(self._r.columns("tile_memory"), ipu))

    def distribution(self) -> pd.DataFrame:
        return self._distribution().frame()

    def _distribution(self) -> Table:
        return self._memo("distribution", lambda: _memory.distribution(self._tiles()))

    def out_of_memory(self) -> pd.DataFrame:
        return self._out_of_memory().frame()

    def _out_of_memory(self) -> Table:
        return self._memo("oom", lambda: _memory.out_of_memory(self._tiles()))

    def largest_variables(self, n: int = 20, ipu: int | None = None) -> pd.DataFrame:
        return self._largest_variables(n, ipu).frame()

    def _largest_variables(self, n: int = 20, ipu: int | None = None) -> Table:
        return _memory.largest_variables(self._r.columns("variables"), n, ipu)

    def tile_breakdown(self, ipu: int, tile: int) -> pd.DataFrame:
        return self._tile_breakdown(ipu, tile).frame()

    def _tile_breakdown(self, ipu: int, tile: int) -> Table:
        self._check_ipu(ipu)
        return _memory.tile_breakdown(self._r.columns("tile_memory"), self._r.target, ipu, tile)

    def tile_variables(self, ipu: int, tile: int, n: int = 20) -> pd.DataFrame:
        self._check_ipu(ipu)
        return _memory.tile_variables(self._r.columns("variables"), self._r.target, ipu, tile, n).frame()

    @property
    def depth(self) -> _memory_depth.MemoryDepth:
        """Memory in depth: tiles by dominant category, a variable's footprint, one tile's tabs, worst tiles over steps."""
        return self._r.memo("memory_depth", lambda: _memory_depth.MemoryDepth(self._r))

    def _check_ipu(self, ipu: int) -> None:
        ipus = self._by_ipu()["ipu"].tolist()
        if ipu not in ipus:
            raise OutOfRangeError(f"IPU {ipu} is not in the profile: it has IPUs {', '.join(map(str, ipus))}.")


class LivenessReport(_View):
    """Not-always-live memory over program steps per IPU, the peak step, what is live at a step."""

    def by_step(self, ipu: int | None = None) -> pd.DataFrame:
        steps = self._by_step().frame()
        return steps if ipu is None else steps[steps["ipu"] == ipu].reset_index(drop=True)

    def _by_step(self) -> Table:
        r = self._r
        return self._memo("by_step", lambda: _liveness.by_step(
            r.columns("liveness"), r.columns("programs"), r.target, index=r.step_index()))

    def peaks(self) -> pd.DataFrame:
        return self._peaks().frame()

    def _peaks(self) -> Table:
        return self._memo("peaks", lambda: _liveness.peaks(self._by_step()))

    def live_at(self, ipu: int, step: int) -> pd.DataFrame:
        return self._live_at(ipu, step).frame()

    def _live_at(self, ipu: int, step: int, n: int | None = None) -> Table:
        """``live_at(ipu, step)``, the first ``n`` rows only if given."""
        r = self._r
        count = _liveness.step_count(r.columns("liveness"), r.columns("programs"), ipu)
        return _liveness.live_at(r.columns("variables"), ipu, step, count, n)


class StagesReport(_View):
    """Pipeline stages: time per stage and pass, imbalance, bubble, balanced time, best split."""

    def _costs(self):
        return self._memo("costs", lambda: _stages.costs(self._r.trace_summary(), self._r.run))

    def summary(self) -> pd.DataFrame:
        return self._summary().frame()

    def _summary(self) -> Table:
        return self._memo("summary", lambda: _stages.summary(self._costs(), self._r.trace_summary()))

    def figures(self) -> _stages.StageFigures:
        """Key figures; for an imported run the ideal bubble is its schedule's (``imported.pipeline``)."""
        def compute() -> _stages.StageFigures:
            found = _stages.figures(self._costs(), self._r.trace_summary())
            if self._r.imported:
                found = dataclasses.replace(found, ideal_bubble_pct=_imported.pipeline(self._r.run).ideal_bubble_pct)
            return found

        return self._memo("figures", compute)

    def gantt(self) -> pd.DataFrame:
        r = self._r
        def compute() -> pd.DataFrame:
            r.scan_trace(gantt=True)
            return _stages.gantt(r._cache["gantt_bars"])

        return self._memo("gantt", compute)

    def blocks(self) -> pd.DataFrame:
        """Per block: ``[block, stage, fwd_cycles, bwd_cycles, memory_bytes]`` (cycles per micro-batch)."""
        return self._blocks().frame()

    def _blocks(self) -> Table:
        r = self._r
        return self._memo("blocks", lambda: _stages.block_costs(
            self._costs(), r.columns("programs"), r.columns("ops"), r.trace_summary(), r.columns("variables")))

    def best_split(self) -> _stages.BestSplit:
        r = self._r
        return self._memo("best_split", lambda: _stages.best_split(
            self._costs(), self._blocks(), r.memory._by_ipu(), r.target, self.figures().step_cycles))

    def host_input(self) -> _host.HostInput:
        """The exchange report's ``host_input()``: a host-bound pipeline waits for input, whatever its stages."""
        return self._r.exchange.host_input()

    def ideal_bubble_pct(self, micro_batch_factor: float = 1.0) -> float:
        """The idle share of a balanced run of the same schedule with ``factor`` x the micro-batches
        (``stages.ideal_bubble_pct``)."""
        c = self._costs()
        return _stages.ideal_bubble_pct(c, int(round(c.unit_micro_batches * micro_batch_factor)))


class ExchangeReport(_View):
    """Exchange, sync and streaming: by kind, IPU-to-IPU matrix, bandwidth, costliest steps."""

    def _done(self) -> _exchange.Executed:
        return self._memo("done", lambda: _exchange.executed(self._r.columns("exchanges"), self._r.trace_summary(),
                                                                   self._r.columns("programs")))

    def figures(self) -> _exchange.ExchangeFigures:
        return self._memo("figures", lambda: _exchange.figures(self._r.trace_summary()))

    def by_kind(self) -> pd.DataFrame:
        return self._by_kind().frame()

    def _by_kind(self) -> Table:
        return self._memo("by_kind", lambda: _exchange.by_kind(self._done(), self.figures().total_cycles))

    def matrix(self) -> pd.DataFrame:
        return self._matrix().frame()

    def _matrix(self) -> Table:
        return self._memo("matrix", lambda: _exchange.matrix(self._done()))

    def bandwidth(self) -> pd.DataFrame:
        return self._bandwidth().frame()

    def _bandwidth(self) -> Table:
        return self._memo("bandwidth", lambda: _exchange.bandwidth(self._by_kind(), self._r.target))

    def communication(self) -> pd.DataFrame:
        """Per rank (IPU): compute, exposed communication, communication hidden behind compute, idle
        (``imported.COMM_COLUMNS``)."""
        return self._communication().frame()

    def _communication(self) -> Table:
        return self._memo("communication", lambda: _imported.communication(
            self._r.trace_summary(), self._r.columns("exchanges"), self._r.run))

    def costliest(self, n: int = 10) -> pd.DataFrame:
        return self._costliest(n).frame()

    def host_input(self) -> _host.HostInput:
        """How long the IPUs wait for the host's data loaders; ``host_bound`` from HOST_BOUND_PCT of the run."""
        return self._r.memo("host_input", lambda: _host.host_input(self._r.columns("programs"), self._r.trace_summary(),
                                                                   self._r.run))

    def _costliest(self, n: int = 10) -> Table:
        return self._memo(("costliest", n), lambda: _exchange.costliest(self._done(), self._r.step_index(), n))


class TraceReport(_View):
    """The execution trace: extent, zoomable timeline, program steps, per-tile cycles."""

    def extent(self) -> tuple[int, int]:
        return self._memo("extent", lambda: _trace.extent(self._r.trace_summary()))

    def levels(self) -> _trace_levels.TraceLevels:
        """The trace out of core: its levels of detail (read, or folded once for a profile without them) and
        its row groups' spans (``trace_levels.TraceLevels``)."""
        return self._memo("levels", lambda: _trace_levels.TraceLevels(self._r.profile, self._r.trace_batches))

    def window_index(self, start_cycle: int | None = None, end_cycle: int | None = None,
                     what: str = "This view") -> _trace.TimelineIndex:
        """The trace's rows overlapping a window (the whole run by default), indexed; ``WindowTooWideError``
        (one sentence offering the zoom that fits) when they are more than ``trace_levels.RAW_ROWS``."""
        a, b = self.extent()
        return self.levels().index(a if start_cycle is None else int(start_cycle),
                                   b if end_cycle is None else int(end_cycle), what)

    _index = window_index  # the whole run's rows, indexed (tests read the index through it)

    def timeline(self, start_cycle: int | None = None, end_cycle: int | None = None, max_bins: int = 2000,
                 ipus: list[int] | None = None) -> _trace.Timeline:
        """The trace between two cycles at a level of detail a figure can draw: its rows while the window's
        row groups hold at most ``trace_levels.RAW_ROWS``, else the levels of detail (docs/api.md)."""
        extent = self.extent()  # the summary's pass first, then where the row groups lie
        return _trace_levels.timeline(self.levels(), extent, start_cycle, end_cycle, max_bins, ipus)

    def steps(self, ipu: int | None = None) -> pd.DataFrame:
        return self._memo(("steps", ipu), lambda: _trace.steps(self._r.table("programs"), self._r.trace_summary(), ipu))

    def tile_cycles(self, ipu: int, step: int) -> pd.DataFrame:
        return _trace.tile_cycles(self._r.table("tile_cycles"), ipu, step)


class ProgramsReport(_View):
    """The program tree: each IPU's control program, its loops, stage segments, ops and steps (``programs.tree``)."""

    def tree(self) -> pd.DataFrame:
        return self._tree().frame()

    def _tree(self) -> Table:
        r = self._r

        def compute() -> Table:
            trace = r.trace_summary()
            counts = _programs.counts(r.run, r.iterations(), trace.run_slots)
            names = _programs.op_names(r.columns("ops"))
            return _programs.tree(r.columns("programs"), names, trace.executions, counts,
                                  _programs.loop_details(r.run, counts))

        return self._memo("tree", compute)


class SystemReport(_View):
    """The system timeline: each host process's events (``format.system`` files found beside the profile,
    or those given), where their time went, and the System page's zoomable window."""

    def __init__(self, report: Report, given: list[str | os.PathLike[str]] | None) -> None:
        super().__init__(report)
        self._given = given

    def files(self) -> list[Path]:
        """The system timeline files (``format.system.find_system_files``); empty when there are none."""
        return self._memo("files", lambda: _system_files.find_system_files(self._r.path, self._given))

    def missing(self) -> str:
        """The one line shown instead when there are no files: how to record them."""
        return _system_files.how_to_record(self._r.path)

    def events(self) -> _system.Events:
        """Every file read and checked, as columns (``system.load``)."""
        return self._memo("events", lambda: _system.load(_system_files.read_system_files(self.files())))

    def processes(self) -> pd.DataFrame:
        return self._processes().frame()

    def _processes(self) -> Table:
        return self._memo("processes", lambda: _system.processes(self.events()))

    def by_name(self) -> pd.DataFrame:
        return self._by_name().frame()

    def _by_name(self) -> Table:
        return self._memo("by_name", lambda: _system.by_name(self.events()))

    def counters(self) -> pd.DataFrame:
        return self._counters().frame()

    def _counters(self) -> Table:
        return self._memo("counters", lambda: _system.counters(self.events()))

    def index(self) -> _system.SystemIndex:
        return self._memo("index", lambda: _system.SystemIndex(self.events()))

    def extent(self) -> tuple[int, int]:
        """The run as a window [start, end) holding every event, ns since 1970: its first start and 1 ns past
        its last end; (0, 1) without any."""
        return self.index().start_ns, self.index().end_ns

    def window(self, start_ns: int | None = None, end_ns: int | None = None, max_events: int = _system.MAX_EVENTS,
               max_bins: int = _system.MAX_BINS) -> _system.SystemWindow:
        """The events between two times at a level of detail a figure can draw (``system.window``)."""
        return _system.window(self.index(), start_ns, end_ns, max_events, max_bins)
