"""The GPU's view a ``Report`` hands out (``report.gpu``): a profile imported from GPU traces asks the
``imported`` room's analyzers (``gpu``, ``gpu_ranks``, ``bound``, ``collectives``, ``streams``, ``stragglers``) for
its answers, cached as ``analysis.views``' views cache theirs (``_View``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.imported import bound as _bound
from popvision_py.analysis.imported import gpu as _gpu
from popvision_py.analysis.imported import gpu_cluster as _gpu_cluster
from popvision_py.analysis.imported import gpu_ranks as _gpu_ranks
from popvision_py.analysis.imported import ranks as _imported
from popvision_py.analysis.imported import streams as _streams
from popvision_py.analysis.imported import stragglers as _stragglers
from popvision_py.analysis.trace import scan as _tracescan
from popvision_py.analysis.imported.gpu import (NO_KERNELS_EMULATED, NO_KERNELS_GPU, NO_KERNELS_IMPORTED,
                                                NO_KERNELS_TABLE)
from popvision_py.analysis.views import _View


class GpuReport(_View):
    """The GPU's own time line of a profile imported from GPU traces (the ``kernels`` table, schema 5):
    popvision's figures within the profiled steps (``by_rank``, ``by_stream``, ``kernels_by_name``) and
    Holistic Trace Analysis 0.5's, over the kernels HTA keeps (``temporal``, ``kernel_types``,
    ``overlap``, ``top_kernels``, ``launch_summary``, ``idle_breakdown``): ``imported.gpu``; and beyond
    HTA's (``imported.bound``): what bound each step, the kernels worth a look, the annotations' phases.
    ``missing()`` is the one sentence shown instead where the profile has no kernel."""

    def missing(self) -> str:
        """"" where the profile holds GPU kernels; else why it holds none (an older schema, an emulated run,
        a CPU trace)."""
        r = self._r
        if not r.imported:
            return NO_KERNELS_EMULATED
        if "kernels" not in r.profile.tables:
            return NO_KERNELS_TABLE
        if r.profile.num_rows("kernels"):
            return ""
        return NO_KERNELS_GPU if r.target.get("arch") == "gpu" else NO_KERNELS_IMPORTED

    def _ranks(self) -> np.ndarray:
        """Each IPU's rank (an imported profile's IPU is its position)."""
        return _imported.rank_numbers(self._r.run, int(self._r.target.get("num_ipus", 1)))

    def kernels(self) -> _gpu.Kernels:
        """Every kernel, copy and set of the profile (``gpu.Kernels``), the table read once (none before schema 5)."""
        r = self._r

        def compute() -> _gpu.Kernels:
            ranks = self._ranks()
            if "kernels" not in r.profile.tables:  # an older schema: no kernel, every answer empty
                return _gpu.Kernels.build([], [], [], [], [], [], ranks=ranks)
            return _gpu.Kernels.from_columns(r.columns("kernels"), ranks)

        return self._memo("kernels", compute)

    def window(self) -> tuple[np.ndarray, np.ndarray]:
        """Each rank's profiled steps, in the kernels' ns: the imported trace's extent (its first profiler
        step's start to its last one's end, over every rank; the whole trace without steps), from the trace's
        footer where it was verified (no pass over the trace: 117 MiB at 10 GB in 4 ranks), else its summary."""
        def compute() -> tuple[np.ndarray, np.ndarray]:
            start, end = _tracescan.stated_extent(self._r.profile) or self._r.trace.extent()
            n = int(self._r.target.get("num_ipus", 1))
            return np.full(n, start, np.int64), np.full(n, end, np.int64)

        return self._memo("window", compute)

    def last_step_starts(self) -> np.ndarray | None:
        """Each rank's last ``ProfilerStep`` start (``bound.last_step_starts``), from the ranks' CPU timelines the
        import writes beside the profile (``system/rank-R.pvti.parquet``); None without them, or with fewer
        than two steps: HTA's figures then take every kernel."""
        return self._timeline()[1]

    def streams(self) -> _streams.StreamIndex:
        """Each rank's streams as lanes, indexed for zoom windows (``streams.StreamIndex``)."""
        def compute() -> _streams.StreamIndex:
            r = self._r
            ranks = self._ranks()
            if "kernels" not in r.profile.tables:  # an older schema: no kernel, no lane
                return _streams.StreamIndex.of(_gpu.Kernels.build([], [], [], [], [], [], ranks=ranks))
            return _streams.StreamIndex.read(r.profile, ranks)

        return self._memo("streams", compute)

    def stream_window(self, start_ns: int | None = None, end_ns: int | None = None, ipus: list[int] | None = None,
                      max_kernels: int = _streams.MAX_KERNELS,
                      max_bins: int = _streams.MAX_BINS) -> _streams.StreamWindow:
        """The streams of ``ipus`` (every rank's for None) between two times (ns, the kernels' extent by default),
        each kernel or, past ``max_kernels``, each kind's occupancy in bins (``streams.window``)."""
        return _streams.window(self.streams(), start_ns, end_ns, ipus, max_kernels, max_bins)

    def hta_kernels(self) -> _gpu.Kernels:
        """The kernels HTA 0.5 analyses (``gpu.hta_selection``): those launched before each rank's last step."""
        return self._memo("hta_kernels", lambda: self.kernels().take(
            _gpu.hta_selection(self.kernels(), self.last_step_starts())))

    def _figure(self, name: str, *args: Any, alone: bool = False) -> Table:  # a rank at a time, cached here
        cluster = self._r.cluster  # a Dask client: the figures made by its workers (``gpu_cluster``)
        elsewhere = None if cluster is None else functools.partial(_gpu_cluster.figures, cluster)
        return _gpu_ranks.figure(self._memo, self._r.profile, self.window, self.last_step_starts, self.spans, name,
                                 args, alone, elsewhere)  # (``gpu_ranks.figure``)

    def by_rank(self) -> pd.DataFrame:
        return self._by_rank().frame()

    def _by_rank(self) -> Table:
        return self._figure("by_rank")

    def by_stream(self) -> pd.DataFrame:
        return self._by_stream().frame()

    def _by_stream(self) -> Table:
        return self._figure("by_stream")

    def kernels_by_name(self, n: int | None = 10) -> pd.DataFrame:
        return self._kernels_by_name(n).frame()

    def _kernels_by_name(self, n: int | None = 10) -> Table:
        return self._figure("kernels_by_name", n)

    def collectives(self) -> pd.DataFrame:
        """Each rank's collectives by process group within the profiled steps (``collectives.COLUMNS``)."""
        return self._collectives().frame()

    def _collectives(self) -> Table:
        """Made alone unless every figure is made already: the Exchange page's table, opened before the GPU page, is
        one read of the kernels, not every figure's (10 GB in 4 ranks: 1.2 s, not 13)."""
        return self._figure("collectives", alone=not self._holds("figures"))

    def temporal(self) -> pd.DataFrame:
        return self._temporal().frame()

    def _temporal(self) -> Table:
        return self._figure("temporal")

    def kernel_types(self) -> pd.DataFrame:
        return self._kernel_types().frame()

    def _kernel_types(self) -> Table:
        return self._figure("kernel_types")

    def kernel_types_by_rank(self) -> pd.DataFrame:
        return self._figure("kernel_types_by_rank").frame()

    def overlap(self) -> pd.DataFrame:
        return self._overlap().frame()

    def _overlap(self) -> Table:
        return self._figure("overlap")

    def top_kernels(self, num_kernels: int = 10, duration_ratio: float = 0.8) -> pd.DataFrame:
        return self._top_kernels(num_kernels, duration_ratio).frame()

    def _top_kernels(self, num_kernels: int = 10, duration_ratio: float = 0.8) -> Table:
        return self._figure("top_kernels", num_kernels, duration_ratio)

    def launches(self) -> pd.DataFrame:
        """Each kernel's launch (``gpu.LAUNCH_COLUMNS``), of the kernels HTA analyses."""
        return self._figure("launches").frame()

    def launch_summary(self) -> pd.DataFrame:
        return self._launch_summary().frame()

    def _launch_summary(self) -> Table:
        return self._figure("launch_summary")

    def idle_breakdown(self, kernel_wait_ns: int = _gpu.KERNEL_WAIT_NS) -> pd.DataFrame:
        return self._idle_breakdown(kernel_wait_ns).frame()

    def _idle_breakdown(self, kernel_wait_ns: int = _gpu.KERNEL_WAIT_NS) -> Table:
        return self._figure("idle_breakdown", kernel_wait_ns)

    def spans(self) -> _bound.TraceSpans:
        """The steps, DataLoader fetches and annotations of the ranks' CPU timelines (``system/``), if any."""
        return self._timeline()[0]

    def _timeline(self) -> tuple[_bound.TraceSpans, np.ndarray | None]:
        """``spans`` and ``last_step_starts`` from one read of the rows of the CPU timelines they take
        (``bound.TIMELINE_ROWS``), those rows let go once both are made."""
        r, origin = self._r, (self._r.run.get("import") or {}).get("origin_ns")

        def compute() -> tuple[_bound.TraceSpans, np.ndarray | None]:
            ranks = self._ranks()
            events = r.system.some_events(_bound.TIMELINE_ROWS) if r.system.files() else None
            last = (_bound.last_step_starts(_bound.step_starts(events, ranks), len(ranks)) if events is not None
                    else None)
            return _bound.TraceSpans.from_timeline(events, ranks, origin), last

        return self._memo("timeline", compute)

    def bounds(self) -> pd.DataFrame:
        return self._bounds().frame()

    def _bounds(self) -> Table:
        return self._figure("bounds")

    def step_summary(self) -> pd.DataFrame:
        """Each rank's steps of ``bounds`` in a row (``bound.step_summary``): their verdicts, medians and slowest."""
        return self._step_summary().frame()

    def _step_summary(self) -> Table:
        return self._memo("step_summary", lambda: _bound.step_summary(self._bounds()))

    def worth_a_look(self) -> pd.DataFrame:
        return self._worth_a_look().frame()

    def _worth_a_look(self) -> Table:
        return self._figure("worth_a_look")

    def phases(self, n: int | None = None) -> pd.DataFrame:
        return self._phases(n).frame()

    def _phases(self, n: int | None = None) -> Table:
        return self._figure("phases", n)

    def phase_overlaps(self) -> pd.DataFrame:
        return self._phase_overlaps().frame()

    def arrivals(self) -> pd.DataFrame:
        """Each rank's arrival at each collective of each step, and its compute before it
        (``stragglers.ARRIVAL_COLUMNS``)."""
        return self._arrivals().frame()

    def _arrivals(self) -> Table:
        return self._figure("arrivals")

    def stragglers(self) -> pd.DataFrame:
        """Per step, the ranks that reach its last collective late, and the step without them
        (``stragglers.STRAGGLER_COLUMNS``)."""
        return self._stragglers().frame()

    def _stragglers(self) -> Table:
        return self._memo("stragglers", lambda: _stragglers.stragglers(self._arrivals()))

    def _phase_overlaps(self) -> Table:
        return self._figure("phase_overlaps")
