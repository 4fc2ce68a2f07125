"""Compare two profiles: every report's figures side by side with the differences.

Each report is flattened to ``(figure, value)`` pairs (``flatten_*``), the two sides are outer-joined
on the figure name, and ``difference = b - a``, ``difference_pct = 100 x difference / |a|``
(0 when both are equal, including both missing; NaN when ``a`` is 0 or missing and ``b`` is not).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.report import Report

COLUMNS = ["section", "figure", "a", "b", "difference", "difference_pct"]
SECTIONS = ("summary", "memory", "liveness", "stages", "exchange")


def _numeric_fields(obj: Any, prefix: str = "") -> list[tuple[str, float]]:
    out = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, (bool, np.bool_)):
            out.append((prefix + f.name, float(v)))
        elif isinstance(v, (int, float, np.integer, np.floating)):
            out.append((prefix + f.name, float(v)))
    return out


def flatten_summary(report: Report) -> list[tuple[str, float]]:
    return _numeric_fields(report.summary.figures())


def flatten_memory(report: Report) -> list[tuple[str, float]]:
    out = []
    for row in report.memory.by_ipu().itertuples(index=False):
        for col in ("always_live_bytes", "not_always_live_bytes", "total_bytes", "headroom_bytes", "used_pct",
                    "max_tile_bytes", "oom_tiles"):
            out.append((f"ipu {row.ipu} {col}", float(getattr(row, col))))
    for row in report.memory.by_category().itertuples(index=False):
        live = "always-live" if row.always_live else "not-always-live"
        out.append((f"ipu {row.ipu} {row.category} {live} bytes", float(row.bytes)))
    return out


def flatten_liveness(report: Report) -> list[tuple[str, float]]:
    out = []
    for row in report.liveness.peaks().itertuples(index=False):
        out += [(f"ipu {row.ipu} peak_step", float(row.peak_step)),
                (f"ipu {row.ipu} peak not_always_live_bytes", float(row.not_always_live_bytes)),
                (f"ipu {row.ipu} peak total_bytes", float(row.total_bytes))]
    return out


def flatten_stages(report: Report) -> list[tuple[str, float]]:
    out = _numeric_fields(report.stages.figures())
    s = report.stages.summary()
    for stage, pass_, per_mb, busy, util in zip(s["stage"], s["pass"], s["cycles_per_micro_batch"],
                                                s["busy_cycles"], s["utilisation_pct"]):
        key = f"stage {stage} {pass_}"
        out += [(f"{key} cycles_per_micro_batch", float(per_mb)), (f"{key} busy_cycles", float(busy)),
                (f"{key} utilisation_pct", float(util))]
    split = report.stages.best_split()
    out += [("best split predicted_step_cycles", split.predicted_step_cycles), ("best split gain_pct", split.gain_pct)]
    return out


def flatten_exchange(report: Report) -> list[tuple[str, float]]:
    out = _numeric_fields(report.exchange.figures())
    for row in report.exchange.bandwidth().itertuples(index=False):
        out += [(f"{row.kind} bytes", float(row.bytes)), (f"{row.kind} cycles", float(row.cycles)),
                (f"{row.kind} achieved_bytes_per_s", float(row.achieved_bytes_per_s))]
    for row in report.exchange.by_kind().itertuples(index=False):
        out.append((f"{row.kind} time_pct", float(row.time_pct)))
    return out


FLATTEN = {"summary": flatten_summary, "memory": flatten_memory, "liveness": flatten_liveness,
           "stages": flatten_stages, "exchange": flatten_exchange}


def side_by_side(section: str, a: list[tuple[str, float]], b: list[tuple[str, float]]) -> pd.DataFrame:
    """Outer-join two flattened reports on the figure name: COLUMNS, in a's order then b's new figures."""
    fa = pd.DataFrame(a, columns=["figure", "a"]).drop_duplicates("figure")
    fb = pd.DataFrame(b, columns=["figure", "b"]).drop_duplicates("figure")
    frame = fa.merge(fb, on="figure", how="outer", sort=False)
    in_a = set(fa["figure"])
    order = {name: i for i, name in enumerate(list(fa["figure"]) + [f for f in fb["figure"] if f not in in_a])}
    frame["_order"] = frame["figure"].map(order)
    frame = frame.sort_values("_order", kind="stable")
    va, vb = frame["a"].to_numpy(float), frame["b"].to_numpy(float)
    same = (va == vb) | (np.isnan(va) & np.isnan(vb))
    diff = np.where(same, 0.0, vb - va)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(same, 0.0, np.where(va != 0, 100.0 * diff / np.abs(va), np.nan))
    frame["difference"], frame["difference_pct"] = diff, pct
    frame["section"] = section
    return frame.loc[:, COLUMNS].reset_index(drop=True)


class Comparison:
    """Two profiles side by side: ``summary()``, ``memory()``, ``liveness()``, ``stages()``, ``exchange()``.

    ``a`` and ``b`` are the two ``Report``s (paths are opened).
    """

    def __init__(self, a: str | os.PathLike[str] | Report, b: str | os.PathLike[str] | Report) -> None:
        self.a = a if isinstance(a, Report) else Report(a)
        self.b = b if isinstance(b, Report) else Report(b)
        self._cache: dict[str, pd.DataFrame] = {}

    def section(self, name: str) -> pd.DataFrame:
        """One section's comparison: COLUMNS."""
        if name not in self._cache:
            self._cache[name] = side_by_side(name, FLATTEN[name](self.a), FLATTEN[name](self.b))
        return self._cache[name]

    def summary(self) -> pd.DataFrame:
        return self.section("summary")

    def memory(self) -> pd.DataFrame:
        return self.section("memory")

    def liveness(self) -> pd.DataFrame:
        return self.section("liveness")

    def stages(self) -> pd.DataFrame:
        return self.section("stages")

    def exchange(self) -> pd.DataFrame:
        return self.section("exchange")

    def all(self) -> pd.DataFrame:
        """Every section, one after the other."""
        return pd.concat([self.section(s) for s in SECTIONS], ignore_index=True)
