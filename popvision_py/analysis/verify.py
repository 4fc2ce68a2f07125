"""Closing the loop on the insights: each fix run for real, its measured effect beside the predicted one.

``fix_runs(report)`` lists the fixes of a profile's insights as runs: the ``RunRequest`` fields
(``engine.runner.RunRequest(**request)`` runs it) built from the manifest's recorded request with
the fix's changes over it, the same options ``fixes.command`` prints. ``verify(report, runner,
folder)`` runs each through ``runner`` (the CLI hands in the emulator: the analysis library does
not import the engine), reads the profile it wrote, and returns one row per fix (``COLUMNS``):
time per step, throughput and worst tile before, predicted and measured, and a verdict.

A prediction *held* when every figure the fix's effect states is within ``TOLERANCE_PCT`` of the
measured one, the run fits where the predicted worst tile fits (and not where it does not), and a
fix meant to be faster measured a higher throughput. A run the planner or the emulator refuses is a
row with status ``failed`` and its sentence, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from popvision_py.analysis.findings import fixes as F
from popvision_py.analysis.common.tables import Table
from popvision_py.errors import PopvisionError

# Measured within this share of a predicted figure: the prediction held. The memory estimates were
# measured up to 7% low against runs of the fixes (docs/reports.md, "Fixes").
TOLERANCE_PCT = 10.0
STATUSES = ("held", "did not hold", "failed")
COLUMNS = ["tag", "suggestion", "status", "verdict", "step_s_before", "step_s_predicted", "step_s_after",
           "samples_per_second_before", "samples_per_second_predicted", "samples_per_second_after",
           "worst_tile_bytes_before", "worst_tile_bytes_predicted", "worst_tile_bytes_after", "fits_after",
           "profile", "command"]
# `popvision run`'s model parameters: RunRequest.params; the rest of its options are RunRequest.options.
PARAMS = ("preset", "layers", "hidden", "heads", "seq_len", "vocab", "masked_tokens", "packing", "tied_embeddings",
          "embedding_alone", "ipus")
OWN_FIELDS = ("strategy", "offload_optimiser", "offload_weights", "offload_activations", "replicated_tensor_sharding")

# A runner runs RunRequest fields and writes the profile to the path; raises PopvisionError when it cannot.
Runner = Callable[[dict[str, Any], Path], None]


@dataclass(frozen=True)
class FixRun:
    """One fix of a profile's insights, ready to run."""

    tag: str
    suggestion: str
    effect: str
    predicted: F.Predicted
    command: str
    request: dict[str, Any]  # RunRequest fields (no profile, no progress)


@dataclass(frozen=True)
class MeasuredFigures:
    """A run's figures, as the summary report gives them."""

    step_s: float
    samples_per_second: float
    worst_tile_bytes: int
    bytes_per_tile: int
    fits: bool

    @classmethod
    def of(cls, report: Any) -> MeasuredFigures:
        s = report.summary.figures()
        return cls(float(s.step_s), float(s.throughput_samples_per_s), int(s.worst_tile_bytes), int(s.bytes_per_tile),
                   bool(s.fits))


