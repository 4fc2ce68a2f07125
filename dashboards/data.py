"""The dashboard's one way to the data: a cached Report per profile key, opened as ``popvision_py.open`` opens it.

The profiles are fixed when the app is built (``Profiles(paths)``): the first is ``"a"``, the second
``"b"``. Pages and callbacks name profiles only by those keys, so nothing a browser sends ever
becomes a file path; an unknown key falls back to ``"a"``.

Each app keeps its ``Profiles`` in its Flask server's ``extensions``; ``current()`` finds the one of
the app serving the request (or, outside a request, e.g. in tests, the one built last).

A ``Profiles`` may also hold a tune result (``popvision tune -o tune.parquet``, read once), a
*planner*, the planner's rules the insights' fixes are checked against (``analysis.fixes.Planner``),
and a *runner*: the function that emulates a run's ``RunRequest`` fields into a profile; the CLI
hands in both (the dashboard never imports the engine). Without a planner the Summary page lists
each finding alone, with no fix to copy or verify. The Summary page's "Verify" buttons and the What-if
page's "Emulate and compare" run through it into ``emulated_dir`` (a temporary folder unless given).
A browser names a candidate by its row of the tune result, a fix by its row of the insights: never
a path or a request.

``ranges(report)`` is the sensitivity pass a profile's manifest carries (``run.prediction``): the
throughput's and the worst tile's ranges, the fit verdict and their drivers; None for a profile
written without it, whose pages show the central figures alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flask
import numpy as np

from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import IPUS, Naming
from popvision_py.analysis.imported import ranks as imported_ranks
from popvision_py.analysis.trace.scan import SUMMARY_COLUMNS
from popvision_py.format.schema import FIT_VERDICTS, PHASES, Driver

if TYPE_CHECKING:
    from popvision_py.analysis.findings.fixes import Planner

KEYS = ("a", "b")
EXTENSION = "popvision_profiles"


def served_profiles(profile: str, profile_b: str | None = None) -> list[str]:
    """The profiles `popvision dashboard PROFILE [PROFILE_B]` serves: PROFILE and PROFILE_B, each a
    profile.pop or a run's folder (its first profile); a poprun run's folder alone serves its first
    instance, and its second beside it when their summary figures differ. A path that holds no profile
    is the reader's one sentence (a ProfileError)."""
    from popvision_py.analysis.host.instances import differences
    from popvision_py.analysis.report import Report
    from popvision_py.format.runs import run_profiles

    runs = run_profiles(profile)
    if profile_b is not None:
        return [str(runs[0][1]), str(run_profiles(profile_b)[0][1])]
    if len(runs) < 2:
        return [str(runs[0][1])]
    with Report(runs[0][1]) as first, Report(runs[1][1]) as second:
        differ = len(differences([runs[0][0], runs[1][0]], [first.summary.figures(), second.summary.figures()]))
    return [str(runs[0][1])] + ([str(runs[1][1])] if differ else [])


