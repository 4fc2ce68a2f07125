"""Exchange: time by phase, bytes and cycles by kind, the IPU-to-IPU matrix, bandwidth, costliest steps.

Inputs: the trace (phase totals, step executions), ``exchanges``, ``programs`` and the target.
Formulas in docs/reports.md, "Exchange". Bandwidth peaks come from optional target keys; a
missing key gives NaN, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.tables import TraceArrays, as_str, executions, finish, phase_cycles
from popvision_py.format.schema import EXCHANGE_KINDS

BY_KIND_COLUMNS = ["kind", "executions", "bytes", "cycles", "time_pct"]
MATRIX_COLUMNS = ["src_ipu", "dst_ipu", "bytes", "cycles"]
BANDWIDTH_COLUMNS = ["kind", "bytes", "cycles", "achieved_bytes_per_s", "peak_bytes_per_s", "efficiency_pct"]
COSTLIEST_COLUMNS = ["ipu", "step", "name", "kind", "src_ipu", "dst_ipu", "bytes", "cycles", "executions",
                     "total_cycles"]


@dataclass(frozen=True)
class ExchangeFigures:
    """IPU-cycles by phase over the whole trace (summed over IPUs), and each as a share of the total."""

    total_cycles: int
    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int
    stream_cycles: int
    idle_cycles: int
    compute_pct: float
    exchange_pct: float
    sync_pct: float
    stream_pct: float
    idle_pct: float


def figures(trace: TraceArrays) -> ExchangeFigures:
    """Cycles in each phase summed over IPUs; ``_pct`` = 100 x phase / total."""
    by_phase = phase_cycles(trace).groupby("phase")["cycles"].sum()
    get = lambda p: int(by_phase.get(p, 0))  # noqa: E731
    total = int(by_phase.sum())
    pct = lambda v: 100.0 * v / total if total else float("nan")  # noqa: E731
    c, e, s, st, i = get("compute"), get("exchange"), get("sync"), get("stream"), get("idle")
    return ExchangeFigures(total, c, e, s, st, i, pct(c), pct(e), pct(s), pct(st), pct(i))


def executed(exchanges: pd.DataFrame, trace: TraceArrays) -> pd.DataFrame:
    """Each exchange row with ``executions`` and its totals ``total_bytes`` / ``total_cycles`` over the trace."""
    frame = exchanges.merge(executions(trace), on=["ipu", "step"], how="left")
    frame["executions"] = frame["executions"].fillna(0).astype(np.int64)
    frame["total_bytes"] = frame["bytes"] * frame["executions"]
    frame["total_cycles"] = frame["cycles"] * frame["executions"]
    return as_str(frame, "kind")


def by_kind(done: pd.DataFrame, total_cycles: int) -> pd.DataFrame:
    """Every exchange kind (all five, zeros included): BY_KIND_COLUMNS in the schema's kind order."""
    g = done.groupby("kind")[["executions", "total_bytes", "total_cycles"]].sum()
    g.columns = ["executions", "bytes", "cycles"]
    kinds = list(EXCHANGE_KINDS) + sorted(set(g.index) - set(EXCHANGE_KINDS))
    frame = g.reindex(kinds, fill_value=0).rename_axis("kind").reset_index()
    for column in ("executions", "bytes", "cycles"):
        frame[column] = frame[column].astype(np.int64)
    frame["time_pct"] = 100.0 * frame["cycles"] / total_cycles if total_cycles else np.nan
    return finish(frame, BY_KIND_COLUMNS)


def matrix(done: pd.DataFrame) -> pd.DataFrame:
    """Bytes and cycles moved from each source to each destination (-1 host, -2 streaming memory)."""
    g = done.groupby(["src_ipu", "dst_ipu"], as_index=False)[["total_bytes", "total_cycles"]].sum()
    g = g.rename(columns={"total_bytes": "bytes", "total_cycles": "cycles"})
    g = g[(g["bytes"] > 0) | (g["cycles"] > 0)]
    return finish(g.astype({"src_ipu": np.int64, "dst_ipu": np.int64}), MATRIX_COLUMNS, ["src_ipu", "dst_ipu"])


def peak_bytes_per_s(target: dict[str, Any]) -> dict[str, float]:
    """Peak bandwidth per exchange kind from the target's optional keys (NaN where unknown)."""
    def num(key: str) -> float:
        value = target.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else np.nan

    internal = num("exchange_bytes_per_cycle_per_tile") * num("tiles_per_ipu") * num("clock_hz")
    link = num("ipu_link_bytes_per_s")
    return {"internal": internal, "inter_ipu": link, "host": num("host_link_bytes_per_s"),
            "remote_buffer": num("streaming_memory_bytes_per_s"), "all_reduce": link}


def bandwidth(kinds: pd.DataFrame, target: dict[str, Any]) -> pd.DataFrame:
    """Achieved = bytes / (cycles / clock_hz); efficiency = 100 x achieved / peak: BANDWIDTH_COLUMNS."""
    clock = float(target.get("clock_hz") or np.nan)
    frame = kinds[["kind", "bytes", "cycles"]].copy()
    seconds = frame["cycles"].to_numpy(float) / clock
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["achieved_bytes_per_s"] = np.where(seconds > 0, frame["bytes"].to_numpy(float) / seconds, np.nan)
    peaks = peak_bytes_per_s(target)
    frame["peak_bytes_per_s"] = frame["kind"].map(peaks).astype(float)
    frame["efficiency_pct"] = 100.0 * frame["achieved_bytes_per_s"] / frame["peak_bytes_per_s"]
    return finish(frame, BANDWIDTH_COLUMNS)


def costliest(done: pd.DataFrame, programs: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The ``n`` exchange steps with the most cycles over the trace (cycles x executions): COSTLIEST_COLUMNS."""
    frame = done.merge(programs[["ipu", "step", "name"]], on=["ipu", "step"], how="left")
    frame["name"] = frame["name"].astype(object).where(frame["name"].notna(), "").astype(str)
    frame = frame.sort_values(["total_cycles", "ipu", "step"], ascending=[False, True, True], kind="stable").head(n)
    return finish(frame, COSTLIEST_COLUMNS)
