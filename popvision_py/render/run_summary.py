"""The lines ``popvision run`` prints after a run, which a PopTorch script prints too when it compiles
a model (``poptorch/_emulation.py``): one place, below both, so neither imports the other."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.compiler import Compiled
from engine.instrument import Summary, arrow_table, manifest, ops_table, programs_table
from engine.scheduler import Schedule, span, templates
from popvision_py.analysis import exchange as _exchange
from popvision_py.analysis import summary as _summary
from popvision_py.analysis.host import host_bound_line
from popvision_py.analysis.report import Report
from popvision_py.analysis.tables import Columns
from popvision_py.analysis.tracescan import Aggregates, summarise_arrays
from popvision_py.render.format import three_figures


def summary_figures(profile: Path) -> dict[str, float]:
    """The figures ``summary_text`` takes besides the summary, from the analysis of ``profile``."""
    with Report(profile) as report:
        figures = report.summary.figures()  # the report's summary states the same idle share
        return {"idle_pct": figures.idle_pct, "flop_utilisation_pct": figures.flop_utilisation_pct}


def emulated_figures(compiled: Compiled, sched: Schedule) -> dict[str, float]:
    """``summary_figures`` of the profile this run writes, from what the emulator knows instead of a
    read of its trace: the analysis' own formulas (``exchange.figures``, ``summary.total_flops``)
    over the trace's sums, each part's rows of one repeat folded once (``tracescan``) and counted
    as often as they occur (``scheduler.templates``), and the ops and programs tables as written."""
    folds = [(summarise_arrays({**rows, "run": np.zeros(len(rows["step"]), np.int32)}), count)
             for rows, count in templates(sched)]
    start, end = span(sched)
    trace = Aggregates(_weighted([f.cube for f, _ in folds], [c for _, c in folds], 4),
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


def summary_text(s: Summary, idle_pct: float, flop_utilisation_pct: float) -> str:
    """The lines `popvision run` prints."""
    shards = f" x {s.tensor_sharding} tensor shards" if s.tensor_sharding > 1 else ""
    rate = f"  throughput        {s.samples_per_second:,.1f} samples/s"
    if s.throughput_range:
        low, high = s.throughput_range
        rate += f" ({three_figures(low)} to {three_figures(high)})"
    lines = [
        f"{s.model}: {s.mode}, {s.strategy} over {s.num_ipus} IPU(s){shards} x {s.replicas} replica(s) "
        f"on {s.arch} ({s.system})",
        f"  time per step     {s.seconds_per_step * 1e3:,.3f} ms ({s.cycles_per_step:,.0f} cycles, "
        f"{s.samples_per_step:,} samples)",
        rate,
        f"  idle              {idle_pct:.1f}% of IPU time    FLOP utilisation {flop_utilisation_pct:.1f}%",
        f"  fit               {_verdict(s)}",
        f"  worst tile        IPU {s.worst_ipu} tile {s.worst_tile}: {s.worst_tile_bytes:,} of "
        f"{s.bytes_per_tile:,} bytes ({100 * s.worst_tile_bytes / s.bytes_per_tile:.1f}%)",
    ]
    if s.throughput_range is not None:
        lines.append(f"  ranges driven by  throughput: {_drivers(s.throughput_range_drivers)}; "
                     f"worst tile: {_drivers(s.worst_tile_range_drivers)}")
        if s.pin_down:
            lines.append(f"  pin down          the throughput range is wider than ±25%: measure {s.pin_down} and "
                         f"give it with --assume {s.pin_down}=VALUE")
    if s.host_bound:
        lines.append("  " + host_bound_line(s.input_wait_pct) + f"; the loader: {s.host_loader}")
    if s.profile:
        lines.append(f"  profile           {s.profile}")
    return "\n".join(lines)


def _verdict(s: Summary) -> str:
    """``fits (worst tile 74% to 81%)``, ``does not fit: 12 tiles out of memory (...)`` or ``borderline (...)``."""
    oom = f"{s.oom_tiles:,} tiles out of memory" if s.oom_tiles else ""
    if s.fit_verdict is None:  # --no-ranges: the central estimate alone
        return f"does not fit: {oom}" if oom else "fits"
    low, high = s.worst_tile_pct_range or (0.0, 0.0)
    if s.fit_verdict == "borderline":
        return s.fit_verdict_text + (f"; {oom} at the central estimate" if oom else "")
    return f"{s.fit_verdict}{': ' + oom if oom else ''} (worst tile {low:.0f}% to {high:.0f}%)"


def _drivers(drivers: list[dict]) -> str:
    """The assumptions that dominate a range, largest first (three at most)."""
    return ", ".join(d["name"] for d in drivers[:3]) or "none"