class Profiles:
    """The profiles one dashboard serves, opened lazily once each and shared by every request."""

    def __init__(self, paths: list[str], tune: str | Path | None = None,
                 runner: Callable[[dict[str, Any], Path], None] | None = None,
                 emulated_dir: str | Path | None = None, system: list[str] | None = None,
                 planner: Planner | None = None, cluster: Any = None) -> None:
        if not 1 <= len(paths) <= len(KEYS):
            raise ValueError("The dashboard shows one profile, or two to compare.")
        self.paths: dict[str, Path] = {key: Path(path) for key, path in zip(KEYS, paths)}
        self.system = list(system) if system else None  # --system: the timelines every profile's System page shows
        self.tune_path = Path(tune) if tune is not None else None
        self.runner = runner
        self.planner = planner
        self.cluster = cluster  # --scheduler: a Dask client whose workers make the GPU figures (``Report.cluster``)
        self._emulated_dir = Path(emulated_dir) if emulated_dir is not None else None
        self._tune: Any = None
        self._reports: dict[str, Any] = {}
        self._comparison: Any = None
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()  # one emulation at a time: it takes the machine's memory and a core
        small_pages()

    def tune(self) -> tuple[Any, dict[str, Any]]:
        """The tune result's rows and metadata (``format.tunefile.read_tune``), read once; LookupError without one."""
        if self.tune_path is None:
            raise LookupError("No tune result is served: start the dashboard with --tune tune.parquet.")
        if self._tune is None:
            from popvision_py.format.tunefile import read_tune

            with self._lock:
                if self._tune is None:
                    self._tune = read_tune(self.tune_path)
        return self._tune

    @property
    def emulated_dir(self) -> Path:
        """Where emulated profiles go: the folder given, or a temporary one made on first use."""
        if self._emulated_dir is None:
            with self._lock:
                if self._emulated_dir is None:
                    self._emulated_dir = Path(tempfile.mkdtemp(prefix="popvision-dashboard-"))
        return self._emulated_dir

    def emulate(self, request: dict[str, Any], name: str) -> Path:
        """``request`` (RunRequest fields) emulated into ``emulated_dir/NAME-HASH/profile.pop``, once per request
        (a profile already there is reused); PopvisionError when the run cannot be made."""
        if self.runner is None:
            raise LookupError("This dashboard was started without the emulator (popvision dashboard "
                              "starts it with one).")
        digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()[:12]
        path = self.emulated_dir / f"{name}-{digest}" / "profile.pop"
        with self._run_lock:
            if not path.is_file():
                self.runner(request, path)
        return path

    @property
    def keys(self) -> list[str]:
        return list(self.paths)

    @property
    def comparing(self) -> bool:
        return len(self.paths) == 2

    def key(self, key: str | None) -> str:
        """``key`` if it names a served profile, else ``"a"``: browser input is never trusted."""
        return key if key in self.paths else KEYS[0]

    def report(self, key: str | None = None) -> Any:
        """The Report of profile ``key`` (opened on first use, then cached)."""
        key = self.key(key)
        report = self._reports.get(key)
        if report is None:
            with self._lock:
                report = self._reports.get(key)
                if report is None:
                    from popvision_py.analysis.report import Report

                    report = Report(self.paths[key], self.system, self.planner)
                    report.cluster = self.cluster
                    self._reports[key] = report
        return report

    def comparison(self) -> Any:
        """The ``Comparison`` of profiles a and b (cached); only when two profiles are served."""
        if not self.comparing:
            raise LookupError("Only one profile is served: there is nothing to compare.")
        if self._comparison is None:
            with self._lock:
                if self._comparison is None:
                    from popvision_py.analysis.compare import Comparison

                    self._comparison = Comparison(self.report("a"), self.report("b"))
        return self._comparison

    def label(self, key: str) -> str:
        """A short name for profile ``key``: the model and strategy from its manifest, and the file."""
        report = self.report(key)
        run = report.run
        name = self.paths[key].name
        if name == "profile.pop" and self.paths[key].parent.name:
            name = f"{self.paths[key].parent.name}/{name}"
        mode = "" if run.get("mode", "training") == "training" else f" {run['mode']}"
        if report.imported:  # the schedule PyTorch ran, not the strategy the import maps it to
            schedule = (run.get("import") or {}).get("schedule") or run.get("strategy", "")
            return f"{key.upper()} · {run.get('model', '?')} {schedule}, PyTorch trace ({name})"
        return f"{key.upper()} · {run.get('model', '?')} {run.get('strategy', '')}{mode} ({name})"

    def check(self) -> None:
        """Read every table of every profile through once, as the pages will; raises what a page would hit.

        Opening checks the container, manifest and schema; this decodes the data too, so page
        checksums (and every check the reader makes as it reads) pass before any page is served.
        The trace is read by the pass that gives its summary (cached: the first page needs it), so
        checking it costs the first page nothing; any column that pass skips is read too.
        """
        for key in self.keys:
            report = self.report(key)
            profile = report.profile
            for table in profile.tables:
                if table == "trace_levels":  # read as the zoom reads it, a row group at a time
                    for _ in profile.iter_batches(table):
                        pass
                elif table != "trace":
                    profile.read_table(table)
            report.scan_trace()
            scanned = set(SUMMARY_COLUMNS)
            rest = [field.name for field in profile.metadata("trace").schema.to_arrow_schema()
                    if field.name not in scanned]
            for _ in profile.iter_batches("trace", rest) if rest else ():
                pass
            if report.system.files():  # the System page's files: read and checked (one sentence if bad)
                report.system.events()

    def warm(self) -> None:
        """Open every profile and ask for what the pages show, so that first clicks are served from cache.

        The analysis caches its answers per Report (thread-safe: a request asking for an answer
        being computed waits for it rather than computing it again); this only calls it early (the
        CLI does so in a background thread while the server starts). First the trace's summary,
        then what the first page shows while another thread reads the trace's levels of detail
        (``trace.levels()``: the profile's small table, or for a profile written before them one
        fold over four columns) and merges the Gantt bars; then the whole run's timeline and the
        Operations page's iteration of the trace. Nothing here holds the trace's rows: the
        execution trace reads a zoomed-in window's row groups when it is asked for, so the
        process's memory does not grow with the trace. An error in the other thread is raised here.
        """
        with ThreadPoolExecutor(len(self.keys), thread_name_prefix="popvision-warm") as pool:
            pending = []
            for key in self.keys:
                report = self.report(key)
                report.trace_summary()
                pending.append(pool.submit(_levels_and_bars, report))
                report.summary.figures()
                report.summary.insights()
                report.exchange.figures()
                report.memory.by_ipu()
            if self.comparing:
                self.comparison()
            for done in pending:
                done.result()
        for key in self.keys:
            report = self.report(key)
            report.trace.timeline()
            report.stages.gantt()
            report.operations.window_index()  # the Operations page's iteration of the trace: a row group or two
            if report.system.files():  # the System page's first draw: past MANY_RANKS processes a heat map of the
                # events, else their time lines, which need the index (at 4,096 ranks 32,768 groups: 3 s, 40 MiB)
                if len(report.system.words().processes) <= MANY_RANKS:
                    report.system.index()


