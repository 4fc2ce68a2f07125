"""An imported pipeline re-timed: the schedule's graph with measured costs, and its what-ifs.

A ``torch.distributed.pipelining`` run, imported from its ranks' profiler traces, is a graph: each rank
runs its *actions* (the forward or backward of one micro-batch on one stage) in the order its schedule
gives (``schedules.schedule_order``), one after the other, and an action that needs another rank's output (a
forward the previous stage's activations, a backward the next stage's gradients) starts no earlier
than that output arrives. ``measure`` reads from the trace, per action:

- ``cost``: its compute rows (the chunk's operators; a chunk cut by a receive is the sum of its pieces);
- ``glue``: the recorded work after it on its rank before the next action (the sends it posts, the
  loss, the schedule's own operators), not the waits;
- its input's arrival: the end of the last block of waiting rows (idle or receive) before it. Where
  the action asked for its input before the sender was done, it waited, and the arrival less the
  sender's end is a sample of the transfer's *latency* (the lower envelope, 10th percentile, of the
  samples is used, a step's first micro-batch apart). Where the input was there already, the waiting
  rows are the rank's own time (``receive``: taking the input, gaps no wait explains);
- each rank's ``head`` (recorded work before its first action in a profiler step: the step's input,
  made or loaded and cut into micro-batches, which a what-if scales with the micro-batches) and
  ``tail`` (the work it recorded after its last action: the optimiser's step, zeroing the gradients;
  not its waits).

``simulate`` list-schedules the graph: an action starts when its rank is free (the previous action,
its glue and its own receive time done) and its input has arrived (the sender's end plus the
latency); a rank ends its step once its last send to another rank has been taken (torch's schedules
wait for their sends before the step returns), then runs its tail. Three steps are chained, each rank
starting a step when it ended the last, and the step time is the last step's duration averaged over
the ranks, as the measured step is (each rank's span of a ``ProfilerStep``, from its first recorded
work).

Re-timed with every action's own measured cost, in the order each rank ran, the graph reproduces each
measured step (``Replay.retimed``, ``residual_pct``). A what-if (``Replay.predict``) reuses each
(pass, stage)'s costs for another micro-batch count, schedule, stage scaling or a straggler made as
fast as the mean, and answers for the run without the profiler: the re-timing gives the what-if's step
over the recorded run's, both from the same costs, and the recorded run's plain step
(``analysis/pipeline/plain.py``: timed, or bounded) turns it into time. The point takes the medians of
the measured costs; the range, that ratio re-timed once per recorded step with that step's own costs
(how the what-if's answer moves as the costs vary from step to step), from its lowest times the low
end of the plain step's range to its highest times the high end (``plain.spread_range``: the next
run's step, as far either way as this run's plain steps spread). The critical path is
``analysis/pipeline/critical_path.py``'s.

What the model leaves out (memory, contention, a descheduled rank): docs/real-traces.md, "Not modelled".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.imported.ranks import ideal_bubble_pct, receiving
from popvision_py.analysis.pipeline.plain import NONE, ProfilerCost, profiler_cost
from popvision_py.analysis.pipeline.schedules import B, F, SCHEDULES, ReplayError, schedule_order, source

LATENCY_QUANTILE = 10  # the lower envelope of the sender-end-to-arrival gaps (see the module's docstring)
CHAINED_STEPS = 3


# -- what the trace measured ----------------------------------------------------------------------


@dataclass
class MeasuredPipeline:
    """One imported pipeline's actions and their measured costs (see the module's docstring).

    ``actions``: one row per (iteration, pass, stage, micro_batch): rank, start, end (its compute rows'
    first start and last end), cost, glue, glue_comm (the exchange part of glue), arrival (NaN where
    no receive fed it). ``steps``: one row per (iteration, rank): start, end, head, tail.
    """

    schedule: str
    world: int
    stages_per_rank: int
    micro_batches: int
    stage_rank: dict[int, int]
    actions: pd.DataFrame
    steps: pd.DataFrame
    latency: dict[tuple[str, bool], float]  # (pass, first micro-batch) -> ns from the sender's end to the input
    latency_samples: dict[tuple[str, bool], np.ndarray] = field(default_factory=dict)
    profiler: ProfilerCost = NONE  # the plain step against the profiled one (analysis/pipeline/plain.py)

    @property
    def n_stages(self) -> int:
        return len(self.stage_rank)

    def step_ns(self) -> np.ndarray:
        """Each profiled step's duration, averaged over the ranks (ns)."""
        d = self.steps.assign(d=self.steps["end"] - self.steps["start"])
        return d.groupby("iteration")["d"].mean().to_numpy(float)

    def measured_steps_ns(self) -> np.ndarray:
        """The profiled steps the run's step is taken over: the first left out where there are three or more
        (the ranks start it from wherever the steps before left them, not from the pipeline's steady state)."""
        steps = self.step_ns()
        return steps[1:] if len(steps) >= 3 else steps

    def measured_step_ns(self) -> float:
        """The run's step: the median of ``measured_steps_ns``."""
        return float(np.median(self.measured_steps_ns()))


