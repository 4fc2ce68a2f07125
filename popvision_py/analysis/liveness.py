"""Liveness: not-always-live memory per IPU over program steps, the peak step, what is live at a step.

Inputs: ``liveness``, ``programs`` (step names), ``variables`` and the target. Formulas in
docs/reports.md, "Liveness".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.tables import as_str, finish
from popvision_py.errors import OutOfRangeError

BY_STEP_COLUMNS = ["ipu", "step", "name", "always_live_bytes", "not_always_live_bytes", "total_bytes",
                   "worst_tile", "worst_tile_bytes", "capacity_bytes"]
PEAK_COLUMNS = ["ipu", "peak_step", "name", "not_always_live_bytes", "total_bytes"]
LIVE_AT_COLUMNS = ["var_id", "name", "category", "always_live", "bytes", "live_from_step", "live_to_step"]


def by_step(liveness: pd.DataFrame, programs: pd.DataFrame, target: dict[str, Any],
            ipu: int | None = None) -> pd.DataFrame:
    """Memory live at every program step: BY_STEP_COLUMNS sorted by ipu, step.

    ``total_bytes`` = always-live + not-always-live bytes on the IPU; ``capacity_bytes`` = the
    IPU's SRAM (tiles x bytes per tile).
    """
    frame = liveness if ipu is None else liveness[liveness["ipu"] == ipu]
    names = programs[["ipu", "step", "name"]]
    frame = frame.merge(names, on=["ipu", "step"], how="left")
    frame["name"] = frame["name"].astype(object).where(frame["name"].notna(), "")
    frame["name"] = frame["name"].astype(str)
    frame["total_bytes"] = frame["always_live_bytes"] + frame["not_always_live_bytes"]
    frame["capacity_bytes"] = int(target["tiles_per_ipu"]) * int(target["bytes_per_tile"])
    return finish(frame, BY_STEP_COLUMNS, ["ipu", "step"])


def peaks(steps: pd.DataFrame) -> pd.DataFrame:
    """Per IPU, the first step where not-always-live memory peaks: PEAK_COLUMNS sorted by ipu."""
    if steps.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c != "name" else "object") for c in PEAK_COLUMNS})
    ordered = steps.sort_values(["ipu", "not_always_live_bytes", "step"], ascending=[True, False, True], kind="stable")
    frame = ordered.drop_duplicates("ipu", keep="first").rename(columns={"step": "peak_step"})
    return finish(frame, PEAK_COLUMNS, ["ipu"])


def live_at(variables: pd.DataFrame, ipu: int, step: int, num_steps: int | None = None) -> pd.DataFrame:
    """Variables live on ``ipu`` at ``step`` (always-live ones included), largest first: LIVE_AT_COLUMNS."""
    if num_steps is not None and not 0 <= step < num_steps:
        raise OutOfRangeError(f"Step {step} is not in the program of IPU {ipu}: steps run from 0 to {num_steps - 1}.")
    v = variables[variables["ipu"] == ipu]
    live = v["always_live"].to_numpy() | ((v["live_from_step"].to_numpy() <= step) & (step <= v["live_to_step"].to_numpy()))
    frame = v[live].sort_values(["bytes", "var_id"], ascending=[False, True], kind="stable")
    return finish(as_str(frame.copy(), "name", "category"), LIVE_AT_COLUMNS)


def step_count(liveness: pd.DataFrame, programs: pd.DataFrame, ipu: int) -> int:
    """Program steps of one IPU (from programs, else liveness)."""
    steps = programs.loc[programs["ipu"] == ipu, "step"]
    if steps.empty:
        steps = liveness.loc[liveness["ipu"] == ipu, "step"]
    if steps.empty:
        raise OutOfRangeError(f"IPU {ipu} is not in the profile.")
    return int(np.max(steps.to_numpy())) + 1