def _levels_and_bars(report: Any) -> None:
    report.scan_trace(gantt=True)
    report.trace.levels()


def small_pages() -> bool:
    """Have NumPy leave its arrays on the kernel's 4 KiB pages (no ``madvise(MADV_HUGEPAGE)``) in this process,
    unless ``NUMPY_MADVISE_HUGEPAGE`` says otherwise; returns whether NumPy still asks for huge pages.

    A window of the execution trace is indexed at about 26 bytes of fresh memory per row read (at
    most ``trace_levels.RAW_ROWS`` rows), and on a virtual machine whose free huge pages go back to the
    host, each first touch of a 2 MiB page is paid again there: measured on this project's 2-core
    VM, the warm-up at 50M rows took 5.0 s with NumPy's huge pages against 3.2 s without
    (docs/performance.md, "Issue 26: the last three rows"). Set ``NUMPY_MADVISE_HUGEPAGE=1`` to keep them.
    """
    core = getattr(np, "_core", None) or getattr(np, "core", None)  # NumPy 2, NumPy 1
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:  # a NumPy without the switch
        return False
    chosen = "NUMPY_MADVISE_HUGEPAGE" in os.environ  # the user's choice, which NumPy applied at its import
    on = bool(switch(False))
    if chosen:
        switch(on)
    return on and chosen


_last: Profiles | None = None


def install(server: flask.Flask, profiles: Profiles) -> None:
    """Attach ``profiles`` to an app's Flask server."""
    global _last
    server.extensions[EXTENSION] = profiles
    _last = profiles


def current() -> Profiles:
    """The Profiles of the app serving this request (outside a request: the app built last)."""
    if flask.has_app_context() and EXTENSION in flask.current_app.extensions:
        return flask.current_app.extensions[EXTENSION]
    if _last is None:
        raise LookupError("No dashboard app has been built: call dashboards.app.create_app(paths) first.")
    return _last


def naming(report: Any) -> Naming:
    """How the pages name ``report``'s devices and time: IPUs and cycles, or for a profile imported from
    PyTorch profiler traces (``popvision import``) ranks and ns, each IPU its rank (``run.import.ranks``), and
    for a GPU trace's its GPU's copies and sets."""
    if not getattr(report, "imported", False):
        return IPUS
    return Naming(tuple(imported_ranks.ranks_of(report).tolist()), gpu=report.target.get("arch") == "gpu")


def pipelined(report: Any) -> bool:
    """Whether a profile ran a pipeline: an IPU profile's stages always do; an imported trace's when it ran one
    (GPipe, 1F1B, ...), not data parallelism (DDP, FSDP), where each rank runs the whole model."""
    return not getattr(report, "imported", False) or imported_ranks.pipelined(report.run)


