"""The views a ``Report`` hands out (``report.summary``, ``report.memory``, ...): each asks the stateless
analyzers (``summary``, ``memory``, ``liveness``, ``stages``, ``exchange``, ``trace``, ``programs``,
``system`` modules) for one report's answers over the data its ``Report`` reads once, and caches them
there (``Report.memo``); the GPU's view is ``analysis.gpu_view``. A view's public methods return DataFrames
and dataclasses; its ``_name`` twins return ``Table``s, which ``Report.answer("view.name")`` hands to the
renderers.

The facade, its cache and its reading threads are ``analysis.report``; the views only know the
report they were given (``_View(report)``), so this module does not import it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from popvision_py.analysis.ipu import exchange as _exchange
from popvision_py.analysis.findings import fixes as _fixes
from popvision_py.analysis.host import input_wait as _host
from popvision_py.analysis.imported import ranks as _imported
from popvision_py.analysis.ipu import liveness as _liveness
from popvision_py.analysis.ipu import memory as _memory
from popvision_py.analysis.ipu import memory_depth as _memory_depth
from popvision_py.analysis.ipu import programs as _programs
from popvision_py.analysis.pipeline import stages as _stages
from popvision_py.analysis.findings import summary as _summary
from popvision_py.analysis.host import system as _system
from popvision_py.analysis.host import system_figures as _system_figures
from popvision_py.analysis.trace import timeline as _trace
from popvision_py.analysis.trace import levels as _trace_levels
from popvision_py.analysis.pipeline import whatif as _whatif
from popvision_py.analysis.common.tables import TABLE_COLUMNS, Table
from popvision_py.errors import OutOfRangeError
from popvision_py.format import system as _system_files

T = TypeVar("T")


class _View:
    def __init__(self, report: Any) -> None:  # an analysis.report.Report
        self._r = report

    def _memo(self, key: Any, compute: Callable[[], T]) -> T:
        return self._r.memo((type(self).__name__, key), compute)

    def _holds(self, key: Any) -> bool:
        """Whether ``_memo`` holds ``key``'s answer already."""
        return self._r.holds((type(self).__name__, key))


