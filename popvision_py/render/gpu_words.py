"""A GPU trace's report in words: each step's verdict and evidence, the stragglers, the kernels worth a look, as
the text and Markdown reports list them (``render.document``'s GPU section); JSON and CSV hold every row."""

from __future__ import annotations

import numpy as np

from popvision_py.analysis.common.tables import Table
from popvision_py.analysis.imported.bound import step_summary

MAX_ITEMS = 40  # steps or kernels listed in text and Markdown (JSON and CSV hold every one)


def more(items: list[tuple[str, list[str]]], rows: int) -> list[tuple[str, list[str]]]:
    return items if rows <= MAX_ITEMS else items + [(f"... {rows - MAX_ITEMS:,} more (--format json or csv lists "
                                                      "every one)", [])]


SLOWEST_STEPS = 10  # past MAX_ITEMS steps of ranks of several, each rank's steps summed up, then this many slowest


def bound_items(t: Table) -> list[tuple[str, list[str]]]:
    """Each step's verdict and its evidence, in words (``bound.step_bounds``). Past ``MAX_ITEMS`` steps, where a
    rank has several (a long run profiles thousands), each rank's steps summed up (``bound.step_summary``),
    then the ``SLOWEST_STEPS`` slowest steps with their evidence."""
    if len(t) <= MAX_ITEMS or len(np.unique(t["rank"])) == len(t):
        return more(step_items(t, np.arange(min(len(t), MAX_ITEMS))), len(t))
    items = []
    s = step_summary(t)
    for row in zip(*(s[c].tolist() for c in ("rank", "steps", "verdicts", "median_step_ns", "gpu_busy_pct",
                                             "launch_wait_pct", "input_wait_pct", "slowest_step", "slowest_ns",
                                             "slowest_verdict"))):
        rank, steps, verdicts, median, busy, launch, fetch, slow, slow_ns, slow_verdict = row
        which = f"step {slow}" if slow >= 0 else "the whole trace"
        items.append((f"rank {rank} over {steps:,} steps: {verdicts}", [
            f"median step {median / 1e6:,.3f} ms: GPU busy {busy:.1f}%, {launch:.1f}% waiting for launches, "
            f"{fetch:.1f}% while the DataLoader fetched (medians)",
            f"slowest: {which} ({slow_ns / 1e6:,.3f} ms), {slow_verdict}"]))
    slowest = np.lexsort((np.arange(len(t)), -np.asarray(t["step_ns"], np.int64)))[:SLOWEST_STEPS]
    items.append((f"the {len(slowest):,} slowest of {len(t):,} steps:", []))
    items += step_items(t, slowest)
    return items + [(f"... {len(t) - len(slowest):,} more steps (--format json or csv lists every one)", [])]


def step_items(t: Table, rows: np.ndarray) -> list[tuple[str, list[str]]]:
    """The steps ``rows`` of ``t`` (``bound.step_bounds``), each its verdict and its evidence, in words."""
    items = []
    for row in zip(*(np.asarray(t[c])[rows].tolist() for c in (
            "rank", "step", "step_ns", "verdict", "gpu_busy_pct", "launch_wait_pct", "input_wait_pct", "other_idle_pct",
            "kernels", "kernel_median_ns", "launch_median_ns"))):
        rank, step, step_ns, verdict, busy, launch, fetch, other, kernels, median, launch_median = row
        which = f"step {step}" if step >= 0 else "the whole trace (no profiler step)"
        cost = f", launched in {launch_median / 1e3:,.1f} us (median)" if launch_median == launch_median else ""
        items.append((f"rank {rank} {which} ({step_ns / 1e6:,.3f} ms): {verdict}", [
            f"GPU busy {busy:.1f}%; idle {launch:.1f}% waiting for launches (the next kernel's launch came after the "
            f"GPU went idle), {fetch:.1f}% while the DataLoader fetched, {other:.1f}% waiting on something else "
            "(the next kernel was queued, or its launch is not in the trace)",
            f"{kernels:,} kernels began in it"
            + (f", median {median / 1e3:,.1f} us on the GPU{cost}" if kernels else "")]))
    return items


def straggler_items(t: Table) -> list[tuple[str, list[str]]]:
    """Each step with late ranks, re-timed without them, and its late ranks, the latest first
    (``stragglers.stragglers``)."""
    items: list[tuple[str, list[str]]] = []
    columns = ("step", "rank", "collective", "name", "ranks", "ready_ns", "median_ready_ns", "late_ns", "late_pct",
               "compute_ns", "median_compute_ns", "compute_over_pct", "median_wait_ns", "step_ns", "saved_ns",
               "step_without_ns")
    for n, row in enumerate(zip(*(t[c][:MAX_ITEMS].tolist() for c in columns))):
        step, rank, nth, name, ranks, ready, median, late, late_pct, compute, median_compute, over, wait, step_ns, \
            saved, without = row
        if n == 0 or step != t["step"][n - 1]:
            items.append((f"step {step} ({step_ns / 1e6:,.3f} ms over {ranks:,} ranks): without its late ranks "
                          f"(ready at the median) {without / 1e6:,.3f} ms, {saved / 1e3:,.1f} us sooner", []))
        items[-1][1].append(
            f"rank {rank}: ready for {name} #{nth} {late / 1e3:,.1f} us after the median rank (+{late_pct:.1f}%: "
            f"{ready / 1e3:,.1f} us into the step, median {median / 1e3:,.1f}); it computed {compute / 1e3:,.1f} us "
            f"before it, the median rank {median_compute / 1e3:,.1f} us ({over:+.1f}%); the median rank waited "
            f"{wait / 1e3:,.1f} us for that collective past its transfer")
    return more(items, len(t))


def worth_items(t: Table) -> list[tuple[str, list[str]]]:
    """Each kernel worth a look, why in a sentence (``bound.worth_a_look``)."""
    columns = (t[c][:MAX_ITEMS].tolist() for c in ("rank", "name", "reason", "why", "op", "module"))
    items = [(f"rank {rank}: {name if len(name) <= 110 else name[:109] + '…'} ({reason})",
              [why] + ([f"launched from {op or 'no operator'}" + (f" in {module}" if module else "")] if op or module
                       else []))
             for rank, name, reason, why, op, module in zip(*columns)]
    return more(items, len(t))
