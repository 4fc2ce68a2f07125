"""The ``Report`` facade: opens a profile, reads each table once, and hands questions to the analyzers.

::

    import popvision_py as pv
    report = pv.open("profile/profile.pop")
    report.summary.figures()          # Summary dataclass
    report.memory.by_tile()           # DataFrame
    report.stages.best_split()        # BestSplit dataclass
    report.trace.timeline(0, 10_000)  # Timeline (level + frame)

Tables are read lazily on first use and cached. The trace is never held whole: it is read once,
row group by row group, and folded into small arrays (``tracescan.summarise``); the Gantt bars and
the timeline's index each make their own pass, over their own columns, when first asked for. Answers are cached too, so asking twice is free. The
analyzers themselves (``summary``, ``memory``, ``liveness``, ``stages``, ``exchange``, ``trace``
modules) are stateless functions; this module only wires them to the data. Column lists and
formulas: docs/api.md and docs/reports.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from popvision_py.analysis import exchange as _exchange
from popvision_py.analysis import liveness as _liveness
from popvision_py.analysis import memory as _memory
from popvision_py.analysis import stages as _stages
from popvision_py.analysis import summary as _summary
from popvision_py.analysis import trace as _trace
from popvision_py.analysis import tracescan as _tracescan
from popvision_py.analysis.tables import TABLE_COLUMNS, Aggregates, Columns, StepIndex, iterations_traced
from popvision_py.errors import OutOfRangeError
from popvision_py.format import Profile, open_profile

T = TypeVar("T")


class Report:
    """An open profile and its reports: ``summary``, ``memory``, ``liveness``, ``stages``, ``exchange``, ``trace``.

    Attributes: ``path``, ``manifest``, ``target``, ``run`` (dicts from the manifest) and
    ``profile`` (the raw ``popvision_py.format.Profile``).
    """

    def __init__(self, source: str | os.PathLike[str] | Profile) -> None:
        self.profile = source if isinstance(source, Profile) else open_profile(source)
        self.path: Path = self.profile.path
        self.manifest: dict[str, Any] = self.profile.manifest
        self.target: dict[str, Any] = self.profile.target
        self.run: dict[str, Any] = self.profile.run
        self._cache: dict[Any, Any] = {}
        self.summary = SummaryReport(self)
        self.memory = MemoryReport(self)
        self.liveness = LivenessReport(self)
        self.stages = StagesReport(self)
        self.exchange = ExchangeReport(self)
        self.trace = TraceReport(self)

    # -- data access (each read once) -----------------------------------------------------

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per Report for ``key``."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def columns(self, name: str) -> Columns:
        """A small table (everything but the trace and tile cycles) as NumPy columns: the columns in
        ``tables.TABLE_COLUMNS``, decoded in one read, once per Report."""
        return self.memo(("columns", name), lambda: Columns(self.profile.read_table(name, TABLE_COLUMNS[name])))

    def table(self, name: str) -> pd.DataFrame:
        """The same table as a pandas DataFrame (converted from ``columns(name)``, not read again)."""
        return self.columns(name).frame()

    def step_index(self) -> StepIndex:
        """Program steps by (ipu, step), for joins on steps."""
        return self.memo("step_index", lambda: StepIndex(self.columns("programs")))

    def trace_batches(self, columns: tuple[str, ...]):
        """The trace's ``columns``, batch by batch (about a row group each), decoded one ahead in a thread."""
        return _tracescan.prefetched(self.profile.iter_batches("trace", columns))

    def trace_summary(self) -> Aggregates:
        """The trace folded into the small arrays every report uses: one streaming pass, once."""
        return self.memo("trace", lambda: _tracescan.summarise(self.trace_batches(_tracescan.SUMMARY_COLUMNS)))

    def iterations(self) -> int:
        return self.memo("iterations", lambda: iterations_traced(self.trace_summary(), self.run))

    def close(self) -> None:
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
            return _summary.figures(r.manifest, trace, r.iterations(), flops, r.memory.by_tile())

        return self._memo("figures", compute)

    def insights(self) -> pd.DataFrame:
        """``[severity, topic, finding, suggestion, effect]``, most severe first."""
        r = self._r

        def compute() -> pd.DataFrame:
            oom = r.memory.out_of_memory()
            breakdown = (r.memory.tile_breakdown(int(np.asarray(oom["ipu"])[0]), int(np.asarray(oom["tile"])[0]))
                         if len(oom) else pd.DataFrame(columns=_memory.TILE_BREAKDOWN_COLUMNS))
            return _summary.insights(
                self.figures(), r.run, r.memory.by_ipu(), oom, breakdown, r.stages.figures(), r.stages.best_split(),
                r.exchange.figures(), r.exchange.by_kind(), r.exchange.costliest(), r.stages.ideal_bubble_pct(2.0),
            )

        return self._memo("insights", compute)