def request_fields(model: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``popvision run`` options (by option name, as ``fixes.fixed_options`` gives them) as RunRequest fields,
    without the ranges (``--no-ranges``): a fix is judged on its central figures (``MeasuredFigures``), and the
    ranges would emulate it again at each assumption's ends (gpt3-175b: 52 more compilations, 14 s of CPU against 1)."""
    fields: dict[str, Any] = {"model": model, "options": {}, "params": {}, "assumptions": {}, "ranges": False}
    for name, value in options.items():
        if name == "assume":
            fields["assumptions"] = dict(value or {})
        elif name == "stages":
            fields["stages"] = value if isinstance(value, str) else F.stages_text(value)
        elif name in OWN_FIELDS:
            fields[name] = value
        elif name == "script_args":  # a PopTorch script's arguments: `popvision run SCRIPT --emulate-only`
            fields[name] = [str(a) for a in value]
        elif name in PARAMS:
            fields["params"][name] = value
        else:
            fields["options"][name] = list(value) if isinstance(value, tuple) else value
    return fields


def fix_runs(report: Any) -> list[FixRun]:
    """The fixes of ``report``'s insights that have a command, in the insights' order (one per tag)."""
    insights = report.summary.insights()
    out: list[FixRun] = []
    seen: set[str] = set()
    for fix, command in zip(report.summary.fixes(), insights["command"].tolist()):
        if fix is None or not command or fix.tag in seen:
            continue
        seen.add(fix.tag)
        out.append(_fix_run(report, fix, command))
    return out


def fix_run(report: Any, row: int) -> FixRun:
    """The fix of row ``row`` of ``report``'s insights; LookupError if that row has none."""
    fixes = report.summary.fixes()
    commands = report.summary.insights()["command"].tolist()
    if not 0 <= row < len(fixes) or fixes[row] is None or not commands[row]:
        raise LookupError(f"Finding {row} of the insights has no fix to run.")
    return _fix_run(report, fixes[row], commands[row])


def _fix_run(report: Any, fix: F.Fix, command: str) -> FixRun:
    model, options = F.fixed_options(report.run, report.target, fix.changes, report.planner)
    return FixRun(fix.tag, fix.suggestion, fix.effect, fix.predicted, command, request_fields(model, options))


def _off_by(measured: float, predicted: float) -> float:
    """How far ``measured`` is from ``predicted``, in % of ``predicted``."""
    return 100.0 * (measured - predicted) / predicted if predicted else math.inf


def judge(fix: FixRun, before: MeasuredFigures, after: MeasuredFigures, clock_hz: float) -> tuple[str, str]:
    """``(status, verdict)`` of a fix measured at ``after``: ``held`` or ``did not hold``, and why in one sentence."""
    p = fix.predicted
    misses: list[str] = []
    if p.worst_tile_bytes is not None:
        predicted_fits = p.worst_tile_bytes <= after.bytes_per_tile
        off = _off_by(after.worst_tile_bytes, p.worst_tile_bytes)
        if predicted_fits and not after.fits:
            misses.append(f"it does not fit (worst tile {after.worst_tile_bytes:,} bytes, predicted "
                          f"{p.worst_tile_bytes:,})")
        elif not predicted_fits and after.fits:
            misses.append(f"it fits, though predicted not to (worst tile {after.worst_tile_bytes:,} bytes)")
        elif abs(off) > TOLERANCE_PCT:
            misses.append(f"worst tile {after.worst_tile_bytes:,} bytes, {off:+.1f}% off the predicted "
                          f"{p.worst_tile_bytes:,}")
    if p.step_cycles is not None:
        predicted_s = p.step_cycles / clock_hz
        off = _off_by(after.step_s, predicted_s)
        if abs(off) > TOLERANCE_PCT:
            misses.append(f"time per step {after.step_s * 1e3:,.3f} ms, {off:+.1f}% off the predicted "
                          f"{predicted_s * 1e3:,.3f} ms")
    if p.samples_per_second is not None:
        off = _off_by(after.samples_per_second, p.samples_per_second)
        if abs(off) > TOLERANCE_PCT:
            misses.append(f"{after.samples_per_second:,.0f} samples/s, {off:+.1f}% off the predicted "
                          f"{p.samples_per_second:,.0f}")
    if p.faster and not after.samples_per_second > before.samples_per_second:
        misses.append(f"no faster: {after.samples_per_second:,.0f} samples/s against {before.samples_per_second:,.0f} "
                      f"before")
    gain = _off_by(after.samples_per_second, before.samples_per_second)
    measured = (f"{gain:+.1f}% throughput, worst tile {before.worst_tile_bytes:,} -> {after.worst_tile_bytes:,} bytes"
                f" ({'fits' if after.fits else 'does not fit'})")
    if misses:
        return "did not hold", f"Did not hold: {'; '.join(misses)} ({measured})."
    return "held", f"Held: {measured}."


def row(fix: FixRun, before: MeasuredFigures, clock_hz: float, after: MeasuredFigures | None, profile: Path | None,
        failure: str | None) -> dict[str, Any]:
    """One row of ``COLUMNS`` for a fix run (``after`` None and ``failure`` its sentence when it failed)."""
    p = fix.predicted
    if after is None:
        status, verdict = "failed", f"The run failed: {failure}"
    else:
        status, verdict = judge(fix, before, after, clock_hz)
    nan = float("nan")
    return {
        "tag": fix.tag, "suggestion": fix.suggestion, "status": status, "verdict": verdict,
        "step_s_before": before.step_s,
        "step_s_predicted": p.step_cycles / clock_hz if p.step_cycles is not None else nan,
        "step_s_after": after.step_s if after else nan,
        "samples_per_second_before": before.samples_per_second,
        "samples_per_second_predicted": p.samples_per_second if p.samples_per_second is not None else nan,
        "samples_per_second_after": after.samples_per_second if after else nan,
        "worst_tile_bytes_before": before.worst_tile_bytes,
        "worst_tile_bytes_predicted": p.worst_tile_bytes,
        "worst_tile_bytes_after": after.worst_tile_bytes if after else None,
        "fits_after": bool(after.fits) if after else False,
        "profile": str(profile) if after and profile else "",
        "command": fix.command,
    }


def table(rows: list[dict[str, Any]]) -> Table:
    """Rows of ``COLUMNS`` as a Table: floats (NaN where not known) for times and rates, byte counts
    as whole numbers or None where not known (a fix that predicts none, a run that failed)."""
    out: dict[str, Any] = {}
    for name in COLUMNS:
        values = [r[name] for r in rows]
        if name == "worst_tile_bytes_before" or name.startswith("worst_tile_bytes") and None not in values:
            out[name] = np.array(values, np.int64)
        elif name.startswith(("step_s", "samples_per_second")):
            out[name] = np.array(values, float)
        elif name == "fits_after":
            out[name] = np.array(values, bool)
        else:
            column = np.empty(len(values), object)
            column[:] = values
            out[name] = column
    return Table(out)


def run_fix(fix: FixRun, before: MeasuredFigures, clock_hz: float, runner: Runner, profile: Path) -> dict[str, Any]:
    """Run one fix into ``profile`` and judge it; a run that fails is a row saying why."""
    def run() -> Path:
        runner(dict(fix.request), profile)
        return profile

    return measured_row(fix, before, clock_hz, run)


def measured_row(fix: FixRun, before: MeasuredFigures, clock_hz: float, run: Callable[[], Path]) -> dict[str, Any]:
    """The row of ``fix`` once ``run`` has written its profile (and returned its path), measured and judged;
    a ``PopvisionError`` from the run or the profile is a row saying why."""
    from popvision_py.analysis.report import Report

    try:
        profile = run()
        with Report(profile) as fixed:  # its figures only: no fix of its own is asked for, nor a planner needed
            after = MeasuredFigures.of(fixed)
    except PopvisionError as exc:
        return row(fix, before, clock_hz, None, None, str(exc).strip())
    return row(fix, before, clock_hz, after, profile, None)


def verify(report: Any, runner: Runner, folder: str | Path,
           progress: Callable[[FixRun], None] | None = None) -> Table:
    """Every fix of ``report``'s insights run by ``runner`` into ``folder/<tag>/profile.pop``, judged (COLUMNS).

    ``progress`` is called once per fix, when its run is done.
    """
    before = MeasuredFigures.of(report)
    clock = float(report.target["clock_hz"])
    rows = []
    for fix in fix_runs(report):
        rows.append(run_fix(fix, before, clock, runner, Path(folder) / fix.tag / "profile.pop"))
        if progress is not None:
            progress(fix)
    return table(rows)
