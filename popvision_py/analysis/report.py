"""The ``Report`` facade: opens a profile, reads each table once, and hands questions to the analyzers.

::

    import popvision_py as pv
    report = pv.open("profile/profile.pop")
    report.summary.figures()          # Summary dataclass
    report.memory.by_tile()           # DataFrame
    report.stages.best_split()        # BestSplit dataclass
    report.trace.timeline(0, 10_000)  # Timeline (level + frame)

Tables are read lazily on first use and cached. The trace is never held whole: it is read once,
row group by row group, and folded into small arrays (``trace.scan.summarise``), from which the Gantt
bars are merged; the execution trace's views read its levels of detail, or the row groups of a
zoomed-in window (``trace.levels()``, ``analysis.trace_levels``). Answers are
cached too (thread-safe), so asking twice is free. The analyzers themselves (``summary``,
``memory``, ``liveness``, ``stages``, ``exchange``, ``trace`` modules) are stateless functions; the
views that ask them (``report.summary``, ``report.memory``, ...) are ``analysis.views``; this module
holds the facade alone: the profile, the cache, its locks and the reading threads. Column lists and
formulas: docs/api.md and docs/reports.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from popvision_py.analysis.imported import ranks as _imported
from popvision_py.analysis.findings import insights as _insights
from popvision_py.analysis.ipu import operations as _operations
from popvision_py.analysis.pipeline import critical_path as _critical_path
from popvision_py.analysis.ipu import tiles as _tiles
from popvision_py.analysis.trace import groups as _tracegroups
from popvision_py.analysis.trace import scan as _tracescan
from popvision_py.analysis.findings.fixes import Planner
from popvision_py.analysis.common.tables import STEP_PIECE_ROWS, TABLE_COLUMNS, Columns, StepIndex, StepPieces, Table
from popvision_py.analysis.trace.scan import Aggregates, iterations_traced
from popvision_py.format import Profile, open_profile
from popvision_py.analysis.gpu_view import GpuReport
from popvision_py.analysis.views import (ExchangeReport, LivenessReport, MemoryReport, ProgramsReport,
                                          StagesReport, SummaryReport, SystemReport, TraceReport)

T = TypeVar("T")
ANSWER_VIEWS = ("summary", "memory", "liveness", "stages", "exchange", "system", "programs", "operations", "insights",
                "tiles", "critical_path", "gpu")


# What ``Report.hand_back`` keeps beside the tables decoded whole (``("columns", table)``): the trace's summary and its
# Gantt bars, one pass over the trace that every section reads
KEPT = ("trace", "gantt_bars")


class Report:
    """An open profile and its reports: ``summary``, ``memory``, ``liveness``, ``stages``, ``exchange``, ``trace``,
    ``operations`` (``analysis.operations.OperationsReport``), ``programs`` (the program tree), ``tiles``
    (tile balance, tiles in time), ``gpu`` (an imported GPU trace's kernels), and ``system``: the host
    processes' timelines beside it (``system`` paths given instead override the search).

    ``planner`` (``fixes.Planner``) is the planner the insights' fixes are checked against, handed in
    by whoever opens the profile: ``popvision_py.open`` and the CLI pass the emulator's rules. A Report
    made without one suggests no fix: ``summary.insights()`` lists each finding alone (no suggestion,
    effect or command) and ``summary.fixes()`` is None on every row, never a fix left unchecked.

    Attributes: ``path``, ``manifest``, ``target``, ``run`` (dicts from the manifest), ``planner``, ``profile`` (the
    raw ``popvision_py.format.Profile``) and ``cluster`` (a Dask client for the GPU figures' pass over the ranks, set
    by whoever holds one; None: here).
    """

    def __init__(self, source: str | os.PathLike[str] | Profile,
                 system: Iterable[str | os.PathLike[str]] | None = None, planner: Planner | None = None) -> None:
        self.profile = source if isinstance(source, Profile) else open_profile(source)
        self.path: Path = self.profile.path
        self.manifest: dict[str, Any] = self.profile.manifest
        self.target: dict[str, Any] = self.profile.target
        self.run: dict[str, Any] = self.profile.run
        self.planner = planner
        self._cache: dict[Any, Any] = {}
        self._locks: dict[Any, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._prefetching: list[threading.Thread] = []
        self._prefetched: set[str] = set()  # the tables ``prefetch`` was asked to decode
        # called with the rows of the trace folded so far, as its summary pass goes (a progress bar's update)
        self.trace_progress: Callable[[int], None] | None = None
        # a Dask client whose workers make the GPU figures' pass over every rank's kernels (`report --scheduler`;
        # ``imported.gpu_cluster``): they must see the profile at its path. None: made here
        self.cluster: Any = None
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
        # an imported pipeline re-timed: path, culprits, what-ifs
        self.critical_path = _critical_path.CriticalPathView(self)
        self.gpu = GpuReport(self)  # a GPU trace's kernels: popvision's figures and HTA 0.5's

    @property
    def imported(self) -> bool:
        """Imported from PyTorch profiler traces (``popvision import``): a rank is an IPU, a cycle a nanosecond."""
        return _imported.is_imported(self.run)

    @property
    def memory_recorded(self) -> bool:
        """Whether the memory figures measure anything: False for an imported profile whose traces hold no
        ``[memory]`` events (``run.import.memory_recorded``); its memory is "not recorded", never a number."""
        return _imported.memory_recorded(self.run)

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

    def forget(self, key: Any) -> Any:
        """The answer ``memo`` holds for ``key``, which it then no longer holds (None where it holds none): an answer
        that another takes over (the System page's index takes its events)."""
        with self._lock(key):
            return self._cache.pop(key, None)

    def holds(self, key: Any) -> bool:
        """Whether ``memo`` holds an answer for ``key`` already."""
        return key in self._cache

    def decodes(self, name: str) -> bool:
        """Whether table ``name`` is decoded whole (``columns``) already, or is being decoded (``prefetch``)."""
        return ("columns", name) in self._cache or name in self._prefetched

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
        names = list(names)
        self._prefetched.update(names)

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

    def step_pieces(self, columns: tuple[str, ...], at_once: int = STEP_PIECE_ROWS,
                    table: str = "programs") -> StepPieces:
        """The programs table (or ``exchanges``) a piece at a time (``StepPieces``): slices of the whole table where
        it is decoded (or being decoded) for another answer, else ``columns`` read from the file ``at_once`` rows at a
        time, each time a pass asks (an answer that needs a few of its columns once, of a long run's 835,200 steps)."""
        if self.decodes(table):
            return StepPieces.of(self.columns(table), at_once)
        return StepPieces.read(self.profile, tuple(c for c in columns if self.profile.has_column(table, c)), at_once,
                               table)

    def step_names(self) -> StepIndex | StepPieces:
        """Where answers look steps' names up (``names_at``, ``categories_at``): the programs' index where the table
        is decoded whole for another answer, else its names a piece at a time (not the whole table decoded for
        them)."""
        return self.step_index() if self.decodes("programs") else self.step_pieces(("ipu", "step", "name"))

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
                # an imported run is not bulk-synchronous: no supersteps to cut (``trace.steps``)
                self._cache["trace"] = _tracegroups.summarise_profile(self.profile, bounds, self.trace_batches,
                                                                      self.trace_progress, cut=not self.imported)
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

    def hand_back(self, tables: bool = False) -> None:
        """Let go of the answers held but the tables decoded whole and the trace's summary (``KEPT``), and of the
        arrays made from those tables (``Columns.let_go``), then hand the pages freed back to the system: the Arrow
        pool's ``release_unused``, glibc's ``malloc_trim`` under the system allocator the CLI runs with. An answer
        let go is made again if asked, from what is kept: nothing is read twice (docs/api.md, "read once").
        ``build_report`` calls it after each section, whose answers are seldom another's: at 10 GB in 4 ranks,
        ``report --section all`` peaked at 406 MiB letting the answers go, against 483 MiB holding them (the few made
        again took 0.4 s), 25 to 60 MiB more without the pages handed back. With ``tables``, the tables decoded
        whole go too, but those a prefetch decoded (``build_report``'s sections of an import, ``one_at_a_time``)."""
        import pyarrow as pa

        with self._locks_guard:
            for key in list(self._cache):
                if isinstance(key, tuple) and key[0] == "columns":
                    if tables and key[1] not in self._prefetched:
                        del self._cache[key]
                    else:
                        self._cache[key].let_go()
                elif key not in KEPT:
                    del self._cache[key]
        pa.default_memory_pool().release_unused()

    def close(self) -> None:
        for thread in self._prefetching:  # it reads the mapped file: unmapping it under a read would crash
            thread.join()
        self._cache.clear()
        self.profile.close()

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r})"
