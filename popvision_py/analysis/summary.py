"""Summary and insights: the run's key figures, and plain-language findings with fixes and their effect.

Inputs: the manifest, ``ops``, ``programs``, the trace, and the answers of the other analyzers.
Formulas and thresholds in docs/reports.md, "Summary and insights".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.exchange import ExchangeFigures
from popvision_py.analysis.stages import BestSplit, StageFigures
from popvision_py.analysis.tables import PASSES, Aggregates, Columns, Table, aggregates, lookup

INSIGHT_COLUMNS = ["severity", "topic", "finding", "suggestion", "effect"]
SEVERITIES = ("error", "warning", "info")

# Thresholds for findings (documented in docs/reports.md).
IMBALANCE_THRESHOLD = 1.10
BUBBLE_THRESHOLD_PCT = 25.0
EXCHANGE_BOUND_PCT = 30.0


@dataclass(frozen=True)
class Summary:
    """The run's key figures; see docs/reports.md for each formula."""

    model: str
    arch: str
    strategy: str
    mode: str
    num_ipus: int
    replication_factor: int
    micro_batch_size: int
    gradient_accumulation: int
    device_iterations: int
    clock_hz: float
    total_cycles: int
    iterations: int
    step_cycles: float
    step_s: float
    samples_per_step: int
    throughput_samples_per_s: float
    total_flops: int
    flop_utilisation_pct: float
    fits: bool
    oom_tiles: int
    worst_ipu: int
    worst_tile: int
    worst_tile_bytes: int
    bytes_per_tile: int


def total_flops(ops: Columns, programs: Columns, trace: Aggregates) -> int:
    """FLOPs over the trace: each op pass's ``flops`` x how often it ran (the most executions among its steps)."""
    if not len(programs) or not len(ops):
        return 0
    step_op, op_id = programs["op_id"].astype(np.int64), ops["op_id"].astype(np.int64)
    ex = lookup(aggregates(trace).executions, programs["ipu"], programs["step"])
    inside = step_op >= 0
    n_pass = len(PASSES) + 1
    n_op = int(max(step_op.max(), op_id.max())) + 1
    # an op pass ran as often as the most-run of its steps
    runs = np.zeros(n_op * n_pass, np.int64)
    keys = np.maximum(step_op, 0) * n_pass + programs.codes_in("pass", PASSES)
    np.maximum.at(runs, keys[inside], ex[inside])
    o_keys = op_id * n_pass + ops.codes_in("pass", PASSES)
    return int((ops["flops"].astype(np.int64) * runs[o_keys]).sum())


def figures(manifest: dict[str, Any], trace: Aggregates, iterations: int, flops: int,
            tiles: Any) -> Summary:
    """Key figures of the run (``tiles`` is ``memory.by_tile`` or its arrays, ``memory.TileTotals``)."""
    target, run = manifest["target"], manifest["run"]
    clock = float(target["clock_hz"])
    agg = aggregates(trace)
    total = agg.end_cycle - agg.start_cycle
    step_cycles = total / iterations if iterations else float("nan")
    step_s = step_cycles / clock if clock else float("nan")
    samples = int(run["micro_batch_size"]) * int(run["gradient_accumulation"]) * int(run["replication_factor"])
    throughput = samples / step_s if step_s and step_s > 0 and not math.isnan(step_s) else float("nan")
    precision = str(run.get("precision", "fp16"))
    peak_table = target.get("flops_per_cycle_per_tile")
    peak = peak_table.get(precision) if isinstance(peak_table, dict) else None
    if isinstance(peak, (int, float)) and peak > 0 and total > 0:
        util = 100.0 * flops / (total * int(target["num_ipus"]) * int(target["tiles_per_ipu"]) * float(peak))
    else:
        util = float("nan")
    if len(tiles):
        worst = int(np.argmax(np.asarray(tiles["total_bytes"])))  # the first of the largest, in IPU, tile order
        worst_ipu, worst_tile = int(np.asarray(tiles["ipu"])[worst]), int(np.asarray(tiles["tile"])[worst])
        worst_bytes = int(np.asarray(tiles["total_bytes"])[worst])
        oom = int(np.asarray(tiles["oom"]).sum())
    else:
        worst_ipu = worst_tile = -1
        worst_bytes = oom = 0
    return Summary(
        model=str(run["model"]), arch=str(target["arch"]), strategy=str(run["strategy"]), mode=str(run["mode"]),
        num_ipus=int(target["num_ipus"]), replication_factor=int(run["replication_factor"]),
        micro_batch_size=int(run["micro_batch_size"]), gradient_accumulation=int(run["gradient_accumulation"]),
        device_iterations=int(run["device_iterations"]), clock_hz=clock, total_cycles=total, iterations=iterations,
        step_cycles=float(step_cycles), step_s=float(step_s), samples_per_step=samples,
        throughput_samples_per_s=float(throughput), total_flops=int(flops), flop_utilisation_pct=float(util),
        fits=oom == 0, oom_tiles=oom, worst_ipu=worst_ipu, worst_tile=worst_tile, worst_tile_bytes=worst_bytes,
        bytes_per_tile=int(target["bytes_per_tile"]),
    )


