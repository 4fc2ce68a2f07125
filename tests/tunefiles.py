"""Real tune results for tests: a handful of mnist candidates emulated for real, written with ``write_tune``.

A test builds the rows itself (fixed candidates, no search): each candidate's ``RunRequest``
is emulated through ``engine.runner.emulate`` and its row holds the figures the emulator measured;
rank and fits follow from those figures, and the Pareto front is ``tune.table.pareto``'s (the rows keep
their order here: tests name candidates by row).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.runner import RunRequest, emulate
from popvision_py.format.tunefile import write_tune
from popvision_py.tune.table import pareto

HOST = {"host_tensor_samples_per_s_per_core": 1e9}  # a loader that keeps up: the IPUs' own speed
# name -> (flags changed from the start, RunRequest fields besides the model and the assumptions)
MNIST_CANDIDATES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "start": ([], {}),
    "ga-20": (["--gradient-accumulation", "20"], {"options": {"gradient_accumulation": 20}}),
    "two-stages": (["--stages", "B1,B2@0 B3,B4@1"], {"stages": "B1,B2@0 B3,B4@1"}),
    "replicas-2": (["--replicas", "2"], {"options": {"replication_factor": 2}}),
    "batch-8000": (["--batch-size", "8000"], {"options": {"micro_batch_size": 8000}}),  # does not fit
}
REJECTED = (["--stages", "B1@0 B2@1 B3@2 B4@3 B4@4"], "Block B4 is in two stages.")


def _row(name: str, flags: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    request = RunRequest("mnist", assumptions=dict(HOST), ranges=False, **fields)
    started = time.perf_counter()
    s = emulate(request)
    record = {k: v for k, v in dataclasses.asdict(request).items() if k not in ("profile", "progress")}
    return {
        "key": json.dumps({"candidate": name}, sort_keys=True), "status": "ok" if s.fits else "oom",
        "reason": "" if s.fits else f"{s.oom_tiles:,} tiles out of memory.",
        "samples_per_second": s.samples_per_second, "seconds_per_step": s.seconds_per_step,
        "worst_tile_pct": 100.0 * s.worst_tile_bytes / s.bytes_per_tile,
        "headroom_bytes": s.bytes_per_tile - s.worst_tile_bytes, "fits": bool(s.fits),
        "ipus": s.num_ipus * s.tensor_sharding * s.replicas, "is_start": name == "start",
        "changes": shlex.join(flags),
        "command": shlex.join(["popvision", "run", "mnist", *flags, "--assume",
                               "host_tensor_samples_per_s_per_core=1e9"]),
        "request": json.dumps(record, sort_keys=True), "seconds": time.perf_counter() - started,
    }


def write_mnist_tune(path: Path, meta: dict[str, Any] | None = None) -> pd.DataFrame:
    """Emulate ``MNIST_CANDIDATES`` (plus one rejected candidate), write them to ``path``; returns the rows."""
    rows = pd.DataFrame([_row(name, flags, fields) for name, (flags, fields) in MNIST_CANDIDATES.items()])
    flags, reason = REJECTED
    rejected = {c: None for c in rows.columns} | {
        "key": json.dumps({"candidate": "rejected"}), "status": "rejected", "reason": reason, "fits": False,
        "ipus": 5, "is_start": False, "changes": shlex.join(flags), "seconds": 0.0,
        "command": shlex.join(["popvision", "run", "mnist", *flags]),
        "request": json.dumps({"model": "mnist", "stages": flags[1]})}
    rows = pd.concat([rows, pd.DataFrame([rejected])], ignore_index=True)
    fit = rows["fits"].astype(bool)
    speed = rows["samples_per_second"].astype(float)
    rank = speed.where(fit).rank(ascending=False, method="first")
    rows["rank"] = rank.astype("Int64")
    rows["pareto"] = pareto(rows["ipus"].to_numpy(np.int64), speed.round(3).to_numpy(), fit.to_numpy())
    write_tune(path, rows, {"model": "mnist", "system": "IPU-POD16", **(meta or {})})
    return rows