def _schedule_name(run: Mapping[str, Any]) -> str:
    name = str((run.get("import") or {}).get("schedule") or "")
    for known in sorted(SCHEDULES, key=len, reverse=True):
        if known.lower() in name.lower().replace("schedule", ""):
            return known
    return name


def pipeline_stages(run: Mapping[str, Any]) -> dict[int, int]:
    """The stage -> rank map of an imported pipeline's run; ReplayError (one sentence) for any other run."""
    if run.get("source") != "pytorch-profiler":
        raise ReplayError("Re-timing reads a profile imported from PyTorch traces (popvision import); this one "
                          "was emulated: its what-ifs are popvision tune's.")
    stages = run.get("stages") or []
    stage_rank = {int(s["stage"]): int(s["ipu"]) for s in stages}
    world = len(set(stage_rank.values()))
    if world < 2 or str(run.get("strategy")) != "pipelined":
        raise ReplayError(f"The profile has {world} rank(s) and no pipeline between ranks: there is nothing to "
                          f"re-time.")
    if sorted(stage_rank) != list(range(len(stage_rank))) or any(r != s % world for s, r in stage_rank.items()):
        raise ReplayError("The stages do not run on ranks stage mod world, as torch.distributed.pipelining places "
                          "them; this run's placement cannot be re-timed.")
    return stage_rank