def _bytes(n: float) -> str:
    return f"{int(round(n)):,} bytes"


def _cycles(n: float) -> str:
    return f"{n:,.0f} cycles"


_KIND_FIX = {
    "inter_ipu": "Move the stage boundary to where the activation is smallest, or use fewer stages, so less "
                 "crosses the IPU-Links.",
    "host": "Raise device_iterations (and prefetch) so each host call moves more data and stalls less.",
    "remote_buffer": "Keep the optimiser state on chip if memory allows, or use replicated tensor sharding to "
                     "split the streamed state over the replicas.",
    "all_reduce": "Raise gradient accumulation: the gradient all-reduce runs once per weight update, so its cost "
                  "per sample falls in proportion.",
    "internal": "Look at the costliest exchange steps: re-map the tensors they move so that producer and consumer "
                "share tiles.",
}


def insights(summary: Summary, run: dict[str, Any], memory_by_ipu: Table, oom: Table,
             worst_breakdown: Table | None, stage_figures: StageFigures, split: BestSplit,
             exchange: ExchangeFigures, kinds: Table, costliest: Table,
             bubble_with_double_accumulation_pct: float) -> Table:
    """Findings, each with a suggested fix and its estimated effect: INSIGHT_COLUMNS, most severe first."""
    rows: list[tuple[str, str, str, str, str]] = []
    S = stage_figures.num_stages

    # -- out of memory -------------------------------------------------------------------
    if len(oom):
        worst = {k: np.asarray(oom[k])[0] for k in ("ipu", "tile", "excess_bytes", "total_bytes")}
        ipu, tile, excess = int(worst["ipu"]), int(worst["tile"]), int(worst["excess_bytes"])
        n_ipus = len(np.unique(np.asarray(oom["ipu"])))
        cats: dict[str, float] = {}  # the worst tile's bytes per category, always-live or not
        for name, nbytes in zip(list(worst_breakdown["category"]), np.asarray(worst_breakdown["bytes"]).tolist()):
            cats[name] = cats.get(name, 0) + nbytes
        top = max(sorted(cats), key=lambda k: cats[k]) if cats else None
        largest = (f"; most of it {top} ({_bytes(cats[top])})" if top is not None else "")
        finding = (f"{len(oom):,} tile(s) on {n_ipus} IPU(s) are out of memory; the worst, tile {tile} on IPU {ipu}, "
                   f"holds {_bytes(worst['total_bytes'])}, {_bytes(excess)} over its {_bytes(summary.bytes_per_tile)}"
                   f"{largest}.")
        locations = run.get("tensor_locations") or {}
        opt = float(cats.get("optimiser_state", 0))
        if opt > 0 and str(locations.get("optimiser", "on_chip")) != "off_chip":
            enough = "enough" if opt >= excess else "not enough alone"
            rows.append(("error", "memory", finding,
                         "Offload the optimiser state to streaming memory (TensorLocations: optimiser off-chip).",
                         f"Saves {_bytes(opt)} on tile {tile} ({enough}: it needs {_bytes(excess)}); adds "
                         f"remote-buffer traffic at each weight update."))
        act = float(cats.get("stash", 0)) + float(cats.get("activations", 0))
        if act > 0 and not run.get("recompute", False):
            enough = "enough" if act >= excess else "not enough alone"
            rows.append(("error", "memory", finding,
                         "Recompute activations in the backward pass instead of stashing them.",
                         f"Saves up to {_bytes(act)} of activations and stash on tile {tile} ({enough}: it needs "
                         f"{_bytes(excess)}); costs about one more forward pass of compute."))
        scaling = sum(float(cats.get(c, 0)) for c in ("activations", "stash", "exchange_buffers"))
        mbs = int(run.get("micro_batch_size", 1) or 1)
        if scaling > 0 and mbs > 1:
            enough = "enough" if scaling / 2 >= excess else "not enough alone"
            rows.append(("error", "memory", finding,
                         f"Halve the micro-batch size (from {mbs} to {mbs // 2}) and double gradient accumulation "
                         f"to keep the batch.",
                         f"Activations, stash and exchange buffers scale with the micro-batch: saves about "
                         f"{_bytes(scaling / 2)} on tile {tile} ({enough}: it needs {_bytes(excess)})."))
        if len(memory_by_ipu) and S >= 1:
            total = float(np.asarray(memory_by_ipu["total_bytes"]).sum())
            saved = total / max(S, 1) - total / (S + 1)
            rows.append(("error", "memory", finding,
                         f"Split the model over more IPUs: {S + 1} pipeline stages instead of {S}.",
                         f"Memory per IPU falls on average from {_bytes(total / max(S, 1))} to "
                         f"{_bytes(total / (S + 1))}: {_bytes(saved)} saved per IPU."))

    # -- imbalance ----------------------------------------------------------------------------
    pipelined = str(run.get("strategy")) == "pipelined"  # sharded time does not depend on the balance
    if pipelined and S > 1 and np.isfinite(stage_figures.imbalance) and stage_figures.imbalance > IMBALANCE_THRESHOLD:
        finding = (f"Stage {stage_figures.bottleneck_stage} is the bottleneck: the slowest stage takes "
                   f"{stage_figures.imbalance:.2f}x the mean stage time per micro-batch.")
        if split.gain_pct > 0:
            plan = "; ".join(f"stage {stage} (IPU {ipu}): {blocks}" for stage, ipu, blocks in zip(
                split.table["stage"].tolist(), split.table["ipu"].tolist(), split.table["blocks"].tolist()))
            rows.append(("warning", "stages", finding, f"Move blocks between stages: {plan}.",
                         f"Time per step from {_cycles(split.current_step_cycles)} to "
                         f"{_cycles(split.predicted_step_cycles)} ({split.gain_pct:.1f}% faster)."))
        else:
            rows.append(("warning", "stages", finding,
                         "No contiguous split of whole blocks does better (within memory): split the bottleneck's "
                         "blocks more finely.",
                         f"A perfect balance would take {_cycles(stage_figures.balanced_step_cycles)} per step instead of "
                         f"{_cycles(stage_figures.step_cycles)} ({stage_figures.balance_gain_pct:.1f}% faster)."))

    # -- pipeline bubble ----------------------------------------------------------------------------
    if (S > 1 and str(run.get("strategy")) == "pipelined" and np.isfinite(stage_figures.bubble_pct)
            and stage_figures.bubble_pct > BUBBLE_THRESHOLD_PCT):
        rows.append(("warning", "stages",
                     f"IPUs are idle {stage_figures.bubble_pct:.1f}% of the time (a balanced pipeline of {S} stages and "
                     f"{stage_figures.micro_batches} micro-batches idles {stage_figures.ideal_bubble_pct:.1f}% in fill and "
                     f"flush).",
                     f"Raise gradient accumulation from {stage_figures.micro_batches} to {2 * stage_figures.micro_batches}.",
                     f"The fill-and-flush share falls from {stage_figures.ideal_bubble_pct:.1f}% to "
                     f"{bubble_with_double_accumulation_pct:.1f}%."))

    # -- exchange bound ------------------------------------------------------------------------------
    busy = exchange.total_cycles - exchange.idle_cycles
    comm = exchange.exchange_cycles + exchange.sync_cycles + exchange.stream_cycles
    if busy > 0 and 100.0 * comm / busy > EXCHANGE_BOUND_PCT:
        share = 100.0 * comm / busy
        parts = {"sync": exchange.sync_cycles}
        for kind, cycles in zip(list(kinds["kind"]), np.asarray(kinds["cycles"]).tolist()):
            parts[str(kind)] = int(cycles)
        top = max(parts, key=lambda k: parts[k])
        top_pct = 100.0 * parts[top] / busy
        detail = ""
        if len(costliest) and top != "sync":
            of_top = np.flatnonzero(np.asarray(costliest["kind"]) == top)
            if len(of_top):
                c = {k: np.asarray(costliest[k])[of_top[0]] for k in ("name", "step", "ipu", "total_cycles")}
                detail = (f"; the costliest step is {c['name'] or 'step ' + str(c['step'])} on IPU {int(c['ipu'])} "
                          f"({_cycles(c['total_cycles'])} in all)")
        fix = _KIND_FIX.get(top, "Merge small steps: fewer, larger compute sets need fewer syncs.")
        per_step = parts[top] / max(summary.iterations, 1) / max(summary.num_ipus, 1)
        rows.append(("warning", "exchange",
                     f"{share:.1f}% of busy time is exchange, sync and streaming rather than compute; {top} "
                     f"dominates with {top_pct:.1f}%{detail}.",
                     fix,
                     f"{top} costs about {_cycles(per_step)} per IPU per step; halving it saves "
                     f"{100.0 * parts[top] / 2 / exchange.total_cycles:.1f}% of the time."))

    if not rows:
        rows.append(("info", "summary", "No problems found: the model fits, the stages are balanced and compute "
                     "dominates.", "", ""))
    rows.sort(key=lambda r: SEVERITIES.index(r[0]))  # stable: errors first, each topic in order
    # one object array per column (what a frame of these tuples infers: all text): no row-wise inference
    columns = list(zip(*rows))
    out = {c: np.empty(len(rows), object) for c in INSIGHT_COLUMNS}
    for c, values in zip(INSIGHT_COLUMNS, columns):
        out[c][:] = values
    return Table(out)