class MemoryReport(_View):
    """Memory per IPU and tile, by category, always-live vs not, out-of-memory tiles, variables."""

    def _tiles(self) -> pd.DataFrame:
        return self._memo("tiles", lambda: _memory.by_tile(self._r.columns("tile_memory"), self._r.target))

    def by_tile(self, ipu: int | None = None) -> pd.DataFrame:
        tiles = self._tiles()
        return tiles if ipu is None else tiles[tiles["ipu"] == ipu].reset_index(drop=True)

    def by_ipu(self) -> pd.DataFrame:
        return self._memo("by_ipu", lambda: _memory.by_ipu(self._tiles(), self._r.target))

    def by_category(self, ipu: int | None = None) -> pd.DataFrame:
        return self._memo(("by_category", ipu), lambda: _memory.by_category(self._r.columns("tile_memory"), ipu))

    def distribution(self) -> pd.DataFrame:
        return self._memo("distribution", lambda: _memory.distribution(self._tiles()))

    def out_of_memory(self) -> pd.DataFrame:
        return self._memo("oom", lambda: _memory.out_of_memory(self._tiles()))

    def largest_variables(self, n: int = 20, ipu: int | None = None) -> pd.DataFrame:
        return _memory.largest_variables(self._r.columns("variables"), n, ipu)

    def tile_breakdown(self, ipu: int, tile: int) -> pd.DataFrame:
        self._check_ipu(ipu)
        return _memory.tile_breakdown(self._r.columns("tile_memory"), self._r.target, ipu, tile)

    def tile_variables(self, ipu: int, tile: int, n: int = 20) -> pd.DataFrame:
        self._check_ipu(ipu)
        return _memory.tile_variables(self._r.columns("variables"), self._r.target, ipu, tile, n)

    def _check_ipu(self, ipu: int) -> None:
        ipus = self.by_ipu()["ipu"].tolist()
        if ipu not in ipus:
            raise OutOfRangeError(f"IPU {ipu} is not in the profile: it has IPUs {', '.join(map(str, ipus))}.")


class LivenessReport(_View):
    """Not-always-live memory over program steps per IPU, the peak step, what is live at a step."""

    def _steps(self) -> pd.DataFrame:
        r = self._r
        return self._memo("steps", lambda: _liveness.by_step(r.columns("liveness"), r.columns("programs"), r.target,
                                                             index=r.step_index()))

    def by_step(self, ipu: int | None = None) -> pd.DataFrame:
        steps = self._steps()
        return steps if ipu is None else steps[steps["ipu"] == ipu].reset_index(drop=True)

    def peaks(self) -> pd.DataFrame:
        return self._memo("peaks", lambda: _liveness.peaks(self._steps()))

    def live_at(self, ipu: int, step: int) -> pd.DataFrame:
        r = self._r
        count = _liveness.step_count(r.columns("liveness"), r.columns("programs"), ipu)
        return _liveness.live_at(r.columns("variables"), ipu, step, count)


