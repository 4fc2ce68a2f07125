"""Compare two profiles: every report's figures side by side with the differences, and what differs in
their run configuration.

Each report is flattened to ``(figure, field, value)`` rows (``flatten_*``): ``figure`` names the row
(``ipu 0 optimiser_state always-live bytes``), ``field`` is the quantity it is (``bytes``). ``KINDS``
says, once for every field, what kind of figure it is:

- ``amount``: bytes, cycles, FLOPs, tiles, a share of the run's time. A row absent on one side (a
  memory category, an exchange kind, an IPU or stage the other run does not have) holds none of it
  there: 0.
- ``measure``: a quantity that is not a sum of things (a rate, a ratio, a percentage of a capacity,
  headroom, a setting): absent on one side stays missing.
- ``identifier``: which tile, IPU, stage or program step, or a yes/no flag: shown, never subtracted.

The two sides are outer-joined on the figure name; for amounts and measures ``difference = b - a``
and ``difference_pct = 100 x difference / |a|`` (0 when the values are equal; NaN when ``a`` is 0 or
either side is missing); identifiers have neither (NaN).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.findings.fixes import Planner
from popvision_py.analysis.imported import ranks as _imported
from popvision_py.analysis.report import Report

COLUMNS = ["section", "figure", "a", "b", "difference", "difference_pct"]
CONFIGURATION_COLUMNS = ["setting", "a", "b"]
SECTIONS = ("summary", "memory", "liveness", "stages", "exchange")

AMOUNT, MEASURE, IDENTIFIER = "amount", "measure", "identifier"

# field -> kind, for every field a flattened report holds (a field not listed is a measure)
KINDS: dict[str, str] = {
    # summary
    "num_ipus": MEASURE, "replication_factor": MEASURE, "micro_batch_size": MEASURE,
    "gradient_accumulation": MEASURE, "device_iterations": MEASURE, "clock_hz": MEASURE,
    "total_cycles": AMOUNT, "iterations": AMOUNT, "step_cycles": AMOUNT, "step_s": AMOUNT,
    "samples_per_step": AMOUNT, "throughput_samples_per_s": MEASURE, "total_flops": AMOUNT,
    "flop_utilisation_pct": MEASURE, "fits": IDENTIFIER, "oom_tiles": AMOUNT, "worst_ipu": IDENTIFIER,
    "worst_tile": IDENTIFIER, "worst_tile_bytes": AMOUNT, "bytes_per_tile": MEASURE,
    # memory: per IPU, and per IPU, category and always-live ("bytes")
    "always_live_bytes": AMOUNT, "not_always_live_bytes": AMOUNT, "total_bytes": AMOUNT,
    "headroom_bytes": MEASURE, "used_pct": MEASURE, "max_tile_bytes": AMOUNT, "bytes": AMOUNT,
    # liveness: per IPU at its peak (the bytes are the amounts above)
    "peak_step": IDENTIFIER,
    # stages
    "num_stages": MEASURE, "micro_batches": AMOUNT, "bottleneck_stage": IDENTIFIER, "imbalance": MEASURE,
    "bubble_pct": MEASURE, "ideal_bubble_pct": MEASURE, "balanced_step_cycles": AMOUNT,
    "balance_gain_pct": MEASURE, "cycles_per_micro_batch": AMOUNT, "busy_cycles": AMOUNT,
    "utilisation_pct": MEASURE, "predicted_step_cycles": AMOUNT, "gain_pct": MEASURE,
    # exchange: time by phase, then per kind (a kind that did not run took no bytes, cycles or time)
    "compute_cycles": AMOUNT, "exchange_cycles": AMOUNT, "sync_cycles": AMOUNT, "stream_cycles": AMOUNT,
    "idle_cycles": AMOUNT, "compute_pct": AMOUNT, "exchange_pct": AMOUNT, "sync_pct": AMOUNT,
    "stream_pct": AMOUNT, "idle_pct": AMOUNT, "cycles": AMOUNT, "achieved_bytes_per_s": MEASURE,
    "time_pct": AMOUNT, "hidden_pct": AMOUNT,
}


def kind(field: str) -> str:
    """The kind of a figure's field (``KINDS``): ``amount``, ``measure`` or ``identifier``."""
    return KINDS.get(field, MEASURE)


