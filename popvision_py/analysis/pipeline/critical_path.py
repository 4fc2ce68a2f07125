"""The critical path across an imported pipeline's ranks, its culprits and its what-ifs, for the reports.

``critical_path`` walks one measured step back from the rank that ended it last (see its docstring);
``CriticalPathView`` is ``report.critical_path``: the re-timing of ``analysis.pipeline.replay`` (measured once
per Report), the chain, the culprits and the first what-ifs a pipeline's user asks, as the report's
tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.trace import retime
from popvision_py.analysis.pipeline.replay import MeasuredPipeline, Replay, ReplayError, WhatIf, from_profile
from popvision_py.analysis.pipeline.schedules import SCHEDULES, source
from popvision_py.analysis.common.tables import Table


# -- an emulated run: bulk-synchronous supersteps --------------------------------------------------


def bsp_path(s: retime.Supersteps, ipus: np.ndarray) -> tuple[Table, dict[str, float], Table]:
    """The critical path of a bulk-synchronous run, from its supersteps (``retime.supersteps``).

    Every superstep lasts as long as its busiest IPU's work plus its gap, so the chain runs through
    the busiest IPU of each superstep: its micro-batch work (the stages' passes), its other work (the
    update, exchanges, host transfers, syncs) and the gap no IPU's work explains (waiting). Returns per
    IPU what it set of the path, the totals (cycles), and the culprits: each IPU's micro-batch work made
    as light as the mean IPU's, pass by pass (``retime.even_scale``), re-timed: the cycles that saves.
    """
    count, n_ipu = s.fixed.shape
    work = retime._work(s.fixed, s.cell_step, s.cell_ipu, s.cell_cycles.astype(np.float64))
    movable = np.bincount(s.cell_step * n_ipu + s.cell_ipu, s.cell_cycles, count * n_ipu).reshape(count, n_ipu)
    crit = work.argmax(axis=1) if n_ipu else np.zeros(count, np.int64)
    rows = np.arange(count)
    on_mb, on_fixed = movable[rows, crit], s.fixed[rows, crit].astype(np.float64)
    # a superstep standing for several (``s.weight``) counts as many times: s.per_step
    led = np.bincount(crit, s.weight, minlength=n_ipu)
    on_mb, on_fixed = s.per_step(on_mb), s.per_step(on_fixed)
    path = float(s.per_step(s.cycles).sum())
    by_ipu = Table({"ipu": np.arange(n_ipu, dtype=np.int64), "supersteps_led": led.astype(np.int64),
                    "micro_batch_cycles": np.bincount(crit, on_mb, n_ipu),
                    "other_work_cycles": np.bincount(crit, on_fixed, n_ipu),
                    "path_share_pct": 100.0 * np.bincount(crit, on_mb + on_fixed, n_ipu) / max(path, 1.0)})
    totals = {"compute": float(on_mb.sum()), "other_work": float(on_fixed.sum()),
              "waiting": float(s.per_step(np.clip(s.gap, 0, None)).sum()), "path": path}
    base = retime.length(s, np.ones(len(s.cell_cycles)))
    even = np.minimum(retime.even_scale(s, ipus), 1.0)  # only ever lighter: "as fast as the others"
    saves = []
    for ipu in ipus.tolist():
        scale = np.where(s.cell_ipu == ipu, even, 1.0)
        saves.append(base - retime.length(s, scale))
    saves_arr = np.asarray(saves, np.float64)
    order = np.argsort(-saves_arr, kind="stable")
    culprits = Table({"ipu": np.asarray(ipus, np.int64)[order], "step_cycles": np.full(len(order), base),
                      "saves_cycles": saves_arr[order],
                      "saves_pct": 100.0 * saves_arr[order] / base if base else np.zeros(len(order))})
    return by_ipu, totals, culprits


# -- the critical path across ranks, from the measured step ----------------------------------------


def critical_path(meas: MeasuredPipeline, iteration: int | None = None) -> tuple[pd.DataFrame, dict[str, float]]:
    """The chain of actions and transfers that set one measured step (the median one by default).

    Walking back from the rank that ended the step last: from each action to whichever released it,
    the sender (the action asked for its input before the sender was done: it waited) or the rank's
    previous action. Each stretch of the chain is split into compute (the action's own pieces, the
    loss and the schedule's recorded operators, the step's head and tail), communication (a transfer,
    from the sender's end to the input's arrival; sends and receives the rank recorded) and waiting
    (what the rank recorded nothing for). The links tile the chain: their sum is its length.
    Returns the links (in time order: rank, what, kind, start, end, ns) and the totals (ns).
    """
    steps = meas.step_ns()
    its = sorted(meas.steps["iteration"].unique())
    if iteration is None:
        iteration = its[int(np.argsort(steps)[len(steps) // 2])]
    a = meas.actions[meas.actions["iteration"] == iteration].set_index(["pass", "stage", "micro_batch"])
    st = meas.steps[meas.steps["iteration"] == iteration].set_index("rank")
    by_rank = {r: g.sort_values("start") for r, g in a.reset_index().groupby("rank")}
    links: list[tuple[int, str, str, float, float]] = []  # rank, what, kind, end of the stretch, ns

    def split(r: int, what: str, end: float, length: float, parts: list[tuple[str, str, float]]) -> None:
        """A stretch of ``length`` ns ending at ``end`` on rank ``r``: ``parts`` in time order (kind, what,
        ns; the last is the action), clipped to the stretch from the action back, and what they leave of
        it as waiting, just before the action."""
        left, placed = length, []
        for kind, label, ns in reversed(parts):
            ns = max(0.0, min(ns, left))
            left -= ns
            placed.append((kind, label, ns))
        placed.insert(1, ("waiting", f"waiting before {what}", left))
        at = end
        for kind, label, ns in placed:  # from the end of the stretch back
            if ns > 0:
                links.append((r, label, kind, at, ns))
            at -= ns

    last_rank = int(st["end"].idxmax())
    end = float(st.loc[last_rank, "end"])
    cur = by_rank[last_rank].iloc[-1]
    links.append((last_rank, "tail (optimiser step, zeroing the gradients)", "compute", end, end - float(cur["end"])))
    while True:
        r = int(cur["rank"])
        kind, s, mb = cur["pass"], int(cur["stage"]), int(cur["micro_batch"])
        what = f"{kind} stage {s} mb {mb}"
        rows = by_rank[r]
        i = int(np.flatnonzero(rows["id"].to_numpy() == cur["id"])[0])
        prev = rows.iloc[i - 1] if i > 0 else None
        released = float(prev["end"]) if prev is not None else float(st.loc[r, "start"])
        src = source(kind, s, mb, meas.n_stages)
        arrival, asked, sender_end = float(cur["arrival"]), float(cur["asked"]), float(cur["sender_end"])
        act_end, cost = float(cur["end"]), float(cur["cost"])
        if src is not None and src in a.index and np.isfinite(arrival) and asked < sender_end <= arrival:
            # it waited for its input: the chain goes on at the sender
            split(r, what, act_end, act_end - arrival, [("compute", what, cost)])
            links.append((r, f"transfer stage {src[1]} -> {s} mb {mb}", "communication", arrival, arrival - sender_end))
            cur = a.loc[src].copy()
            cur["pass"], cur["stage"], cur["micro_batch"] = src
            continue
        # the rank's previous work released it: its glue, this action's own time before it, the action
        parts = []
        if prev is not None:
            comm = float(prev["glue_comm"])
            parts += [("compute", "local work (loss, schedule)", float(prev["glue"]) - comm),
                      ("communication", "sends recorded", comm)]
        else:
            parts.append(("compute", "head (data, schedule set-up)", float(st.loc[r, "head"])))
        if src is not None:
            parts.append(("communication", f"receive of {what}", float(cur["receive"])))
        parts.append(("compute", what, cost))
        split(r, what, act_end, act_end - released, parts)
        if prev is None:
            break
        cur = prev
    frame = pd.DataFrame(links, columns=["rank", "what", "kind", "end", "ns"])
    frame.insert(3, "start", frame["end"] - frame["ns"])
    frame = frame[frame["ns"] > 0].sort_values(["start", "end"], kind="stable").reset_index(drop=True)
    totals = {k: float(frame.loc[frame["kind"] == k, "ns"].sum()) for k in ("compute", "communication", "waiting")}
    totals["path_ns"] = end - float(frame["start"].min()) if len(frame) else 0.0
    totals["step_ns"] = end - float(st["start"].min())
    totals["iteration"] = float(iteration)
    return frame, totals


# -- the report's view ------------------------------------------------------------------------------

def _ms(x: Any) -> Any:
    return np.asarray(x, float) / 1e6


class CriticalPathView:
    """``report.critical_path``: an imported pipeline's re-timing, critical path, culprits and what-ifs,
    each computed once per Report. ReplayError (one sentence) where there is no pipeline to re-time."""

    def __init__(self, report: Any) -> None:
        self._r = report

    def _memo(self, key: str, compute: Callable[[], Any]) -> Any:
        return self._r.memo(("critical_path", key), compute)

    @property
    def emulated(self) -> bool:
        """An emulated run: its critical path runs through its supersteps (``bsp_path``)."""
        return self._r.run.get("source") != "pytorch-profiler"

    def _bsp(self) -> tuple[Table, dict[str, float], Table]:
        def compute() -> tuple[Table, dict[str, float], Table]:
            costs = self._r.stages._costs()
            if costs.supersteps is None or not len(costs.supersteps.cycles):
                raise ReplayError("The trace holds no supersteps to follow: there is no critical path to show.")
            return bsp_path(costs.supersteps, np.unique(costs.stages["ipu"]))
        return self._memo("bsp", compute)

    def _by_ipu(self) -> Table:
        return self._bsp()[0]

    def by_ipu(self) -> pd.DataFrame:
        """An emulated run: what each IPU set of the critical path."""
        return self._by_ipu().frame()

    def measured(self) -> MeasuredPipeline:
        return self._memo("measured", lambda: from_profile(self._r.profile))

    def replay(self) -> Replay:
        return self._memo("replay", lambda: Replay(self.measured()))

    def path(self) -> tuple[pd.DataFrame, dict[str, float]]:
        return self._memo("path", lambda: critical_path(self.measured()))

    def figures(self) -> dict[str, Any]:
        """The step, its critical path in compute, communication and waiting, the culprit, the residual
        (an emulated run: compute, other work and waiting through its supersteps, the culprit IPU)."""
        if self.emulated:
            return self._memo("bsp_figures", self._bsp_figures)

        def compute() -> dict[str, Any]:
            chain, totals = self.path()
            culprits = self.replay().culprits()
            top = culprits.iloc[0]
            path = totals["path_ns"] or 1.0
            m = self.measured()
            return {
                "schedule": m.schedule, "ranks": m.world, "stages": m.n_stages, "micro_batches": m.micro_batches,
                "measured_step_ms": m.measured_step_ns() / 1e6,
                "step_on_path": int(totals["iteration"]),
                "path_ms": path / 1e6,
                "compute_pct": 100.0 * totals["compute"] / path,
                "communication_pct": 100.0 * totals["communication"] / path,
                "waiting_pct": 100.0 * totals["waiting"] / path,
                "culprit": f"rank {int(top['rank'])} (stage {top['stages']})" if top["saves_ms"] > 0 else "none",
                "culprit_saves_pct": float(top["saves_pct"]),
                "retimed_residual_pct": self.replay().residual_pct(),
                "transfer_latency_ms": float(np.median(list(m.latency.values()))) / 1e6,
                "plain_step_ms": self.replay().baseline_ns() / 1e6,
                "profiler_cost_pct": m.profiler.overhead_pct,
                "plain_step_from": m.profiler.how(),
            }
        return self._memo("figures", compute)

    def _bsp_figures(self) -> dict[str, Any]:
        _by_ipu, totals, culprits = self._bsp()
        path = totals["path"] or 1.0
        clock = float(self._r.target["clock_hz"])
        top = int(np.argmax(culprits["saves_cycles"])) if len(culprits["ipu"]) else None
        saves = float(culprits["saves_cycles"][top]) if top is not None else 0.0
        return {"strategy": self._r.run.get("strategy"), "ipus": int(len(_by_ipu)),
                "path_ms": totals["path"] / clock * 1e3,
                "compute_pct": 100.0 * totals["compute"] / path,
                "other_work_pct": 100.0 * totals["other_work"] / path,
                "waiting_pct": 100.0 * totals["waiting"] / path,
                "culprit": f"IPU {int(culprits['ipu'][top])}" if top is not None and saves > 0 else "none",
                "culprit_saves_pct": float(culprits["saves_pct"][top]) if top is not None else 0.0}

    def _chain(self) -> Any:
        chain, _ = self.path()
        return Table({"rank": chain["rank"].to_numpy(np.int64), "what": chain["what"].to_numpy(object),
                      "kind": chain["kind"].to_numpy(object),
                      "start_ms": _ms(chain["start"]) - _ms(chain["start"].min()),
                      "ms": _ms(chain["ns"])})

    def chain(self) -> pd.DataFrame:
        return self._chain().frame()

    def _culprits(self) -> Any:
        if self.emulated:
            return self._bsp()[2]
        c = self.replay().culprits()
        return Table({k: c[k].to_numpy() for k in c.columns})

    def culprits(self) -> pd.DataFrame:
        return self._culprits().frame()

    def whatifs(self) -> list[WhatIf]:
        """The questions a pipeline's user asks first: half and twice the micro-batches, each other
        schedule the stages allow, and the culprit made as fast as the mean stage."""
        def compute() -> list[WhatIf]:
            rp, m = self.replay(), self.measured()
            asks: list[dict[str, Any]] = [{"micro_batches": max(1, m.micro_batches // 2)},
                                          {"micro_batches": m.micro_batches * 2}]
            asks += [{"schedule": s} for s in SCHEDULES if s != m.schedule]
            culprit = rp.culprits().iloc[0]
            if culprit["saves_ms"] > 0:
                asks.append({"fast_rank": int(culprit["rank"])})
            out = [rp.predict()]
            for ask in asks:
                try:
                    out.append(rp.predict(**ask))
                except ReplayError:
                    continue  # a schedule these stages cannot run (Interleaved1F1B on one stage per rank)
            return out
        return self._memo("whatifs", compute)

    def _whatif(self) -> Any:
        rows = self.whatifs()
        return Table({
            "change": np.array([p.change for p in rows], object),
            "schedule": np.array([p.schedule for p in rows], object),
            "micro_batches": np.array([p.micro_batches for p in rows], np.int64),
            "step_ms": _ms([p.step_ns for p in rows]), "low_ms": _ms([p.low_ns for p in rows]),
            "high_ms": _ms([p.high_ns for p in rows]), "ms_per_micro_batch": _ms([p.per_micro_batch_ns for p in rows]),
            "gain_pct": np.array([p.gain_pct for p in rows]),
            "bubble_pct": np.array([p.bubble_pct for p in rows]),
            "ideal_bubble_pct": np.array([p.ideal_bubble_pct for p in rows])})

    def whatif(self) -> pd.DataFrame:
        return self._whatif().frame()