class StagesReport(_View):
    """Pipeline stages: time per stage and pass, imbalance, bubble, balanced time, best split."""

    def _costs(self):
        return self._memo("costs", lambda: _stages.costs(self._r.trace_summary(), self._r.run))

    def summary(self) -> pd.DataFrame:
        return self._memo("summary", lambda: _stages.summary(self._costs(), self._r.trace_summary()))

    def figures(self) -> _stages.StageFigures:
        return self._memo("figures", lambda: _stages.figures(self._costs(), self._r.trace_summary()))

    def gantt(self) -> pd.DataFrame:
        r = self._r
        return self._memo("gantt", lambda: _stages.gantt(
            _tracescan.gantt_bars(r.trace_batches(_tracescan.GANTT_COLUMNS), r.trace_summary())))

    def blocks(self) -> pd.DataFrame:
        """Per block: ``[block, stage, fwd_cycles, bwd_cycles, memory_bytes]`` (cycles per micro-batch)."""
        r = self._r
        return self._memo("blocks", lambda: _stages.block_costs(
            self._costs(), r.columns("programs"), r.columns("ops"), r.trace_summary(), r.columns("variables")))

    def best_split(self) -> _stages.BestSplit:
        r = self._r
        return self._memo("best_split", lambda: _stages.best_split(
            self._costs(), self.blocks(), r.memory.by_ipu(), r.target, self.figures().step_cycles))

    def ideal_bubble_pct(self, accumulation_factor: float = 1.0) -> float:
        """The fill-and-flush share of a balanced pipeline with ``factor`` x the micro-batches."""
        c = self._costs()
        n = len(c.stages)
        m = int(round(c.unit_micro_batches * accumulation_factor))
        if n == 0 or m == 0:
            return float("nan")
        import numpy as np

        f, b = np.full(n, c.fwd.mean()), np.full(n, c.bwd.mean())
        model = _stages.pipeline_cycles(f, b, m, c.strategy, c.training)
        busy = m * (f[0] + (b[0] if c.training else 0.0))
        return 100.0 * (1.0 - busy / model) if model > 0 else float("nan")


class ExchangeReport(_View):
    """Exchange, sync and streaming: by kind, IPU-to-IPU matrix, bandwidth, costliest steps."""

    def _done(self) -> _exchange.Executed:
        return self._memo("done", lambda: _exchange.executed(self._r.columns("exchanges"), self._r.trace_summary()))

    def figures(self) -> _exchange.ExchangeFigures:
        return self._memo("figures", lambda: _exchange.figures(self._r.trace_summary()))

    def by_kind(self) -> pd.DataFrame:
        return self._memo("by_kind", lambda: _exchange.by_kind(self._done(), self.figures().total_cycles))

    def matrix(self) -> pd.DataFrame:
        return self._memo("matrix", lambda: _exchange.matrix(self._done()))

    def bandwidth(self) -> pd.DataFrame:
        return self._memo("bandwidth", lambda: _exchange.bandwidth(self.by_kind(), self._r.target))

    def costliest(self, n: int = 10) -> pd.DataFrame:
        return self._memo(("costliest", n), lambda: _exchange.costliest(self._done(), self._r.step_index(), n))


class TraceReport(_View):
    """The execution trace: extent, zoomable timeline, program steps, per-tile cycles."""

    def extent(self) -> tuple[int, int]:
        return self._memo("extent", lambda: _trace.extent(self._r.trace_summary()))

    def _index(self) -> _trace.TimelineIndex:
        return self._memo("index", lambda: _trace.TimelineIndex.from_ipus(
            _tracescan.timeline_arrays(self._r.trace_batches(_tracescan.TIMELINE_COLUMNS))))

    def timeline(self, start_cycle: int | None = None, end_cycle: int | None = None, max_bins: int = 2000,
                 ipus: list[int] | None = None) -> _trace.Timeline:
        return _trace.timeline(self._index(), start_cycle, end_cycle, max_bins, ipus)

    def steps(self, ipu: int | None = None) -> pd.DataFrame:
        return self._memo(("steps", ipu), lambda: _trace.steps(self._r.table("programs"), self._r.trace_summary(), ipu))

    def tile_cycles(self, ipu: int, step: int) -> pd.DataFrame:
        table = self._memo("tile_cycles", lambda: self._r.profile.read_pandas("tile_cycles"))
        return _trace.tile_cycles(table, ipu, step)