class SummaryReport(_View):
    """Target, model, configuration, time per step, throughput, FLOP utilisation; insights."""

    def figures(self) -> _summary.Summary:
        r = self._r

        def compute() -> _summary.Summary:
            trace, ops = r.trace_summary(), r.columns("ops")
            # no op, no FLOPs: the programs table is not decoded for them (an import's: 835k rows, 51 MiB at 10 GB)
            flops = _summary.total_flops(ops, r.columns("programs"), trace) if len(ops) else 0
            return _summary.figures(r.manifest, trace, r.iterations(), flops, r.memory._tiles())

        return self._memo("figures", compute)

    def insights(self) -> pd.DataFrame:
        """``[severity, topic, finding, suggestion, effect, command]``, most severe first; ``command`` is the
        ``popvision run`` command that applies the suggestion ("" where the finding has no runnable fix).
        Every fix is one the report's planner accepts; a Report opened without a planner suggests none
        (each finding comes alone)."""
        return self._insights().frame()

    def _insights(self) -> Table:
        return self._findings()[0]

    def fixes(self) -> list[_fixes.Fix | None]:
        """The ``Fix`` of each row of ``insights()`` (None where the finding has none, and on every row
        of a Report without a planner): its changes, predicted figures and tag, which ``popvision report
        --verify`` runs."""
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
                tile_memory=r.columns("tile_memory"), tiles=r.memory._tiles(), blocks=r.stages._blocks(),
                costs=r.stages._costs(),
                stage_figures=r.stages.figures(), split=r.stages.best_split(), exchange=r.exchange.figures(),
                kinds=r.exchange._by_kind(), costliest=r.exchange._costliest(10), host=r.exchange.host_input(),
                precision=r.insights.precision_fixes(self.figures().worst_tile_bytes), planner=r.planner))

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
        """Memory in depth: tiles by dominant category, a variable's footprint, one tile's tabs, worst tiles
        over steps."""
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
        return self._memo("by_step", lambda: _liveness.by_step(r.columns("liveness"), None, r.target,
                                                               index=r.step_names()))

    def peaks(self) -> pd.DataFrame:
        return self._peaks().frame()

    def _peaks(self) -> Table:
        """From the tables where they are decoded whole anyway (a report of every section) or both small (each table
        read once; ``liveness.decoded_peaks``, the peak steps' names only), else read a batch at a time
        (``liveness.streamed_peaks``): the summary's insights and the dashboard's first page need the peaks, not
        every step of a long run (nor every program step: an import's hidden transfers are program steps without
        liveness, 99% of them at 1,600 layers)."""
        r = self._r

        def compute() -> Table:
            profile = r.profile
            if not {"liveness", "programs"} <= set(profile.tables):
                return _liveness.peaks(self._by_step())
            if (r.decodes("liveness") and r.decodes("programs")) or max(
                    profile.num_rows(t) for t in ("liveness", "programs")) <= _liveness.STREAM_ROWS:
                return _liveness.decoded_peaks(r.columns("liveness"), r.step_index())
            return _liveness.streamed_peaks(
                profile.iter_batches("liveness", ["ipu", "step", "always_live_bytes", "not_always_live_bytes"]),
                profile.iter_batches("programs", ["ipu", "step", "name"]))

        return self._memo("peaks", compute)

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
            frame = _stages.gantt(r._cache["gantt_bars"])
            if r.trace_summary().first_bars:  # its first iterations' bars only
                frame.attrs["iterations"] = r.iterations()
            return frame

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

    def _totals(self, top: int = _exchange.COSTLIEST_TOP) -> _exchange.Totals:
        """Every transfer's figures over the trace summed, the exchanges a piece at a time where no other answer
        holds them whole (``exchange.totals``), the ``top`` costliest kept (``COSTLIEST_TOP`` at least)."""
        top = max(top, _exchange.COSTLIEST_TOP)
        return self._memo(("totals", top), lambda: _exchange.totals(
            self._r.step_pieces(TABLE_COLUMNS["exchanges"], table="exchanges"), self._r.trace_summary(),
            self._r.step_pieces(("ipu", "step", "cycles")), top))

    def figures(self) -> _exchange.ExchangeFigures:
        return self._memo("figures", lambda: _exchange.figures(self._r.trace_summary()))

    def by_kind(self) -> pd.DataFrame:
        return self._by_kind().frame()

    def _by_kind(self) -> Table:
        return self._memo("by_kind", lambda: _exchange.by_kind(self._totals(), self.figures().total_cycles))

    def matrix(self) -> pd.DataFrame:
        return self._matrix().frame()

    def _matrix(self) -> Table:
        return self._memo("matrix", lambda: _exchange.matrix(self._totals()))

    def bandwidth(self) -> pd.DataFrame:
        return self._bandwidth().frame()

    def _bandwidth(self) -> Table:
        return self._memo("bandwidth", lambda: _exchange.bandwidth(self._by_kind(), self._r.target,
                                                                  sizes_recorded=not self._r.imported))

    def communication(self) -> pd.DataFrame:
        """Per rank (IPU): compute, exposed communication, communication hidden behind compute, a GPU's copies and
        sets, idle (``imported.COMM_COLUMNS``)."""
        return self._communication().frame()

    def _communication(self) -> Table:
        return self._memo("communication", lambda: _imported.communication(
            self._r.trace_summary(), lambda: self._r.columns("exchanges"), self._r.run))

    def costliest(self, n: int = 10) -> pd.DataFrame:
        return self._costliest(n).frame()

    def host_input(self) -> _host.HostInput:
        """How long the IPUs wait for the host's data loaders; ``host_bound`` from HOST_BOUND_PCT of the run."""
        return self._r.memo("host_input", lambda: _host.host_input(self._r.columns("programs"), self._r.trace_summary(),
                                                                   self._r.run))

    def _costliest(self, n: int = 10) -> Table:
        return self._memo(("costliest", n), lambda: _exchange.costliest(self._totals(n), self._r.step_names(), n))


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
    or those given), where their time went, and the System page's zoomable window.

    "System" here is PopVision System Analyser's word, the host processes' side of a run; the IPU
    system a run is planned on (``popvision run --system IPU-POD16``, the manifest's ``target.system``)
    is the other meaning, which docs/architecture.md's glossary sets apart."""

    def __init__(self, report: Any, given: list[str | os.PathLike[str]] | None) -> None:
        super().__init__(report)
        self._given = given

    def files(self) -> list[Path]:
        """The system timeline files (``format.system.find_system_files``); empty when there are none."""
        return self._memo("files", lambda: _system_files.find_system_files(self._r.path, self._given))

    def missing(self) -> str:
        """The one line shown instead when there are no files: how to record them."""
        return _system_files.how_to_record(self._r.path)

    def events(self) -> _system.Events:
        """Every file read and checked, as columns (``system.load``), held until the index takes them."""
        return self._memo("events", self.events_read)

    def some_events(self, keep: dict[str, Callable[[str], bool]]) -> _system.Events:
        """The events a view reads a few of (``system.load_files``' ``keep``: a string column's name, a test of its
        words): every event where they are read already, else only those rows, each file's others let go as it
        is read, and not kept here (the view keeps what it makes of them)."""
        return self.events() if self._holds("events") else _system.load_files(self.files(), keep)

    def processes(self) -> pd.DataFrame:
        return self._processes().frame()

    def _processes(self) -> Table:
        return self._memo("processes", lambda: self._figure("processes"))

    def by_name(self) -> pd.DataFrame:
        return self._by_name().frame()

    def _by_name(self) -> Table:
        return self._memo("by_name", lambda: self._figure("by_name"))

    def counters(self) -> pd.DataFrame:
        return self._counters().frame()

    def _counters(self) -> Table:
        return self._memo("counters", lambda: self._figure("counters"))

    def _figure(self, name: str) -> Table:
        """``processes``, ``by_name`` or ``counters``: of the events where they are held (the dashboard's System
        page), else the three of them a run of files at a time (``system_figures.figures``), or of every event where
        a process's events are in two runs."""
        by_files = None if self._holds("events") else self._memo(
            "by_files", lambda: _system_figures.figures(self.files(), self._r.imported))
        return (by_files or _system_figures.of_events(self.events(), self._r.imported))[name]

    def words(self) -> _system.Events:
        """The events' processes, rows and words without the events (``Events.words_only``): what the System page
        names its rows by, kept apart from the events, which the index takes."""
        return self._memo("words", lambda: self.events().words_only())

    def index(self) -> _system.SystemIndex:
        """The System page's index (``system.SystemIndex``). It takes the events held here (read first where they
        are not), which are then no longer held: the index holds them in its own order, and what reads every event
        after it reads the files again (``by_name`` and the others a run of files at a time, ``some_events`` the
        rows it keeps)."""
        def compute() -> _system.SystemIndex:
            self.words(), self.extent()  # made of the events before the index takes them
            held = self._r.forget((type(self).__name__, "events"))  # None where none are held (events of no row are)
            return _system.SystemIndex([self.events_read() if held is None else held])

        return self._memo("index", compute)

    def events_read(self) -> _system.Events:
        """Every file read and checked, as columns, not held here (``system.load_files``)."""
        return _system.load_files(self.files())

    def extent(self) -> tuple[int, int]:
        """The run as a window [start, end) holding every event, ns since 1970: its first start and 1 ns past
        its last end; (0, 1) without any. From the events alone: past a few processes the page draws a heat map
        of them, which needs no ``index``."""
        def compute() -> tuple[int, int]:
            start, end = self.events().extent
            return int(start), int(end) + 1

        return self._memo("extent", compute)

    def window(self, start_ns: int | None = None, end_ns: int | None = None, max_events: int = _system.MAX_EVENTS,
               max_bins: int = _system.MAX_BINS) -> _system.SystemWindow:
        """The events between two times at a level of detail a figure can draw (``system.window``)."""
        return _system.window(self.index(), start_ns, end_ns, max_events, max_bins)
