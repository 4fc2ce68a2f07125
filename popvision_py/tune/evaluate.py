"""The Dask task of `popvision tune`: one candidate emulated, its figures or its reason.

``evaluate`` is a top-level function of an importable module so that a Dask worker in another
process, or on another machine with popvision installed, runs it by reference. It emulates the
candidate as ``popvision run`` does (``engine.runner.emulate``) without writing a profile (the
figures it returns do not depend on one), and never raises: a run the planner refuses is
``rejected``, any other failure ``error``, each with its sentence.
"""

from __future__ import annotations

import json
import time
from typing import Any

NOT_EMULATED = {"samples_per_second": None, "seconds_per_step": None, "worst_tile_bytes": None,
                "bytes_per_tile": None, "fits": False}


def evaluate(request_json: str) -> dict[str, Any]:
    """Emulate ``RunRequest(**json.loads(request_json))``: status, reason, figures and the seconds it took."""
    began = time.perf_counter()
    from engine.runner import RunRequest, emulate
    from popvision_py.errors import ConfigError, first_line

    try:
        # Candidates are ranked by their central estimates: a sensitivity pass per candidate would cost
        # ~40 emulations each (engine.prediction); the profiles tune writes carry their ranges.
        summary = emulate(RunRequest(**{**json.loads(request_json), "ranges": False}))
    except ConfigError as exc:
        out = {"status": "rejected", "reason": str(exc), **NOT_EMULATED}
    except Exception as exc:  # noqa: BLE001 - a failed candidate is a row with its reason, never a crashed search
        out = {"status": "error", "reason": f"{type(exc).__name__}: {first_line(exc)}", **NOT_EMULATED}
    else:
        out = {"status": "ok" if summary.fits else "oom",
               "reason": "" if summary.fits else (f"{summary.oom_tiles:,} tiles out of memory; the worst, IPU "
                                                  f"{summary.worst_ipu} tile {summary.worst_tile}, needs "
                                                  f"{summary.worst_tile_bytes:,} of {summary.bytes_per_tile:,} bytes."),
               "samples_per_second": float(summary.samples_per_second),
               "seconds_per_step": float(summary.seconds_per_step),
               "worst_tile_bytes": int(summary.worst_tile_bytes), "bytes_per_tile": int(summary.bytes_per_tile),
               "fits": bool(summary.fits)}
    out["seconds"] = time.perf_counter() - began
    return out