def capacity_known(report: Any) -> bool:
    """Whether the memory capacity is the device's: an imported CPU trace has none (the import then takes
    the largest rank's peak, and says so among what it did not find)."""
    return imported_ranks.capacity_known(report.run) if getattr(report, "imported", False) else True


def phase_shares(report: Any) -> dict[str, float]:
    """Share of IPU time in each phase, in %, from ``report.exchange.figures()``."""
    time = report.exchange.figures()
    return {phase: float(getattr(time, f"{phase}_pct")) for phase in PHASES}


@dataclass(frozen=True)
class Ranges:
    """The sensitivity pass a profile carries (its manifest's ``run.prediction``, engine/prediction.py):
    the throughput's and the worst tile's range at the ends of the assumptions, the fit verdict, and the
    assumptions that drive each range, largest effect first."""

    throughput_range: tuple[float, float]  # samples/s
    worst_tile_pct_range: tuple[float, float]  # % of a tile
    fit_verdict: str  # fits, does not fit, borderline
    throughput_drivers: tuple[Driver, ...] = ()
    worst_tile_drivers: tuple[Driver, ...] = ()
    pinned: tuple[str, ...] = ()  # assumptions given with --assume: known, so out of the ranges
    pin_down: str | None = None  # the assumption to measure when the throughput range is wider than ±25%


def ranges(report: Any) -> Ranges | None:
    """The ranges of ``report``'s run, or None for a profile written without them (``popvision run
    --no-ranges``, or before popvision gave ranges) or whose ``prediction`` is not one popvision writes."""
    found = report.run.get("prediction")
    if not isinstance(found, dict):
        return None
    try:
        throughput = _pair(found["throughput_range"])
        tile = _pair(found["worst_tile_pct_range"])
        verdict = str(found["fit_verdict"])
        if verdict not in FIT_VERDICTS:
            return None
        pin_down = found.get("pin_down")
        return Ranges(throughput, tile, verdict,
                      throughput_drivers=_drivers(found.get("throughput_range_drivers")),
                      worst_tile_drivers=_drivers(found.get("worst_tile_range_drivers")),
                      pinned=tuple(str(name) for name in found.get("pinned_assumptions") or ()),
                      pin_down=str(pin_down) if pin_down else None)
    except (KeyError, TypeError, ValueError):
        return None


def _pair(value: Any) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("a range end is not a number")
    return low, high


def _drivers(value: Any) -> tuple[Driver, ...]:
    return tuple(Driver(str(d["name"]), float(d["value"]), float(d["low"]), float(d["high"]), float(d["at_low"]),
                        float(d["at_high"])) for d in value or ())


def open_profile(path: str | Path) -> Any:
    """A Report of a profile the dashboard emulated, opened as the served ones are (the caller closes it)."""
    from popvision_py.analysis.report import Report

    return Report(path, planner=current().planner)


def has_kernels(report: Any) -> bool:
    """A profile imported from GPU traces whose ``kernels`` table holds a kernel: the GPU page's to show."""
    return bool(report.imported) and not report.gpu.missing()


def idle_reason(report: Any) -> str:
    """What an imported run's idle time is, in words true for the run: on a GPU trace no kernel runs on the GPU
    (whatever the CPU does), else, with several ranks, a rank waits for the others (in a pipeline, its bubble
    first); a lone rank on the CPU runs no operator."""
    pipelined = str(report.run.get("strategy")) == "pipelined"
    if has_kernels(report):
        return "no kernel runs on the GPU" + (" (the pipeline's bubble among it)" if pipelined else "")
    if int(report.target.get("num_ipus", 1) or 1) > 1:
        return "the pipeline's bubble and waits for other ranks" if pipelined else "waits for other ranks"
    return "no operator runs"


def replayable(report: Any) -> bool:
    """An imported pipeline of several ranks: its what-ifs are re-timings of its trace (analysis/pipeline/replay.py)."""
    return bool(report.imported) and str(report.run.get("strategy")) == "pipelined" and len(
        {int(s.get("ipu", 0)) for s in report.run.get("stages") or []}) > 1


def report(key: str | None = None) -> Any:
    """Shorthand: the Report of profile ``key`` of the current app."""
    return current().report(key)
