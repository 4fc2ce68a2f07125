"""Summary and insights: the run's key figures, and plain-language findings with fixes and their effect.

Inputs: the manifest, ``ops``, ``programs``, the trace, and the answers of the other analyzers.
Formulas and thresholds in docs/reports.md, "Summary and insights".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popvision_py.analysis.findings import fixes as F
from popvision_py.analysis.ipu import exchange as _exchange
from popvision_py.analysis.pipeline import stages as _stages
from popvision_py.analysis.ipu.exchange import ExchangeFigures
from popvision_py.analysis.host.input_wait import HostInput
from popvision_py.analysis.pipeline.stages import BestSplit, StageFigures
from popvision_py.analysis.common.tables import PASSES, Columns, Table, lookup
from popvision_py.analysis.trace.scan import Aggregates, aggregates
from popvision_py.format.schedule import run_schedule

INSIGHT_COLUMNS = ["severity", "topic", "finding", "suggestion", "effect", "command"]
SEVERITIES = ("error", "warning", "info")

# Thresholds for findings (documented in docs/reports.md).
IMBALANCE_THRESHOLD = 1.10
BUBBLE_THRESHOLD_PCT = 25.0
EXCHANGE_BOUND_PCT = 30.0
# A split into more stages is chosen to leave this share of the tile free: the estimate of a stage's
# worst tile was measured up to 7% low against runs of the suggested commands (docs/reports.md).
SPLIT_FIT_SHARE = 0.94


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
    idle_pct: float = float("nan")  # idle share of all IPU time: the figure ``popvision run`` prints


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
    return exact_dot(ops["flops"].astype(np.int64), runs[o_keys])


def exact_dot(a: np.ndarray, b: np.ndarray) -> int:
    """``sum(a * b)`` of non-negative int64 arrays (``a`` below 2**53, ``b`` below 2**31, fewer than
    2**31 rows), exact as a Python int where int64 would wrap: ``a`` is split into its high and low
    32 bits, so every product and every sum of them fits int64."""
    high, low = a >> 32, a & 0xFFFFFFFF
    products = (high * b, low * b)
    # each product < 2**52 (high) or 2**63 (low): summed as halves again so the sums fit too
    total = 0
    for part, shift in zip(products, (32, 0)):
        total += (int((part >> 32).sum()) << (32 + shift)) + (int((part & 0xFFFFFFFF).sum()) << shift)
    return total


def flop_utilisation_pct(target: dict[str, Any], run: dict[str, Any], flops: int, total_cycles: int) -> float:
    """``flops`` as a share of what every tile of every IPU could do in ``total_cycles`` at the run's
    precision (NaN without a peak or a length)."""
    precision = str(run.get("precision", "fp16"))
    peak_table = target.get("flops_per_cycle_per_tile")
    peak = peak_table.get(precision) if isinstance(peak_table, dict) else None
    if isinstance(peak, (int, float)) and peak > 0 and total_cycles > 0:
        return 100.0 * flops / (total_cycles * int(target["num_ipus"]) * int(target["tiles_per_ipu"]) * float(peak))
    return float("nan")


def figures(manifest: dict[str, Any], trace: Aggregates, iterations: int, flops: int,
            tiles: Any) -> Summary:
    """Key figures of the run (``tiles`` is ``memory.by_tile`` or its arrays, ``memory.TileTotals``)."""
    target, run = manifest["target"], manifest["run"]
    clock = float(target["clock_hz"])
    agg = aggregates(trace)
    total = agg.end_cycle - agg.start_cycle
    step_cycles = total / iterations if iterations else float("nan")
    step_s = step_cycles / clock if clock else float("nan")
    samples = run_schedule(run).samples_per_step
    throughput = samples / step_s if step_s and step_s > 0 and not math.isnan(step_s) else float("nan")
    util = flop_utilisation_pct(target, run, flops, total)
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
        bytes_per_tile=int(target["bytes_per_tile"]), idle_pct=float(_exchange.figures(trace).idle_pct),
    )


def _bytes(n: float) -> str:
    return F.bytes_text(n)


def _cycles(n: float) -> str:
    return f"{n:,.0f} cycles"


@dataclass(frozen=True)
class Evidence:
    """What the insights read besides the summary: the other analyzers' answers and the raw tile memory,
    and the planner their fixes are checked against (None: the findings alone, no fix suggested)."""

    run: dict[str, Any]
    target: dict[str, Any]
    oom: Table
    worst_breakdown: Table | None
    tile_memory: Columns
    tiles: Any  # memory.TileTotals
    blocks: Table
    costs: Any  # stages._Costs
    stage_figures: StageFigures
    split: BestSplit
    exchange: ExchangeFigures
    kinds: Table
    costliest: Table
    host: HostInput | None = None
    precision: list = field(default_factory=list)  # (finding, Fix) per option keeping FP32 variables in FP16
    planner: F.Planner | None = None


class _Findings:
    """Rows of the insights table; a fix is added only if the planner accepts its configuration, and
    without a planner none is: the finding is shown alone."""

    def __init__(self, ev: Evidence) -> None:
        self.ev = ev
        self.rows: list[tuple[str, str, str, str, str, str]] = []
        self.fixes: list[F.Fix | None] = []  # the fix of each row

    def add(self, severity: str, topic: str, finding: str, fix: F.Fix | None = None) -> bool:
        planner = self.ev.planner
        if fix is None or planner is None:  # no fix, or none that can be checked: the finding alone
            self.rows.append((severity, topic, finding, "", "", ""))
            self.fixes.append(None)
            return True
        if F.check(self.ev.run, fix.changes, planner) is not None:
            return False
        self.rows.append((severity, topic, finding, fix.suggestion, fix.effect,
                          F.command(self.ev.run, self.ev.target, fix.changes, fix.tag, planner)))
        self.fixes.append(fix)
        return True


def _memory_fixes(summary: Summary, ev: Evidence, planner: F.Planner) -> list[F.Fix]:
    """Configurations that lower the worst tile, each with the worst tile it is estimated to leave."""
    run, target = ev.run, ev.target
    capacity = summary.bytes_per_tile
    before = summary.worst_tile_bytes
    training = str(run.get("mode", "training")) != "inference"
    locations = run.get("tensor_locations") or {}
    replicas = int(run.get("replication_factor", 1) or 1)
    categories = set(ev.tile_memory.words("category").astype(str)) if len(ev.tile_memory) else set()

    def after(keep: dict[str, float]) -> int:
        return F.worst_tile_after(ev.tile_memory, target, keep).bytes

    out: list[F.Fix] = []
    if training and "optimiser_state" in categories and locations.get("optimiser", "on_chip") != "off_chip":
        est = after({"optimiser_state": 0.0})
        out.append(F.Fix("Offload the optimiser state to streaming memory (TensorLocations: optimiser off chip).",
                         f"{F.tile_change(before, est, capacity)}; adds remote-buffer traffic at each weight update.",
                         {"offload_optimiser": True}, "offload-optimiser", F.Predicted(worst_tile_bytes=est)))
    if (training and "optimiser_state" in categories and replicas > 1
            and not locations.get("replicated_tensor_sharding", False)):
        est = after({"optimiser_state": 1.0 / replicas})
        out.append(F.Fix(f"Shard the optimiser state over the {replicas} replicas (replicated tensor sharding).",
                         f"{F.tile_change(before, est, capacity)}; adds a gather of the updated weights over the "
                         f"replicas at each weight update.", {"replicated_tensor_sharding": True}, "rts",
                         F.Predicted(worst_tile_bytes=est)))
    if training and "stash" in categories and not run.get("recompute", False):
        est = after({"stash": 0.0})
        out.append(F.Fix("Recompute activations in the backward pass instead of stashing them.",
                         f"{F.tile_change(before, est, capacity)} at most (the stage inputs stay stashed); costs "
                         f"about one more forward pass of compute.", {"recompute": True}, "recompute",
                         F.Predicted(worst_tile_bytes=est)))
    mbs = int(run.get("micro_batch_size", 1) or 1)
    if mbs > 1:
        est = after({c: 0.5 for c in ("activations", "stash", "exchange_buffers")})
        if training:
            ga = int(run.get("gradient_accumulation", 1) or 1)
            change = {"micro_batch_size": mbs // 2, "gradient_accumulation": 2 * ga}
            keeps = "double gradient accumulation"
        else:
            di = int(run.get("device_iterations", 1) or 1)
            change, keeps = {"micro_batch_size": mbs // 2, "device_iterations": 2 * di}, "double device iterations"
        out.append(F.Fix(f"Halve the micro-batch size (from {mbs} to {mbs // 2}) and {keeps} to keep the samples per "
                         f"step.", f"Activations, stash and exchange buffers scale with the micro-batch: "
                         f"{F.tile_change(before, est, capacity)}.", change, f"micro-batch-{mbs // 2}",
                         F.Predicted(worst_tile_bytes=est)))
    more = _more_stages(summary, ev, planner)
    if more is not None:
        out.append(more)
    return out


def _more_stages(summary: Summary, ev: Evidence, planner: F.Planner) -> F.Fix | None:
    """The fewest more pipeline stages (over as many more IPUs) that fit, or the most the system and blocks allow."""
    run = ev.run
    stages = sorted(run.get("stages") or [], key=lambda s: int(s.get("stage", 0)))
    ipus = [int(s.get("ipu", k)) for k, s in enumerate(stages)]
    S = len(stages)
    # A pipeline whose last stage returns to the first IPU (a head tied to the embedding): the head
    # stays there, the other stages are split over more IPUs.
    returning = (str(run.get("strategy", "pipelined")) == "pipelined" and S > 2 and ipus[-1] == ipus[0]
                 and len(set(ipus)) == S - 1)
    if S == 0 or (len(set(ipus)) != S and not returning) or not len(ev.blocks):
        return None  # stages sharing IPUs: more stages would not mean more memory
    blocks, tail = ev.blocks, []
    if returning:
        keep = np.asarray(ev.blocks["stage"], np.int64) != int(stages[-1].get("stage", S - 1))
        blocks = Table({name: [v for v, k in zip(column, keep) if k] if isinstance(column, list)
                        else np.asarray(column)[keep] for name, column in ev.blocks.columns.items()})
        tail = [str(b) for b in stages[-1].get("blocks") or []]
        S -= 1
    capacity = summary.bytes_per_tile
    replicas, shards = int(run.get("replication_factor", 1) or 1), int(run.get("tensor_sharding", 1) or 1)
    n_blocks = len(blocks)
    largest = planner.SYSTEMS[planner.LARGEST_SYSTEM]
    stage_ipu = {int(s.get("stage", k)): int(s.get("ipu", k)) for k, s in enumerate(stages)}
    strategy = str(run.get("strategy", "pipelined"))
    training = str(run.get("mode", "training")) != "inference"
    locations = run.get("tensor_locations") or {}
    # fewer replicas make room for more stages, unless the optimiser state on chip is sharded over them
    replicas_may_fall = not (locations.get("replicated_tensor_sharding") and locations.get("optimiser") != "off_chip")
    best: tuple[int, int, F.StageSplit] | None = None
    for k in range(S + 1, n_blocks + 1):
        r = replicas if k * shards * replicas <= largest else (largest // (k * shards) if replicas_may_fall else 0)
        if r < 1:
            break
        split = F.stage_split(blocks, ev.tiles, stage_ipu, k)
        if split is None:
            break
        best = (k, r, split)
        if split.worst_tile_bytes.max() <= SPLIT_FIT_SHARE * capacity:
            break
    if best is None:
        return None
    k, r, split = best
    est = int(round(split.worst_tile_bytes.max()))
    if est >= summary.worst_tile_bytes:
        return None
    changes: dict[str, Any] = {"stages": split.stages + ([{"stage": k, "ipu": 0, "blocks": tail}] if tail else [])}
    ipus_used = k * shards * r
    k, S = k + bool(tail), S + bool(tail)  # counting the returning stage
    note = ""
    if r != replicas:
        changes["replication_factor"] = r
        note = f" and {r} replicas instead of {replicas} (fewer samples per step)"
    if planner.runs_as_pipeline(strategy, [s["ipu"] for s in changes["stages"]]):
        if training and int(run.get("gradient_accumulation", 1)) < planner.pipeline_stages(k, True):
            changes["gradient_accumulation"] = planner.pipeline_stages(k, True)
            note += (f" and gradient accumulation {changes['gradient_accumulation']} (2N-1, the least a {k}-stage "
                     f"pipeline runs)")
        if not training and int(run.get("device_iterations", 1)) < k:
            changes["device_iterations"] = k
            note += f" and {k} device iterations (the least a {k}-stage inference pipeline runs)"
    return F.Fix(f"Split the model over more IPUs: {k} stages instead of {S}{note} ({ipus_used} IPUs in all).",
                 f"Blocks split by memory; {F.tile_change(summary.worst_tile_bytes, est, capacity)}.",
                 changes, f"{k}-stages", F.Predicted(worst_tile_bytes=est))


_KIND_ADVICE = {
    "inter_ipu": "Move the stage boundaries to where the activations are smallest, so less crosses the IPU-Links.",
    "internal": "Look at the costliest exchange steps: re-map the tensors they move so that producer and consumer "
                "share tiles.",
    "sync": "Merge small steps: fewer, larger compute sets need fewer syncs.",
    "host": "Feed more data per host call.",
    "remote_buffer": "Stream less: the offloaded state or weights move at every use.",
    "all_reduce": "Reduce gradients less often.",
}


def _exchange_fix(top: str, summary: Summary, ev: Evidence, saving: str) -> F.Fix | None:
    """A configuration that cuts the dominant kind of exchange, with its memory cost."""
    run = ev.run
    training = str(run.get("mode", "training")) != "inference"
    locations = run.get("tensor_locations") or {}
    replicas = int(run.get("replication_factor", 1) or 1)
    unchanged = f"worst tile unchanged ({_bytes(summary.worst_tile_bytes)})"
    if top == "host":
        di = int(run.get("device_iterations", 1) or 1)
        return F.Fix(f"Raise device iterations from {di} to {2 * di} so each host call moves twice the data.",
                     f"The host call's latency is paid half as often per sample ({saving}); {unchanged}.",
                     {"device_iterations": 2 * di}, f"device-iterations-{2 * di}",
                     F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, faster=True))
    if top == "inter_ipu":
        stages = sorted(run.get("stages") or [], key=lambda st: int(st.get("stage", 0)))
        k = len(stages) - 1
        ipus = [int(st.get("ipu", i)) for i, st in enumerate(stages)]
        if k >= 1 and len(set(ipus)) == len(ipus) and len(ev.blocks):
            stage_ipu = {int(st.get("stage", i)): ipus[i] for i, st in enumerate(stages)}
            split = F.stage_split(ev.blocks, ev.tiles, stage_ipu, k)
            if split is not None and split.worst_tile_bytes.max() <= summary.bytes_per_tile:
                est = int(round(split.worst_tile_bytes.max()))
                return F.Fix(f"Use {k} stage(s) instead of {k + 1}: one IPU-Link crossing fewer per micro-batch.",
                             f"{saving}; blocks split by memory: "
                             f"{F.tile_change(summary.worst_tile_bytes, est, summary.bytes_per_tile)}.",
                             {"stages": split.stages}, f"{k}-stages", F.Predicted(worst_tile_bytes=est, faster=True))
    if top == "all_reduce" and training:
        ga = int(run.get("gradient_accumulation", 1) or 1)
        return F.Fix(f"Raise gradient accumulation from {ga} to {2 * ga}: the gradient all-reduce runs once per "
                     f"weight update, so its cost per sample halves.", f"{saving}; {unchanged}.",
                     {"gradient_accumulation": 2 * ga}, f"gradient-accumulation-{2 * ga}",
                     F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, faster=True))
    if (top == "remote_buffer" and training and replicas > 1 and not locations.get("replicated_tensor_sharding")
            and locations.get("optimiser") == "off_chip"):
        return F.Fix(f"Shard the streamed optimiser state over the {replicas} replicas (replicated tensor sharding): "
                     f"each replica streams 1/{replicas} of it.", f"{saving}; {unchanged}.",
                     {"replicated_tensor_sharding": True}, "rts",
                     F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, faster=True))
    return None


def _host_fix(summary: Summary, ev: Evidence) -> F.Fix | None:
    """More host processes (up to one per replica), or more replicas each fed by its own process.

    From the profile alone: a host-bound call lasts the host's time H (the loaders overlap the
    rest), and without the wait it would last D = H - wait; P processes prepare a call in H, so
    P x H / D processes keep up."""
    host = ev.host
    if host is None or not host.host_bound:
        return None
    run = ev.run
    replicas, processes = int(run.get("replication_factor", 1) or 1), host.host_processes
    call, device = host.call_cycles, host.call_cycles - host.wait_per_call_cycles
    clock = summary.clock_hz
    rate = lambda samples, cycles: samples / (cycles / clock)  # noqa: E731 - samples per second
    now = rate(host.samples_per_call, call)
    unchanged = f"worst tile unchanged ({_bytes(summary.worst_tile_bytes)})"
    needed = max(processes + 1, math.ceil(processes * call / device)) if device > 0 else processes + 1
    if processes < replicas:
        p = min(needed, replicas)
        after = max(device, call * processes / p)
        return F.Fix(f"Feed the {replicas} replicas from {p} host processes instead of {processes} (poprun instances, "
                     f"each with its own data loader).",
                     f"The host prepares a call's samples {p / processes:.1f}x as fast: a host call from "
                     f"{_cycles(call)} to about {_cycles(after)}, {now:,.0f} -> about "
                     f"{rate(host.samples_per_call, after):,.0f} samples/s; {unchanged}.",
                     {"host_processes": p}, f"host-processes-{p}",
                     F.Predicted(worst_tile_bytes=summary.worst_tile_bytes,
                                 samples_per_second=rate(host.samples_per_call, after), faster=True))
    r, p = 2 * replicas, 2 * processes
    return F.Fix(f"Run {r} replicas fed by {p} host processes (one host process per replica at most, so more "
                 f"processes need more replicas).",
                 f"Twice the samples per host call, prepared by twice the loaders in the same time: about "
                 f"{2 * now:,.0f} samples/s instead of {now:,.0f} (still host-bound); {unchanged}.",
                 {"replication_factor": r, "host_processes": p}, f"replicas-{r}-host-processes-{p}",
                 F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, samples_per_second=2 * now, faster=True))


def insights(summary: Summary, ev: Evidence) -> Table:
    """Findings, each with a suggested fix, its estimated effect and the command that applies it:
    INSIGHT_COLUMNS, most severe first. A fix the planner would refuse is never suggested, and with no
    planner (``Evidence.planner`` None) no fix is: each finding comes alone."""
    return findings(summary, ev)[0]


def findings(summary: Summary, ev: Evidence) -> tuple[Table, list[F.Fix | None]]:
    """``insights`` and, row by row, the ``Fix`` behind each (None for a finding without one)."""
    out = _Findings(ev)
    run = ev.run
    sf = ev.stage_figures
    S = sf.num_stages
    training = str(run.get("mode", "training")) != "inference"
    pipelined = ev.costs.pipelined if ev.costs is not None else False
    # stages sharing an IPU run one after another: a pipeline only over two IPUs or more
    pipelined = pipelined and ev.costs.ipus > 1

    # -- out of memory -------------------------------------------------------------------
    if len(ev.oom):
        worst = {k: np.asarray(ev.oom[k])[0] for k in ("ipu", "tile", "excess_bytes", "total_bytes")}
        ipu, tile, excess = int(worst["ipu"]), int(worst["tile"]), int(worst["excess_bytes"])
        n_ipus = len(np.unique(np.asarray(ev.oom["ipu"])))
        cats: dict[str, float] = {}  # the worst tile's bytes per category, always-live or not
        if ev.worst_breakdown is not None:
            for name, nbytes in zip(list(ev.worst_breakdown["category"]),
                                    np.asarray(ev.worst_breakdown["bytes"]).tolist()):
                cats[name] = cats.get(name, 0) + nbytes
        top = max(sorted(cats), key=lambda k: cats[k]) if cats else None
        largest = f"; most of it {top} ({_bytes(cats[top])})" if top is not None else ""
        finding = (f"{len(ev.oom):,} tile(s) on {n_ipus} IPU(s) are out of memory; the worst, tile {tile} "
                   f"on IPU {ipu}, holds {_bytes(worst['total_bytes'])}, {_bytes(excess)} over its "
                   f"{_bytes(summary.bytes_per_tile)}"
                   f"{largest}.")
        if ev.planner is None:  # no fix can be checked, nor can it be said that none helps
            out.add("error", "memory", finding)
        elif not sum(out.add("error", "memory", finding, fix) for fix in _memory_fixes(summary, ev, ev.planner)):
            out.add("error", "memory", finding + " No change of the mapping this report can estimate (offloading, "
                    "recomputation, a smaller micro-batch, more stages within the largest system) lowers "
                    "the worst tile.")

    # -- host-bound ------------------------------------------------------------------------------
    # A host-bound call lasts as long as the host's loaders whatever the IPUs do: findings about the
    # IPUs' time (balance, bubble, exchange) would shorten only the part of the call that already
    # waits, so they are left out.
    host = ev.host
    host_bound = host is not None and host.host_bound
    if host_bound:
        finding = (f"The run is host-bound: the IPUs wait {host.input_wait_pct:.1f}% of each host call "
                   f"({_cycles(host.wait_per_call_cycles)} of {_cycles(host.call_cycles)}) for the host's data loaders "
                   f"to prepare its {host.samples_per_call:,} samples; more IPUs alone or a faster mapping "
                   f"would not help (findings about the IPUs' time are left out).")
        fix = _host_fix(summary, ev)
        if fix is None or not out.add("warning", "host", finding, fix):
            kind = str(ev.run.get("host_input") or "tensor")
            rate = "" if kind == "synthetic" else f"`--assume host_{kind}_samples_per_s_per_core=...` shows its effect"
            out.add("warning", "host", finding + " A faster data loader would (fewer transforms per sample, more "
                    f"workers: --loader-workers){'; ' + rate if rate else ''}.")

    # -- imbalance ----------------------------------------------------------------------------
    # one stage after another, the step takes the sum of the stages whatever the balance
    if not host_bound and pipelined and S > 1 and np.isfinite(sf.imbalance) and sf.imbalance > IMBALANCE_THRESHOLD:
        finding = (f"Stage {sf.bottleneck_stage} is the bottleneck: the slowest stage takes "
                   f"{sf.imbalance:.2f}x the mean stage time per micro-batch.")
        split = ev.split
        added = False
        if split.gain_pct > 0:
            rows = split.table
            stages = [{"stage": int(s), "ipu": int(i), "blocks": str(b).split(",")}
                      for s, i, b in zip(rows["stage"].tolist(), rows["ipu"].tolist(), rows["blocks"].tolist())]
            plan = "; ".join(f"stage {s['stage']} (IPU {s['ipu']}): {','.join(s['blocks'])}" for s in stages)
            worst = int(np.asarray(rows["worst_tile_bytes"]).max())
            added = out.add("warning", "stages", finding, F.Fix(
                f"Move blocks between stages: {plan}.",
                f"Time per step from {_cycles(split.current_step_cycles)} to {_cycles(split.predicted_step_cycles)} "
                f"({split.gain_pct:.1f}% faster); "
                f"{F.tile_change(summary.worst_tile_bytes, worst, summary.bytes_per_tile)}.",
                {"stages": stages}, "balanced-stages",
                F.Predicted(worst_tile_bytes=worst, step_cycles=float(split.predicted_step_cycles), faster=True)))
        if not added:
            out.add("warning", "stages", finding + (
                f" No contiguous split of whole blocks does better within memory; a perfect balance would take "
                f"{_cycles(sf.balanced_step_cycles)} per step instead of {_cycles(sf.step_cycles)} "
                f"({sf.balance_gain_pct:.1f}% faster): split the bottleneck's blocks more finely in the model."))

    # -- pipeline bubble ----------------------------------------------------------------------------
    if not host_bound and pipelined and S > 1 and np.isfinite(sf.bubble_pct) and sf.bubble_pct > BUBBLE_THRESHOLD_PCT:
        finding = (f"IPUs are idle {sf.bubble_pct:.1f}% of the time (a balanced pipeline of {S} stages and "
                   f"{sf.micro_batches} micro-batches idles {sf.ideal_bubble_pct:.1f}% in fill and flush).")
        doubled = _stages.ideal_bubble_pct(ev.costs, 2 * sf.micro_batches)
        unchanged = f"worst tile unchanged ({_bytes(summary.worst_tile_bytes)})"
        if training:
            ga = int(run.get("gradient_accumulation", sf.micro_batches) or 1)
            fix = F.Fix(f"Raise gradient accumulation from {ga} to {2 * ga} (more micro-batches per fill and flush).",
                        f"The fill-and-flush share falls from {sf.ideal_bubble_pct:.1f}% to "
                        f"{doubled:.1f}%; {unchanged}.",
                        {"gradient_accumulation": 2 * ga}, f"gradient-accumulation-{2 * ga}",
                        F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, faster=True))
        else:
            di = int(run.get("device_iterations", 1) or 1)
            fix = F.Fix(f"Raise device iterations from {di} to {2 * di}: an inference pipeline fills and flushes once "
                        f"per host call, so more iterations per call share it.",
                        f"The fill-and-flush share falls from {sf.ideal_bubble_pct:.1f}% to "
                        f"{doubled:.1f}%; {unchanged}.",
                        {"device_iterations": 2 * di}, f"device-iterations-{2 * di}",
                        F.Predicted(worst_tile_bytes=summary.worst_tile_bytes, faster=True))
        out.add("warning", "stages", finding, fix)

    # -- exchange bound ------------------------------------------------------------------------------
    ex = ev.exchange
    busy = ex.total_cycles - ex.idle_cycles
    comm = ex.exchange_cycles + ex.sync_cycles + ex.stream_cycles
    if not host_bound and busy > 0 and 100.0 * comm / busy > EXCHANGE_BOUND_PCT:
        share = 100.0 * comm / busy
        parts = {"sync": ex.sync_cycles}
        for kind, cycles in zip(list(ev.kinds["kind"]), np.asarray(ev.kinds["exposed_cycles"]).tolist()):
            parts[str(kind)] = int(cycles)
        top = max(parts, key=lambda k: parts[k])
        top_pct = 100.0 * parts[top] / busy
        detail = ""
        if len(ev.costliest) and top != "sync":
            of_top = np.flatnonzero(np.asarray(ev.costliest["kind"]) == top)
            if len(of_top):
                c = {k: np.asarray(ev.costliest[k])[of_top[0]]
                     for k in ("name", "step", "ipu", "executions", "total_cycles")}
                runs, steps = int(c["executions"]), max(summary.iterations, 1)
                # summed over the whole trace, where one execution (a host call) may span many steps: say so
                times = f"{_cycles(c['total_cycles'])} in {runs:,} execution{'' if runs == 1 else 's'}"
                if steps > 1:
                    times += f" over the trace's {steps:,} steps, about {_cycles(c['total_cycles'] / steps)} a step"
                name = c["name"] or f"step {c['step']}"
                detail = f"; the costliest step is {name} on IPU {int(c['ipu'])} ({times})"
        per_step = parts[top] / max(summary.iterations, 1) / max(summary.num_ipus, 1)
        saving = (f"{top} costs about {_cycles(per_step)} per IPU per step; halving it saves "
                  f"{100.0 * parts[top] / 2 / ex.total_cycles:.1f}% of the time")
        finding = (f"{share:.1f}% of busy time is exchange, sync and streaming rather than compute; {top} "
                   f"dominates with {top_pct:.1f}%{detail}.")
        fix = _exchange_fix(top, summary, ev, saving)
        if fix is None or not out.add("warning", "exchange", finding, fix):
            out.add("warning", "exchange", f"{finding} {_KIND_ADVICE.get(top, '')} ({saving}.)".replace("  ", " "))

    if not out.rows:
        out.add("info", "summary", "No problems found: the model fits, the stages are balanced and compute "
                "dominates.")
    # -- FP32 variables that could be FP16 (analysis/findings/insights.py): a saving, a problem only when out of
    # memory. A fix that leaves the worst tile as it is (the saving lands on other tiles) gains nothing the
    # run can use: not listed (the variables stay in the summary's FP32 table)
    for finding, fix in ev.precision:
        estimated = fix.predicted.worst_tile_bytes
        if estimated is not None and estimated >= summary.worst_tile_bytes:
            continue
        severity = "info" if summary.fits else "warning"
        if not out.add(severity, "precision", finding, fix):
            out.add(severity, "precision", f"{finding} {F.check(ev.run, fix.changes, ev.planner)}")
    # stable: errors first, each topic in order
    order = sorted(range(len(out.rows)), key=lambda k: SEVERITIES.index(out.rows[k][0]))
    rows = [out.rows[k] for k in order]
    # one object array per column (what a frame of these tuples infers: all text): no row-wise inference
    columns = list(zip(*rows))
    table = {c: np.empty(len(rows), object) for c in INSIGHT_COLUMNS}
    for c, values in zip(INSIGHT_COLUMNS, columns):
        table[c][:] = values
    return Table(table), [out.fixes[k] for k in order]