# ------------------------------------------------------------------------------------- flattening

FLAT_COLUMNS = ["figure", "field", "value"]


def _numeric_fields(obj: Any, prefix: str = "") -> pd.DataFrame:
    """A dataclass's numeric (and yes/no) fields as flattened rows."""
    fields = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    kept = [(prefix + name, name, float(v)) for name, v in fields
            if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))]
    return pd.DataFrame(kept, columns=FLAT_COLUMNS)


def _grid(labels: pd.Series | np.ndarray, frame: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    """Each row's ``fields`` as flattened rows named ``<label> <field>`` (row by row, fields in order)."""
    labels = np.asarray(labels, dtype=object)
    names = np.tile(np.asarray(fields, dtype=object), len(labels))
    values = frame.loc[:, fields].to_numpy(dtype=float).ravel() if len(frame) else np.empty(0)
    return pd.DataFrame({"figure": np.repeat(labels, len(fields)) + " " + names, "field": names, "value": values})


def _ipu(frame: pd.DataFrame) -> np.ndarray:
    return "ipu " + frame["ipu"].astype(str).to_numpy(dtype=object)


def flatten_summary(report: Report) -> pd.DataFrame:
    return _numeric_fields(report.summary.figures())


def flatten_memory(report: Report) -> pd.DataFrame:
    by_ipu = report.memory.by_ipu()
    per_ipu = _grid(_ipu(by_ipu), by_ipu, ["always_live_bytes", "not_always_live_bytes", "total_bytes",
                                           "headroom_bytes", "used_pct", "max_tile_bytes", "oom_tiles"])
    cat = report.memory.by_category()
    live = np.where(cat["always_live"].to_numpy(dtype=bool), "always-live", "not-always-live").astype(object)
    labels = _ipu(cat) + " " + cat["category"].astype(str).to_numpy(dtype=object) + " " + live
    return pd.concat([per_ipu, _grid(labels, cat, ["bytes"])], ignore_index=True)


def flatten_liveness(report: Report) -> pd.DataFrame:
    peaks = report.liveness.peaks().rename(columns={"not_always_live_bytes": "peak not_always_live_bytes",
                                                    "total_bytes": "peak total_bytes"})
    rows = _grid(_ipu(peaks), peaks, ["peak_step", "peak not_always_live_bytes", "peak total_bytes"])
    rows["field"] = rows["field"].str.removeprefix("peak ")
    return rows


def flatten_stages(report: Report) -> pd.DataFrame:
    s = report.stages.summary()
    labels = ("stage " + s["stage"].astype(str) + " " + s["pass"].astype(str)).to_numpy(dtype=object)
    parts = [_numeric_fields(report.stages.figures()),
             _grid(labels, s, ["cycles_per_micro_batch", "busy_cycles", "utilisation_pct"])]
    if not report.imported:  # an imported trace has no blocks to split (the report says so); its ranks can be
        # thousands of stages, whose split alone took minutes
        split = report.stages.best_split()
        parts.append(pd.DataFrame([("best split predicted_step_cycles", "predicted_step_cycles",
                                    split.predicted_step_cycles), ("best split gain_pct", "gain_pct", split.gain_pct)],
                                  columns=FLAT_COLUMNS))
    return pd.concat(parts, ignore_index=True)


def flatten_exchange(report: Report) -> pd.DataFrame:
    bandwidth, by_kind = report.exchange.bandwidth(), report.exchange.by_kind()
    shares = [c for c in by_kind.columns if c.endswith("_pct")]  # the time share (and any share beside it)
    return pd.concat([_numeric_fields(report.exchange.figures()),
                      _grid(bandwidth["kind"].astype(str), bandwidth, ["bytes", "cycles", "achieved_bytes_per_s"]),
                      _grid(by_kind["kind"].astype(str), by_kind, shares)], ignore_index=True)


def unrecorded(section: str, frame: pd.DataFrame, a: Report, b: Report) -> pd.DataFrame:
    """A section's comparison (COLUMNS) whose figures of memory are missing (NaN: neither a number nor none of
    it) on the side whose memory is not recorded (an imported profile whose traces hold no [memory] events)."""
    for side, report in (("a", a), ("b", b)):
        if report.memory_recorded or section not in ("summary", "memory", "liveness"):
            continue
        missing = frame["figure"].isin(_imported.unrecorded_summary_fields(report.run)).to_numpy() \
            if section == "summary" else np.ones(len(frame), bool)
        frame.loc[missing, [side, "difference", "difference_pct"]] = np.nan
    return frame


FLATTEN: dict[str, Callable[[Report], pd.DataFrame]] = {
    "summary": flatten_summary, "memory": flatten_memory, "liveness": flatten_liveness,
    "stages": flatten_stages, "exchange": flatten_exchange}


def side_by_side(section: str, a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Outer-join two flattened reports (FLAT_COLUMNS) on the figure name: COLUMNS, in a's order with
    each figure only b holds after the figure it follows in b."""
    fa = a.drop_duplicates("figure").rename(columns={"value": "a"})
    fb = b.drop_duplicates("figure").rename(columns={"value": "b", "field": "field_b"})
    frame = fa.merge(fb, on="figure", how="outer", sort=False, indicator=True)
    in_a = frame["_merge"].to_numpy() != "right_only"
    in_b = frame["_merge"].to_numpy() != "left_only"
    # a's figures in a's order; a figure only b has goes where b has it: after the last figure both hold
    # that comes before it in b (so b's new optimiser-state row sits with the other categories, not at the end)
    rank_a = pd.Series(np.arange(len(fa), dtype=float), index=fa["figure"])
    after = pd.Series(fb["figure"].map(rank_a).ffill().fillna(-1.0).to_numpy(), index=fb["figure"])
    frame["_at"] = np.where(in_a, frame["figure"].map(rank_a), frame["figure"].map(after))
    frame["_then"] = np.where(in_a, -1, frame["figure"].map(pd.Series(np.arange(len(fb)), index=fb["figure"])))
    frame = frame.sort_values(["_at", "_then"], kind="stable")
    in_a, in_b = in_a[frame.index.to_numpy()], in_b[frame.index.to_numpy()]
    kinds = frame["field"].fillna(frame["field_b"]).map(kind).to_numpy()
    amount, quantity = kinds == AMOUNT, kinds != IDENTIFIER
    # an amount a side does not have is none of it there
    va = np.where(amount & ~in_a, 0.0, frame["a"].to_numpy(float))
    vb = np.where(amount & ~in_b, 0.0, frame["b"].to_numpy(float))
    same = va == vb
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.where(quantity, np.where(same, 0.0, vb - va), np.nan)
        pct = np.where(quantity & same, 0.0, np.where(quantity & (va != 0), 100.0 * diff / np.abs(va), np.nan))
    return pd.DataFrame({"section": section, "figure": frame["figure"].to_numpy(dtype=object), "a": va, "b": vb,
                         "difference": diff, "difference_pct": pct}, columns=COLUMNS)


# ---------------------------------------------------------------------------------- configuration


def _stage_layout(run: dict[str, Any]) -> str | None:
    """The stages as ``--stages`` spells them, ``first..last@ipu`` per stage (as ``popvision models`` prints)."""
    stages = run.get("stages")
    if not stages:
        return None

    def blocks(names: list[str]) -> str:
        return f"{names[0]}..{names[-1]}" if len(names) > 2 else ",".join(names)

    return " ".join(f"{blocks(list(s.get('blocks', [])))}@{s.get('ipu')}" for s in stages)


# setting -> how to read it from a Report; model-specific parameters and tensor locations are added
# key by key (``model_params.<name>``, ``tensor_locations.<name>``) from whatever either run holds
SETTINGS: dict[str, Callable[[Report], Any]] = {
    "model": lambda r: r.run.get("model"),
    "strategy": lambda r: r.run.get("strategy"),
    "mode": lambda r: r.run.get("mode"),
    "gradient_accumulation": lambda r: r.run.get("gradient_accumulation"),
    "replication_factor": lambda r: r.run.get("replication_factor"),
    "micro_batch_size": lambda r: r.run.get("micro_batch_size"),
    "device_iterations": lambda r: r.run.get("device_iterations"),
    "runs": lambda r: r.run.get("runs"),
    "host_processes": lambda r: r.run.get("host_processes", 1),
    "num_stages": lambda r: len(r.run.get("stages") or []) or None,
    "num_ipus": lambda r: r.target.get("num_ipus"),
    "stages": lambda r: _stage_layout(r.run),
    "tensor_sharding": lambda r: r.run.get("tensor_sharding"),
    "precision": lambda r: r.run.get("precision"),
    "optimiser": lambda r: r.run.get("optimiser"),
    "optimiser_state_type": lambda r: r.run.get("optimiser_state_type"),
    "first_moment_type": lambda r: r.run.get("first_moment_type"),
    "accum_type": lambda r: r.run.get("accum_type"),
    "enable_outlining": lambda r: r.run.get("enable_outlining"),
    "recompute": lambda r: r.run.get("recompute"),
    "available_memory_proportion": lambda r: r.run.get("available_memory_proportion"),
    "recompute_checkpoints": lambda r: r.run.get("recompute_checkpoints"),
    "attention_serialisation": lambda r: r.run.get("attention_serialisation"),
    "system": lambda r: r.target.get("system"),
    "arch": lambda r: r.target.get("arch"),
    "tiles_per_ipu": lambda r: r.target.get("tiles_per_ipu"),
    "bytes_per_tile": lambda r: r.target.get("bytes_per_tile"),
    "clock_hz": lambda r: r.target.get("clock_hz"),
}
NESTED_SETTINGS = ("tensor_locations", "model_params")  # dicts of the run compared key by key


def settings(report: Report, keys: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """A run's configuration as ``setting -> value``: SETTINGS, then each NESTED_SETTINGS key
    (``keys`` names the nested keys to give, missing ones as None; default: the run's own)."""
    out = {name: read(report) for name, read in SETTINGS.items()}
    for nest in NESTED_SETTINGS:
        held = report.run.get(nest) or {}
        for key in (sorted(held) if keys is None else keys[nest]):
            out[f"{nest}.{key}"] = held.get(key)
    return out


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool):  # True == 1 in Python, but "recompute: yes" is not "1"
        return x is y
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y


def configuration(a: Report, b: Report, every: bool = False) -> pd.DataFrame:
    """The settings of ``a`` and ``b`` (CONFIGURATION_COLUMNS) that differ (``every``: all of them)."""
    keys = {nest: sorted(set(a.run.get(nest) or {}) | set(b.run.get(nest) or {})) for nest in NESTED_SETTINGS}
    sa, sb = settings(a, keys), settings(b, keys)
    rows = [(name, sa[name], sb[name]) for name in sa if every or not _same(sa[name], sb[name])]
    return pd.DataFrame(rows, columns=CONFIGURATION_COLUMNS, dtype=object)


class Comparison:
    """Two profiles side by side: ``summary()``, ``memory()``, ``liveness()``, ``stages()``, ``exchange()``,
    and ``configuration()``, the settings that differ.

    ``a`` and ``b`` are the two ``Report``s (paths are opened, with ``planner`` for their insights'
    fixes, and closed by ``close()`` or on leaving a ``with`` block; Reports given are the caller's to
    close).
    """

    def __init__(self, a: str | os.PathLike[str] | Report, b: str | os.PathLike[str] | Report,
                 planner: Planner | None = None) -> None:
        self._opened: list[Report] = []
        self._planner = planner
        self.a = self._report(a)
        self.b = self._report(b)
        self._cache: dict[str, pd.DataFrame] = {}

    def _report(self, given: str | os.PathLike[str] | Report) -> Report:
        if isinstance(given, Report):
            return given
        try:
            report = Report(given, planner=self._planner)
        except BaseException:
            self.close()  # a (opened) when b cannot be
            raise
        self._opened.append(report)
        return report

    def close(self) -> None:
        """Close the Reports this comparison opened from paths."""
        while self._opened:
            self._opened.pop().close()

    def __enter__(self) -> Comparison:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def section(self, name: str) -> pd.DataFrame:
        """One section's comparison: COLUMNS."""
        if name not in self._cache:
            self._cache[name] = unrecorded(name, side_by_side(name, FLATTEN[name](self.a), FLATTEN[name](self.b)),
                                           self.a, self.b)
        return self._cache[name]

    def configuration(self, every: bool = False) -> pd.DataFrame:
        """The run settings that differ between a and b: ``[setting, a, b]`` (``every=True``: all of them)."""
        return configuration(self.a, self.b, every)

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
