"""HTA's side of benchmarks/gpu_vs_hta.py: Holistic Trace Analysis' figures for one trace folder, as JSON.

    HTA_PYTHON benchmarks/_hta_side.py DIR OUT.json

Runs in HTA's own interpreter (its environment holds ``HolisticTraceAnalysis`` and its pandas), so it
imports nothing of popvision and popvision never depends on HTA. Each figure is HTA's own call with
its defaults and ``visualize=False``; times are HTA's (the trace's microseconds). A figure HTA fails on
is recorded as its error, one line, and the others are still measured.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from typing import Any


def _records(frame: Any, rename: dict[str, str]) -> list[dict[str, Any]]:
    frame = frame.rename(columns=rename)
    rows = []
    for row in frame.to_dict("records"):
        rows.append({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()})
    return rows


def figures(folder: str) -> dict[str, Any]:
    """HTA 0.5's figures of the traces in ``folder`` (each figure's own call, timed)."""
    import numpy as np
    from hta.trace_analysis import TraceAnalysis

    out: dict[str, Any] = {"folder": folder, "errors": {}, "seconds": {}}
    try:
        from hta.version import __version__ as version
    except ImportError:  # pragma: no cover - older layouts
        version = "?"
    out["version"] = version
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    out["seconds"]["load"] = time.perf_counter() - t0
    ranks = sorted(int(r) for r in analyzer.t.traces)
    out["ranks"] = ranks

    def timed(name: str, call: Any) -> Any:
        t = time.perf_counter()
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - HTA's failure is a result to show, not ours to raise
            out["errors"][name] = f"{type(exc).__name__}: {exc}"
            return None
        finally:
            out["seconds"][name] = time.perf_counter() - t

    temporal = timed("temporal", lambda: analyzer.get_temporal_breakdown(visualize=False))
    if temporal is not None:
        out["temporal"] = _records(temporal, {
            "idle_time(us)": "idle_us", "compute_time(us)": "compute_us", "non_compute_time(us)": "non_compute_us",
            "kernel_time(us)": "kernel_us", "idle_time_pctg": "idle_pct", "compute_time_pctg": "compute_pct",
            "non_compute_time_pctg": "non_compute_pct"})
    breakdown = timed("kernel_breakdown", lambda: analyzer.get_gpu_kernel_breakdown(visualize=False))
    if breakdown is not None:
        types, kernels = breakdown
        out["kernel_types"] = _records(types, {"sum": "time_us", "percentage": "pct"})
        out["top_kernels"] = _records(kernels, {"sum (us)": "sum_us", "max (us)": "max_us", "min (us)": "min_us",
                                                "mean (us)": "mean_us", "stddev": "std_us"})
    overlap = timed("overlap", lambda: analyzer.get_comm_comp_overlap(visualize=False))
    if overlap is not None:
        out["overlap"] = _records(overlap, {"comp_comm_overlap_pctg": "comm_comp_overlap_pct"})
    launches = timed("launch", lambda: analyzer.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False))
    if launches is not None:
        rows = []
        for rank, frame in sorted(launches.items()):
            delay = frame["launch_delay"].to_numpy(np.float64)
            cpu = frame["cpu_duration"].to_numpy(np.float64)
            gpu = frame["gpu_duration"].to_numpy(np.float64)
            n = len(frame)
            rows.append({"rank": int(rank), "kernels": n,
                         "cpu_duration_median_us": float(np.median(cpu)) if n else None,
                         "gpu_duration_median_us": float(np.median(gpu)) if n else None,
                         "launch_delay_median_us": float(np.median(delay)) if n else None,
                         "launch_delay_p95_us": float(np.percentile(delay, 95)) if n else None,
                         "launch_delay_max_us": float(delay.max()) if n else None,
                         "launch_delay_sum_us": float(delay.sum()),
                         "cpu_longer_pct": 100.0 * float((cpu > gpu).sum()) / n if n else None})
        out["launch"] = rows
    idle = timed("idle", lambda: analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False))
    if idle is not None:
        out["idle"] = _records(idle[0], {"idle_time": "idle_us", "idle_time_ratio": "idle_ratio"})
    out["seconds"]["total"] = time.perf_counter() - t0
    return out


def main(argv: list[str]) -> int:
    folder, target = argv
    logging.disable(logging.WARNING)  # HTA logs each parse at WARNING; its figures are what is wanted
    warnings.simplefilter("ignore")
    found = figures(folder)
    with open(target, "w") as fh:
        json.dump(found, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
