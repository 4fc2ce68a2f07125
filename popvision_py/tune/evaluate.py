"""The Dask tasks of `popvision tune`: one candidate emulated, its figures or its reason; and one
candidate's ranges.

``evaluate`` and ``evaluate_ranges`` are top-level functions of an importable module so that a Dask
worker in another process, or on another machine with popvision installed, runs them by reference.
``evaluate`` emulates the candidate as ``popvision run --no-ranges`` does (``engine.runner.emulate``)
without writing a profile (the figures it returns do not depend on one), and never raises: a run the
planner refuses is ``rejected``, any other failure ``error``, each with its sentence.

``evaluate_ranges`` runs the candidate with its sensitivity pass (``engine.prediction``: the run
emulated again at both ends of each assumption's interval, about 20 emulations) for its throughput's
and worst tile's ranges and its fit verdict. The search ranks every candidate by its central
estimate and runs this only for the candidates its table shows (``table.ranged_keys``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from popvision_py.format.tunefile import RANGE_COLUMNS

NOT_EMULATED = {"samples_per_second": None, "seconds_per_step": None, "worst_tile_bytes": None,
                "bytes_per_tile": None, "fits": False}
# What ``evaluate_ranges`` gives: the fit verdict (fits, does not fit, borderline), the throughput's range
# (samples/s) and the worst tile's (% of a tile); None where not computed.
RANGE_FIELDS = tuple(RANGE_COLUMNS.names)
NOT_RANGED: dict[str, Any] = dict.fromkeys(RANGE_FIELDS)


def evaluate(request_json: str) -> dict[str, Any]:
    """Emulate ``RunRequest(**json.loads(request_json))``: status, reason, figures and the seconds it took."""
    began = time.perf_counter()
    from engine.runner import RunRequest, emulate
    from popvision_py.scripts import load_script
    from popvision_py.errors import ConfigError, first_line

    try:
        # Candidates are ranked by their central estimates: a sensitivity pass per candidate would cost
        # ~20 emulations each (engine.prediction); evaluate_ranges runs it for the candidates shown.
        summary = emulate(RunRequest(**{**json.loads(request_json), "ranges": False}), load_script)
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


def evaluate_ranges(request_json: str) -> dict[str, Any]:
    """``RunRequest(**json.loads(request_json))`` emulated with its sensitivity pass: ``RANGE_FIELDS`` and the
    seconds it took. Never raises: a run that fails (one its central emulation passed) is not ranged, all None."""
    began = time.perf_counter()
    from engine.runner import RunRequest, emulate
    from popvision_py.scripts import load_script

    try:
        summary = emulate(RunRequest(**{**json.loads(request_json), "ranges": True}), load_script)
    except Exception:  # noqa: BLE001 - a candidate without ranges is still a row, ranked by its central figures
        out = dict(NOT_RANGED)
    else:
        (rate_low, rate_high), (tile_low, tile_high) = summary.throughput_range, summary.worst_tile_pct_range
        out = {"fit_verdict": str(summary.fit_verdict), "throughput_low": float(rate_low),
               "throughput_high": float(rate_high), "worst_tile_pct_low": float(tile_low),
               "worst_tile_pct_high": float(tile_high)}
    out["seconds"] = time.perf_counter() - began
    return out