def measure(trace: pd.DataFrame, receives: np.ndarray, run: Mapping[str, Any]) -> MeasuredPipeline:
    """The actions of an imported pipeline from its trace rows (with ``receives``: whether each row runs
    a program whose name holds "recv", ``receiving``) and its manifest's run. ReplayError when there is
    no pipeline to re-time."""
    stage_rank = pipeline_stages(run)
    world = len(set(stage_rank.values()))
    t = trace.assign(receives=receives, dur=(trace["end_cycle"] - trace["start_cycle"]).to_numpy())
    t = t.sort_values(["iteration", "ipu", "start_cycle"], kind="stable").reset_index(drop=True)
    passes = t["pass"].astype(str).to_numpy()
    phase = t["phase"].astype(str).to_numpy()
    is_action = (phase == "compute") & (t["micro_batch"].to_numpy() >= 0) & np.isin(passes, (F, B)) & (
        t["stage"].to_numpy() >= 0)
    if not is_action.any():
        raise ReplayError("The traces name no forward or backward chunk of a micro-batch: there is nothing to "
                          "re-time.")
    key = ["iteration", "pass", "stage", "micro_batch"]
    # each row's action: its own if it is an action row, else the action before it on its rank and step
    # (what it follows: glue) and the action after it (what a receive feeds)
    codes = np.full(len(t), -1)
    acts = t.loc[is_action, key].astype({"pass": str}).drop_duplicates().reset_index(drop=True)
    acts["id"] = np.arange(len(acts))
    codes[is_action] = t.loc[is_action, key].astype({"pass": str}).merge(acts, on=key, how="left")["id"].to_numpy()
    grp = t["iteration"].astype(np.int64).to_numpy() * (1 << 20) + t["ipu"].to_numpy()
    ids = pd.Series(np.where(codes >= 0, codes, np.nan))
    after = ids.groupby(grp).ffill().to_numpy()
    before = ids.groupby(grp).bfill().to_numpy()
    recv = (phase == "exchange") & t["receives"].to_numpy()
    idle = phase == "idle"
    glue_row = ~is_action & ~idle & ~recv & ~np.isnan(after) & ~np.isnan(before)
    per = t.loc[is_action].groupby(codes[is_action]).agg(start=("start_cycle", "min"), end=("end_cycle", "max"),
                                                          cost=("dur", "sum"), rank=("ipu", "first"))
    acts = acts.join(per, on="id")
    glue = pd.Series(t["dur"].to_numpy()[glue_row]).groupby(after[glue_row].astype(int)).sum()
    glue_comm_rows = glue_row & (phase == "exchange")
    glue_comm = pd.Series(t["dur"].to_numpy()[glue_comm_rows]).groupby(after[glue_comm_rows].astype(int)).sum()
    # an action's input: the last block of waiting rows (idle or receive) before its last compute row,
    # on its rank, after the previous action (a receive inside a chunk, as GPipe's, cuts it in pieces)
    # (not the idle rows before a rank's first recorded work of a step: see the steps' spans below)
    first_work = t[~idle].groupby(["iteration", "ipu"])["start_cycle"].min()
    began = first_work.reindex(pd.MultiIndex.from_arrays([t["iteration"], t["ipu"]])).to_numpy(float)
    waiting = (idle | recv) & ~np.isnan(before) & (t["start_cycle"].to_numpy() >= began)
    block = np.cumsum(~waiting | (np.r_[True, grp[1:] != grp[:-1]]))  # consecutive waiting rows: one block
    blocks = pd.DataFrame({"block": block[waiting], "action": before[waiting].astype(int),
                           "start": t["start_cycle"].to_numpy()[waiting], "end": t["end_cycle"].to_numpy()[waiting]})
    last = blocks.groupby("block").agg(action=("action", "first"), start=("start", "min"), end=("end", "max"))
    last = last.reset_index().sort_values("end").groupby("action").last()
    arrival, asked = last["end"], last["start"]
    receiving = last["end"] - last["start"]
    earlier = blocks[blocks["block"].to_numpy() != blocks["action"].map(last["block"]).to_numpy()]
    acts["glue"] = acts["id"].map(glue).fillna(0).astype(np.int64)
    acts["glue_comm"] = acts["id"].map(glue_comm).fillna(0).astype(np.int64)
    acts["asked"] = acts["id"].map(asked).astype(float)
    acts["arrival"] = acts["id"].map(arrival).astype(float)
    acts["receive"] = acts["id"].map(receiving).fillna(0).astype(np.int64)

    # each rank's profiled steps: span, head (recorded work before its first action), tail
    # a rank's step starts at its first recorded work: the idle rows before it are the time before the
    # profiler's window reached it (the first profiled step), not work of the step
    span = t[~idle].groupby(["iteration", "ipu"]).agg(start=("start_cycle", "min"), end=("end_cycle", "max"))
    first_last = acts.groupby(["iteration", "rank"]).agg(first=("start", "min"), last=("end", "max"),
                                                         last_id=("end", "idxmax"))
    steps = span.join(first_last.rename_axis(["iteration", "ipu"]), how="inner").reset_index()
    pre = ~is_action & ~idle & ~recv & np.isnan(after)
    steps["head"] = _per_step(t, pre, steps)
    # the glue after the last action is the tail's, not a next action's; the tail is the work the rank
    # recorded after its last action (the optimiser's step), not its waits: a rank whose sends are taken
    # late (its receiver still busy) waits for them before it ends the step, which ``simulate`` models
    last_ids = acts.loc[steps["last_id"].to_numpy(), "id"].to_numpy()
    acts.loc[acts["id"].isin(last_ids), ["glue", "glue_comm"]] = 0
    post = ~is_action & ~idle & ~recv & np.isnan(before) & ~np.isnan(after)
    steps["tail"] = _per_step(t, post, steps)
    steps = steps.rename(columns={"ipu": "rank"}).drop(columns=["last_id"])

    micro_batches = int(acts["micro_batch"].max()) + 1
    per_rank = max(1, len(stage_rank) // world)
    schedule = _schedule_name(run)
    if schedule not in SCHEDULES:  # a multi-stage schedule the import did not name: known by its order
        schedule = _schedule_by_order(acts, world, per_rank, micro_batches, schedule)
    acts["sender_end"] = _senders(acts, len(stage_rank))
    # the rank's own time before the action: taking an input that was there when it asked, or, for an
    # action with no input from another rank, a gap no wait explains (a wait is not the rank's time)
    own_time = (acts["asked"] >= acts["sender_end"]) | acts["sender_end"].isna()
    # the waiting rows before the last block are the rank's own gaps too (between a send and the loss...),
    # but only once its input had been sent: before that, the rank was waiting for it (GPipe's first
    # stage, done with its forwards, waits for the first gradient in more than one block)
    sent = earlier["action"].map(acts.set_index("id")["sender_end"]).to_numpy(float)
    begin = earlier["start"].to_numpy(float)
    begin = np.where(np.isnan(sent), begin, np.maximum(begin, sent))
    gaps = np.maximum(earlier["end"].to_numpy(float) - begin, 0.0)
    gaps = pd.Series(gaps).groupby(earlier["action"].to_numpy()).sum()
    acts["earlier_gaps"] = acts["id"].map(gaps).fillna(0).astype(np.int64)
    acts["receive"] = np.where(own_time, acts["receive"], 0) + acts["earlier_gaps"]
    acts["first"] = acts["micro_batch"] == 0
    latency, samples = _latencies(acts)
    return MeasuredPipeline(schedule, world, per_rank, micro_batches, stage_rank, acts, steps, latency, samples)


def _per_step(t: pd.DataFrame, rows: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The summed durations of the trace rows ``rows`` per (iteration, rank) of ``steps`` (0 where none)."""
    by = [t["iteration"].to_numpy()[rows], t["ipu"].to_numpy()[rows]]
    summed = pd.Series(t["dur"].to_numpy()[rows]).groupby(by).sum()
    keys = pd.MultiIndex.from_arrays([steps["iteration"], steps["ipu"]])
    return summed.reindex(keys, fill_value=0).to_numpy(np.int64)


def recorded_orders(acts: pd.DataFrame, world: int) -> dict[int, list[list[tuple[str, int, int]]]]:
    """Each profiled step's actions on each rank in the order they ran: iteration -> [rank] -> actions."""
    out: dict[int, list[list[tuple[str, int, int]]]] = {}
    ordered = acts.sort_values(["iteration", "rank", "start"], kind="stable")
    for (it, rank), g in ordered.groupby(["iteration", "rank"], sort=True):
        orders = out.setdefault(int(it), [[] for _ in range(world)])
        orders[int(rank)] = list(zip(g["pass"], g["stage"].astype(int), g["micro_batch"].astype(int)))
    return out


def _schedule_by_order(acts: pd.DataFrame, world: int, per_rank: int, m: int, named: str) -> str:
    """The schedule whose order of actions every rank ran in the first profiled step."""
    first = next(iter(recorded_orders(acts, world).values()))
    for schedule in SCHEDULES:
        try:
            if schedule_order(schedule, world, per_rank, m) == first:
                return schedule
        except ReplayError:
            continue
    raise ReplayError(f"The traces ran schedule {named or 'unknown'!r}, whose order of actions is none of "
                      f"{', '.join(SCHEDULES)}'s: it cannot be re-timed.")


def _senders(acts: pd.DataFrame, n_stages: int) -> np.ndarray:
    """Each action's sender's end (NaN where its input is not another stage's output)."""
    index = acts.set_index(["iteration", "pass", "stage", "micro_batch"])["end"]
    src = np.where(acts["pass"] == F, acts["stage"] - 1, acts["stage"] + 1)
    keys = pd.MultiIndex.from_arrays([acts["iteration"], acts["pass"], src, acts["micro_batch"]])
    end = index.reindex(keys).to_numpy(float, copy=True)
    end[(src < 0) | (src >= n_stages)] = np.nan
    return end


def _latencies(acts: pd.DataFrame) -> tuple[dict[tuple[str, bool], float], dict[tuple[str, bool], np.ndarray]]:
    """Per (pass, first micro-batch of the step), the transfer latency (ns): where the receiver asked for
    its input before the sender was done (it waited), the input's arrival less the sender's end; the
    lower envelope of those gaps. A class in which no receiver ever waited (its transfers were always
    early) takes the smallest latency of the classes measured; where none waited at all, the lower
    envelope of every gap (an upper bound)."""
    samples, everything = {}, []
    for kind in (F, B):
        for first in (True, False):  # a step's first transfer carries its one-off set-up
            rows = acts[(acts["pass"] == kind) & (acts["first"] == first) & acts["arrival"].notna()
                        & acts["sender_end"].notna()]
            gaps = (rows["arrival"] - rows["sender_end"]).to_numpy(float)
            waited = (rows["asked"].to_numpy(float) < rows["sender_end"].to_numpy(float)) & (gaps >= 0)
            samples[(kind, first)] = gaps[waited]
            everything.append(gaps[gaps >= 0])
    measured = {k: float(np.percentile(v, LATENCY_QUANTILE)) for k, v in samples.items() if len(v)}
    pooled = np.concatenate(everything)
    fallback = min(measured.values()) if measured else (float(np.percentile(pooled, LATENCY_QUANTILE))
                                                        if len(pooled) else 0.0)
    return {k: measured.get(k, fallback) for k in samples}, samples


def from_profile(profile: Any) -> MeasuredPipeline:
    """``measure`` on an open profile (``format.reader``): its trace rows, their programs' names, its run."""
    pipeline_stages(profile.run)  # nothing is read for a profile that has no pipeline to re-time
    trace = profile.read_pandas("trace")
    programs = profile.read_table("programs", ["ipu", "step", "name"])
    m = measure(trace, receiving(trace["ipu"].to_numpy(), trace["step"].to_numpy(), programs), profile.run)
    m.profiler = profiler_cost(m.measured_steps_ns(), profile.run, trace, m.steps["iteration"].nunique())
    return m


# -- the list schedule ------------------------------------------------------------------------------


@dataclass
class SimulatedRun:
    """A simulated run: per action (rank, pass, stage, micro_batch, step) its start, end and what bound
    its start ("rank": the rank's previous work, "input": the other rank's output, "start")."""

    actions: pd.DataFrame
    step_ns: float
    rank_step_ns: np.ndarray
    busy_ns: dict[int, float]  # per stage, one step's action costs

    @property
    def bubble_pct(self) -> float:
        """The share of the ranks' step time outside the passes' compute, as the schedule's ideal bubble
        counts it (sends, receives and the step's own set-up are not the pipeline's work)."""
        total = self.step_ns * len(self.rank_step_ns)
        busy = float(self.actions.loc[self.actions["step"] == self.actions["step"].max(), "cost"].sum())
        return max(0.0, 100.0 * (1.0 - busy / total)) if total else 0.0


# (step, pass, stage, mb) -> (cost, glue, receive): the action's compute, the recorded work after it,
# the work of taking an input that was there when asked
CostFn = Callable[[int, str, int, int], tuple[float, float, float]]


def simulate(orders: list[list[tuple[str, int, int]]], stage_rank: Mapping[int, int], cost: CostFn,
             latency: Mapping[tuple[str, bool], float], head: np.ndarray, tail: np.ndarray, steps: int = CHAINED_STEPS,
             start: np.ndarray | None = None) -> SimulatedRun:
    """List-schedule ``steps`` chained steps of the ranks' ``orders`` (see the module's docstring); each
    rank starts the first at ``start`` (ns, default 0 for all)."""
    world = len(orders)
    n_stages = len(stage_rank)
    rows: list[tuple] = []
    free = np.zeros(world) if start is None else np.asarray(start, float).copy()
    starts = np.zeros((steps, world))
    for step in range(steps):
        starts[step] = free
        free = free + head
        ends: dict[tuple[str, int, int], float] = {}
        taken = np.full(world, -np.inf)  # per rank, when the last of its sends to another rank was taken
        pos = [0] * world
        remaining = sum(len(o) for o in orders)
        while remaining:
            progressed = False
            for r in range(world):
                while pos[r] < len(orders[r]):
                    kind, s, mb = orders[r][pos[r]]
                    src = source(kind, s, mb, n_stages)
                    local = (F, s, mb) if kind == B and s == n_stages - 1 else None
                    if (src is not None and src not in ends) or (local is not None and local not in ends):
                        break
                    c, g, rc = cost(step, kind, s, mb)
                    ready = ends[src] + latency[(kind, mb == 0)] if src is not None else -np.inf
                    start = max(free[r] + rc, ready)
                    bound = "input" if ready > free[r] else ("rank" if pos[r] else "start")
                    end = start + c
                    if src is not None and stage_rank[src[1]] != r:
                        taken[stage_rank[src[1]]] = max(taken[stage_rank[src[1]]], start)
                    ends[(kind, s, mb)] = end
                    free[r] = end + g
                    rows.append((step, r, kind, s, mb, start, end, c, g, rc, bound, src[1] if src else -1))
                    pos[r] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                raise ReplayError("The schedule deadlocks with this order of actions.")
        free = np.maximum(free, taken) + tail  # a rank ends its step once its sends are taken, then its tail
    frame = pd.DataFrame(rows, columns=["step", "rank", "pass", "stage", "micro_batch", "start", "end", "cost", "glue",
                                        "receive", "bound", "from_stage"])
    frame["busy"] = frame["cost"] + frame["glue"] + frame["receive"]
    rank_steps = free - starts[-1]
    last = frame[frame["step"] == steps - 1]
    busy = last.groupby("stage")["cost"].sum().to_dict()
    return SimulatedRun(frame, float(rank_steps.mean()), rank_steps, {int(k): float(v) for k, v in busy.items()})


# -- the replay: re-timing and what-ifs -------------------------------------------------------------


@dataclass(frozen=True)
class WhatIf:
    """A what-if's answer: the step time (ns) with its range, the bubble, each stage's busy time."""

    change: str
    schedule: str
    micro_batches: int
    step_ns: float
    low_ns: float
    high_ns: float
    bubble_pct: float
    ideal_bubble_pct: float
    busy_ns: dict[int, float]
    baseline_ns: float
    baseline_micro_batches: int
    profiled_ns: float = float("nan")  # the point as the profiled run would take it (the profiler's cost in)

    @property
    def per_micro_batch_ns(self) -> float:
        return self.step_ns / self.micro_batches

    @property
    def gain_pct(self) -> float:
        """Throughput gained against the run as recorded: time per micro-batch (of the same size), not
        per step, so a what-if with more micro-batches per step is compared fairly."""
        base = self.baseline_ns / self.baseline_micro_batches
        return 100.0 * (1.0 - self.per_micro_batch_ns / base) if base else 0.0


class Replay:
    """The re-timing of one imported pipeline (``measure``'s figures).

    A what-if reuses each (pass, stage)'s measured (cost, glue, receive), the first micro-batch of a
    step apart from the others (it carries the step's one-off work: the first send's set-up, lazy
    initialisation), each rank's head and tail, and the latencies; its answer is for the run without
    the profiler (``measured.profiler``'s factor).
    """

    COLUMNS = ["cost", "glue", "receive"]

    def __init__(self, measured: MeasuredPipeline) -> None:
        self.m = measured
        a = measured.actions
        self._samples = {k: g[self.COLUMNS].to_numpy(float) for k, g in a.groupby(["pass", "stage", "first"])}
        # each recorded step's own costs: per (iteration, pass, stage, first), the medians of that step's samples
        per_step = a.groupby(["iteration", "pass", "stage", "first"])[self.COLUMNS].median()
        self._by_step = dict(zip(per_step.index, map(tuple, per_step.to_numpy(float))))
        st = measured.steps
        ranks = range(measured.world)
        self._head = st.groupby("rank")["head"].median().reindex(ranks, fill_value=0).to_numpy(float)
        self._tail = st.groupby("rank")["tail"].median().reindex(ranks, fill_value=0).to_numpy(float)
        self._step_ends = {int(it): (g.set_index("rank")["head"].reindex(ranks, fill_value=0).to_numpy(float),
                                     g.set_index("rank")["tail"].reindex(ranks, fill_value=0).to_numpy(float))
                           for it, g in st.groupby("iteration")}
        self._bases: dict[int | None, float] = {}
        self._points: dict[tuple[str, int, bool, int | None], tuple[float, float, float]] = {}

    # the measured run, re-timed with its own costs
    def retimed(self) -> pd.DataFrame:
        """Each profiled step re-timed with that step's own action costs, in the order each rank ran them,
        each rank starting when it started that step; the ranks' mean duration beside the measured one."""
        m = self.m
        recorded = recorded_orders(m.actions, m.world)
        own = m.actions.set_index(["iteration", "pass", "stage", "micro_batch"])[self.COLUMNS]
        out = []
        for it, step in m.steps.groupby("iteration"):
            orders = recorded[int(it)]  # the order each rank ran, whatever the schedule's name
            head = step.set_index("rank")["head"].reindex(range(m.world), fill_value=0).to_numpy(float)
            tail = step.set_index("rank")["tail"].reindex(range(m.world), fill_value=0).to_numpy(float)
            mine = own.xs(it, level="iteration")
            costs = dict(zip(mine.index, map(tuple, mine.to_numpy(float))))

            def cost(_step: int, kind: str, s: int, mb: int, costs: dict = costs) -> tuple[float, float, float]:
                return costs[(kind, s, mb)] if (kind, s, mb) in costs else self._point(kind, s, mb)

            starts = step.set_index("rank")["start"].reindex(range(m.world)).to_numpy(float)
            sim = simulate(orders, m.stage_rank, cost, m.latency, head, tail, steps=1, start=starts - starts.min())
            measured = float((step["end"] - step["start"]).mean())
            out.append({"iteration": int(it), "measured_ns": measured, "retimed_ns": sim.step_ns,
                        "error_pct": 100.0 * (sim.step_ns - measured) / measured})
        return pd.DataFrame(out)

    def residual_pct(self) -> float:
        """The median of the re-timed steps' errors against the measured ones (percent, signed)."""
        return float(self.retimed()["error_pct"].median())

    def _point(self, kind: str, s: int, mb: int, step: int | None = None) -> tuple[float, float, float]:
        """(cost, glue, receive) of an action: the median of its class's samples, or, given a recorded
        ``step`` (iteration), the median of that step's samples of the class."""
        key = (kind, s, mb == 0, step)
        if key not in self._points:
            first = mb == 0
            if step is not None and (step, kind, s, first) in self._by_step:
                self._points[key] = self._by_step[(step, kind, s, first)]
                return self._points[key]
            samples = self._samples.get((kind, s, first))
            if samples is None:
                samples = self._samples.get((kind, s, not first))
            if samples is None:
                raise ReplayError(f"The traces hold no {kind} of stage {s}: it cannot be re-timed.")
            values = np.median(samples, axis=0)
            self._points[key] = (float(values[0]), float(values[1]), float(values[2]))
        return self._points[key]

    def _run(self, schedule: str, m: int, scale: Mapping[int, float], fast: Mapping[tuple[str, int], float],
             step: int | None) -> SimulatedRun:
        """One what-if simulated, with the median costs or one recorded ``step``'s; ``fast``: (pass, stage)
        -> the factor that makes it as fast as the mean."""
        meas = self.m
        orders = schedule_order(schedule, meas.world, meas.stages_per_rank, m)

        def cost(_step: int, kind: str, s: int, mb: int) -> tuple[float, float, float]:
            c, g, rc = self._point(kind, s, mb, step)
            return c * scale.get(s, 1.0) * fast.get((kind, s), 1.0), g, rc

        # the head is the step's input (making or loading the batch, cutting it into micro-batches): it
        # grows with the micro-batches of a step; the tail (the optimiser's step) does not
        head, tail = self._step_ends.get(step, (self._head, self._tail)) if step is not None else (
            self._head, self._tail)
        return simulate(orders, meas.stage_rank, cost, meas.latency, head * (m / meas.micro_batches), tail)

    def profiled_baseline_ns(self, step: int | None = None) -> float:
        """The run as recorded, re-timed with the median costs (or one recorded ``step``'s), the profiler's in."""
        if step not in self._bases:
            self._bases[step] = self._run(self.m.schedule, self.m.micro_batches, {}, {}, step).step_ns
        return self._bases[step]

    def baseline_ns(self) -> float:
        """The run as recorded, without the profiler: its plain step (``plain.ProfilerCost``), or, where
        nothing tells it, its re-timed step."""
        plain = self.m.profiler.plain_ns
        return plain if plain > 0 else self.profiled_baseline_ns()

    def block_scale(self, recorded: Sequence[int], target: Sequence[int]) -> dict[tuple[str, int], float]:
        """Per (pass, stage), the factor on its cost when the model's blocks move from ``recorded`` (blocks per
        stage in the recorded run) to ``target``: each pass's cost taken as a stage's own fixed part plus
        a cost per block, the line through the recorded stages' (blocks, cost) points (a stage keeps its
        own measured cost and gains or loses that per-block cost for each block moved). A stage's fixed
        part (its input and output, the loss on the last) does not move with its blocks, which scaling by
        the ratio of blocks would assume. Where every stage holds as many blocks, the cost per block is
        the mean stage's over its blocks."""
        meas = self.m
        n = meas.n_stages
        if len(recorded) != n or len(target) != n:
            raise ReplayError(f"Give the blocks of each of the {n} stages, as recorded and as asked (e.g. "
                              f"blocks={','.join(['1'] * n)}:{','.join(['1'] * n)}).")
        x, want = np.asarray(recorded, float), np.asarray(target, float)
        if (x < 1).any() or (want < 1).any() or x.sum() != want.sum():
            raise ReplayError(f"Blocks {list(recorded)} -> {list(target)}: every stage holds at least one block, and "
                              f"the blocks are moved, not added ({int(x.sum())} recorded, {int(want.sum())} asked).")
        out: dict[tuple[str, int], float] = {}
        for kind in (F, B):
            y = np.asarray([self._point(kind, s, 1)[0] for s in range(n)], float)
            per_block = float(np.polyfit(x, y, 1)[0]) if len(set(x)) > 1 else float(y.sum() / x.sum())
            per_block = per_block if per_block > 0 else float(y.sum() / x.sum())
            moved = np.maximum(y + per_block * (want - x), 0.0)
            for s in range(n):
                if want[s] != x[s] and y[s] > 0:
                    out[(kind, s)] = float(moved[s] / y[s])
        return out

    def predict(self, schedule: str | None = None, micro_batches: int | None = None,
                scale: Mapping[int, float] | None = None, fast_rank: int | None = None,
                blocks: tuple[Sequence[int], Sequence[int]] | None = None) -> WhatIf:
        """The step with another schedule, micro-batch count, stages' costs scaled, the model's ``blocks``
        moved between stages ((recorded, target) blocks per stage: ``block_scale``), or ``fast_rank``'s
        stages as fast as the mean stage (the straggler what-if)."""
        meas = self.m
        schedule = schedule or meas.schedule
        m = micro_batches or meas.micro_batches
        scale = dict(scale or {})
        for s, f in scale.items():
            if s not in meas.stage_rank:
                raise ReplayError(f"There is no stage {s}: the stages are 0 to {meas.n_stages - 1}.")
            if not (0 < f < 1e6):
                raise ReplayError(f"A stage's cost scale must be above 0; {f:g} is not.")
        rank_costs: dict[tuple[str, int], float] = {}
        if fast_rank is not None:
            if fast_rank not in range(meas.world):
                raise ReplayError(f"There is no rank {fast_rank}: the ranks are 0 to {meas.world - 1}.")
            for kind in (F, B):
                typical = {s: self._point(kind, s, 1)[0] for s in meas.stage_rank}
                mean = float(np.mean(list(typical.values())))
                for s, r in meas.stage_rank.items():
                    if r == fast_rank and typical[s] > mean:
                        rank_costs[(kind, s)] = mean / typical[s]
        if blocks is not None:
            for key, f in self.block_scale(*blocks).items():
                rank_costs[key] = rank_costs.get(key, 1.0) * f
        point = self._run(schedule, m, scale, rank_costs, None)
        each = {it: self._run(schedule, m, scale, rank_costs, it).step_ns for it in sorted(self._step_ends)}
        cost = meas.profiler
        if cost.plain_ns > 0:  # the what-if over the recorded run, each from the same costs, times its plain step
            ratio = point.step_ns / self.profiled_baseline_ns()
            ratios = [ratio, *(x / self.profiled_baseline_ns(it) for it, x in each.items())]
            step = cost.plain_ns * ratio
            low, high = min(cost.plain_low_ns * min(ratios), step), max(cost.plain_high_ns * max(ratios), step)
        else:
            step, low, high = point.step_ns, min(point.step_ns, *each.values()), max(point.step_ns, *each.values())
        words = [f"schedule {schedule}"] if schedule != meas.schedule else []
        words += [f"{m} micro-batches"] if m != meas.micro_batches else []
        words += [f"stage {s} x {f:g}" for s, f in sorted(scale.items())]
        words += [f"rank {fast_rank} as fast as the mean stage"] if fast_rank is not None else []
        words += [f"blocks {','.join(map(str, blocks[0]))} -> {','.join(map(str, blocks[1]))}"] if blocks else []
        return WhatIf(", ".join(words) or "as recorded, re-timed (median costs)", schedule, m,
                      step, low, high, point.bubble_pct,
                      ideal_bubble_pct(meas.world, meas.stages_per_rank, m), point.busy_ns, self.baseline_ns(),
                      meas.micro_batches, point.step_ns)

    def culprits(self) -> pd.DataFrame:
        """Per rank: the step if its stages were as fast as the mean stage, and the time that saves."""
        base = self.baseline_ns()
        rows = []
        for r in range(self.m.world):
            p = self.predict(fast_rank=r)
            stages = sorted(s for s, rr in self.m.stage_rank.items() if rr == r)
            rows.append({"rank": r, "stages": ",".join(map(str, stages)), "step_ms": base / 1e6,
                         "step_if_mean_ms": p.step_ns / 1e6, "saves_ms": (base - p.step_ns) / 1e6,
                         "saves_pct": 100.0 * (base - p.step_ns) / base if base else 0.0})
        return pd.DataFrame(rows).sort_values("saves_ms", ascending=False, kind="stable").reset_index(drop=True)
