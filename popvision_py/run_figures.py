"""The idle share and FLOP utilisation a run's summary states, as ``popvision report`` states them.

They are the analysis' formulas, so the engine cannot compute them itself (it sits below the
analysis): ``popvision run`` hands ``emulated_figures`` to the engine as ``RunRequest.figures``,
which applies the formulas to the schedule's parts without reading the trace back, and a PopTorch
script's compile takes ``summary_figures`` of the profile it wrote. Either way the engine's
``RunSummary`` carries the figures (``RunSummary.set_figures``) and ``render.run_summary`` only prints
them. This module sits above both the engine and the analysis (floor 3, docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.compiler import Compiled
from engine.instrument import arrow_table, manifest, ops_table, programs_table
from engine.scheduler import Schedule, span, templates
from popvision_py.analysis.ipu import exchange as _exchange
from popvision_py.analysis.findings import summary as _summary
from popvision_py.analysis.report import Report
from popvision_py.analysis.common.tables import Columns
from popvision_py.analysis.trace.cube import Cube
from popvision_py.analysis.trace.scan import Aggregates, summarise_arrays


def summary_figures(profile: Path) -> dict[str, float]:
    """The figures ``summary_text`` takes besides the summary, from the analysis of ``profile``."""
    with Report(profile) as report:
        figures = report.summary.figures()  # the report's summary states the same idle share
        return {"idle_pct": figures.idle_pct, "flop_utilisation_pct": figures.flop_utilisation_pct}


def emulated_figures(compiled: Compiled, sched: Schedule) -> dict[str, float]:
    """``summary_figures`` of the profile this run writes, from what the emulator knows instead of a
    read of its trace: the analysis' own formulas (``exchange.figures``, ``summary.total_flops``)
    over the trace's sums, each part's rows of one repeat folded once (``trace.scan``) and counted
    as often as they occur (``scheduler.templates``), and the ops and programs tables as written."""
    folds = [(summarise_arrays({**rows, "run": np.zeros(len(rows["step"]), np.int32)}), count)
             for rows, count in templates(sched)]
    start, end = span(sched)
    trace = Aggregates(Cube.from_dense(_weighted([np.asarray(f.cube) for f, _ in folds], [c for _, c in folds], 4)),
                       _weighted([f.executions for f, _ in folds], [c for _, c in folds], 2),
                       np.zeros(0, np.int64), 0, start, end, rows=sum(len(f) * c for f, c in folds))
    ops = Columns(arrow_table("ops", ops_table(compiled)))
    programs = Columns(arrow_table("programs", programs_table(compiled)))
    target, run = manifest(compiled, sched)
    flops = _summary.total_flops(ops, programs, trace)
    return {"idle_pct": float(_exchange.figures(trace).idle_pct),
            "flop_utilisation_pct": float(_summary.flop_utilisation_pct(target, run, flops, end - start))}


def _weighted(arrays: list[np.ndarray], counts: list[int], dims: int) -> np.ndarray:
    """``sum(count x array)`` of int64 arrays of different shapes, each padded with zeros to the largest."""
    if not arrays:
        return np.zeros((0,) * dims, np.int64)
    shape = tuple(max(a.shape[d] for a in arrays) for d in range(dims))
    total = np.zeros(shape, np.int64)
    for array, count in zip(arrays, counts):
        total[tuple(slice(0, n) for n in array.shape)] += array * np.int64(count)
    return total
