"""What a profile imported from PyTorch profiler traces (``popvision import``) answers besides the
common reports, in a PyTorch user's words: the schedule's ideal bubble, each rank's exposed and hidden
communication, and the insights (bottleneck stage, bubble, communication, memory peak).

A profile is imported when its manifest's ``run.source`` is ``"pytorch-profiler"``; ``run.import`` says
what the import recognised (schedule, ranks, what the traces do not hold). A rank is an "IPU" of the
profile and one cycle is one nanosecond (docs/real-traces.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from popvision_py.analysis.common.tables import PHASE, Columns, Table
from popvision_py.analysis.trace.scan import Aggregates

SOURCE = "pytorch-profiler"
COMM_COLUMNS = ["rank", "stages", "compute_cycles", "exposed_comm_cycles", "hidden_comm_cycles", "copies_cycles",
                "idle_cycles", "exposed_comm_pct", "hidden_comm_pct"]
# What a section of the IPU reports means nothing for, in one line (render.document shows it instead).
NO_TILES = "A rank has no tiles: an imported trace's memory is each rank's as a whole."
NO_HOST_CALLS = "PyTorch traces have no IPU host calls: input waits show as the rank's idle time."
NO_SIZES = "No bandwidth achieved to show: the traces record no transfer's size."


def no_sizes(bandwidth: Any) -> bool:
    """Whether an imported trace's bandwidth by kind (``exchange.bandwidth``) has nothing to show: it has kinds, and
    none moved a byte its traces record (``NO_SIZES`` says so instead)."""
    return len(bandwidth) > 0 and not (np.asarray(bandwidth["bytes"]) > 0).any()
NO_BLOCKS = ("The traces do not name each stage's layers, so no split of them can be suggested; the "
             "bottleneck insight names the stage to lighten.")
NO_VARIABLES = "The traces record allocations, not named tensors: memory over time is in the liveness section."
# In place of every memory figure of a profile whose traces hold no [memory] events (``memory_recorded``).
NOT_RECORDED = "not recorded"
WHY_NOT_RECORDED = "the traces hold no [memory] events (record them with torch.profiler.profile(profile_memory=True))"
NO_MEMORY = f"Memory not recorded: {WHY_NOT_RECORDED}."


def is_imported(run: dict[str, Any]) -> bool:
    return run.get("source") == SOURCE


def memory_recorded(run: dict[str, Any]) -> bool:
    """Whether a profile's memory figures measure anything: not where an imported profile's traces hold no
    ``[memory]`` events (``run.import.memory_recorded`` false); every other profile's do, and an imported one
    written before the import recorded the fact is taken as recorded."""
    return not is_imported(run) or (run.get("import") or {}).get("memory_recorded") is not False


def capacity_known(run: dict[str, Any]) -> bool:
    """Whether the memory capacity (``target.bytes_per_tile``) is the device's: an imported CPU trace has none
    (the import then takes the largest rank's peak, and says so among what it did not find)."""
    missing = (run.get("import") or {}).get("not_inferred") or [] if is_imported(run) else []
    return not any("memory capacity" in str(sentence) for sentence in missing)


# The summary's figures of memory (``findings.summary.Summary``): none where memory is not recorded; the
# capacity neither where it is not the device's (``capacity_known``).
SUMMARY_MEMORY_FIELDS = ("fits", "oom_tiles", "worst_ipu", "worst_tile", "worst_tile_bytes")


def unrecorded_summary_fields(run: dict[str, Any]) -> tuple[str, ...]:
    """The summary's fields that hold no figure for this profile: its memory's, where it is not recorded."""
    if memory_recorded(run):
        return ()
    return SUMMARY_MEMORY_FIELDS + (() if capacity_known(run) else ("bytes_per_tile",))


@dataclass(frozen=True)
class Pipeline:
    """The schedule the traces ran and its ideal bubble: ``(K - 1) / (v M + K - 1)`` for K ranks in the
    pipeline, v stages per rank (1 for GPipe and 1F1B, more for the interleaved schedules) and M
    micro-batches: the share of each rank's time a perfectly balanced run of this schedule idles."""

    schedule: str
    ranks: int
    stages_per_rank: int
    micro_batches: int
    ideal_bubble_pct: float


def ideal_bubble_pct(ranks: int, stages_per_rank: int, m: int) -> float:
    """The share of a balanced run's time each rank idles: (K - 1) / (v M + K - 1)."""
    return 100.0 * (ranks - 1) / (stages_per_rank * m + ranks - 1)


def pipelined(run: dict[str, Any]) -> bool:
    """Whether an imported run ran a pipeline (GPipe, 1F1B, ...), not data parallelism (DDP, FSDP), where each rank
    runs the whole model."""
    return str(run.get("strategy")) == "pipelined"


def pipeline(run: dict[str, Any]) -> Pipeline:
    info = run.get("import") or {}
    stages = run.get("stages") or []
    ranks = len({int(s.get("ipu", 0)) for s in stages}) or 1
    per_rank = max(1, len(stages) // ranks)
    m = int(run.get("gradient_accumulation", 1) or 1)
    ideal = ideal_bubble_pct(ranks, per_rank, m) if pipelined(run) and ranks > 1 else 0.0
    return Pipeline(str(info.get("schedule", "unknown")), ranks, per_rank, m, ideal)


def communication(trace: Aggregates, exchanges: Callable[[], Columns], run: dict[str, Any]) -> Table:
    """Per rank: compute, exposed communication (the rank waits in a call or for a transfer), the
    communication hidden behind compute (the rank's compute while a transfer was under way, overlaps
    counted once: ``run.import.hidden_comm_ns``), a GPU's copies and sets (the ``stream`` phase: 0 on a CPU
    trace) and idle; compute, exposed communication, copies and idle add up to the rank's time. ``exchanges()``
    gives the exchanges table, read only for a profile imported before the hidden time was measured (10 GB of
    traces: 556,800 rows, 16 MiB)."""
    ipus = trace.cube.shape[0]
    by_phase = trace.cube.by_ipu().sum(axis=1)  # [ipu, phase]
    compute = by_phase[:, PHASE["compute"]].astype(np.int64)
    exposed = by_phase[:, PHASE["exchange"]].astype(np.int64)
    copies = by_phase[:, PHASE["stream"]].astype(np.int64)
    idle = by_phase[:, PHASE["idle"]].astype(np.int64)
    measured = (run.get("import") or {}).get("hidden_comm_ns")
    if isinstance(measured, list) and len(measured) == ipus and all(isinstance(v, int) for v in measured):
        # the import measured each rank's compute while a transfer was under way (overlaps once)
        hidden = np.asarray(measured, np.int64)
    else:  # each transfer's whole time less its exposed part (transfers may overlap: an upper bound)
        exchanges = exchanges()
        whole = np.bincount(np.asarray(exchanges["ipu"], np.int64),
                            weights=np.asarray(exchanges["cycles"], np.float64), minlength=ipus)[:ipus] \
            if len(exchanges) else np.zeros(ipus)
        hidden = np.maximum(np.rint(whole).astype(np.int64) - exposed, 0)
    total = np.maximum(by_phase.sum(axis=1), 1)
    comm = np.maximum(exposed + hidden, 1)
    stage_names = {}
    for s in run.get("stages") or []:
        stage_names.setdefault(int(s.get("ipu", 0)), []).append(str(s.get("stage")))
    return Table({
        "rank": rank_numbers(run, ipus),
        "stages": np.array([", ".join(stage_names.get(i, [])) for i in range(ipus)], object),
        "compute_cycles": compute, "exposed_comm_cycles": exposed, "hidden_comm_cycles": hidden,
        "copies_cycles": copies, "idle_cycles": idle,
        "exposed_comm_pct": 100.0 * exposed / total,
        "hidden_comm_pct": np.where(exposed + hidden > 0, 100.0 * hidden / comm, 0.0),
    })


def rank_numbers(run: dict[str, Any], ipus: int) -> np.ndarray:
    """Each IPU's rank, as the traces name it (``run.import.ranks``; the IPU's position where it is not given)."""
    ranks = (run.get("import") or {}).get("ranks") or list(range(ipus))
    return np.asarray(list(ranks)[:ipus] + list(range(len(ranks), ipus)), np.int64)


def ranks_of(profile: Any) -> np.ndarray:
    """``rank_numbers`` of a profile or report (its ``run`` and ``target``): each of its IPUs' rank."""
    return rank_numbers(profile.run, int(profile.target.get("num_ipus", 0) or 0))


def shared_ranks(profiles: list[Any]) -> np.ndarray | None:
    """``ranks_of`` the first profile where every one holds the traces of the same ranks (``run.import.ranks``),
    else None: a comparison then names a rank by its position."""
    named = [(p.run.get("import") or {}).get("ranks") for p in profiles]
    return ranks_of(profiles[0]) if all(n == named[0] for n in named) else None


def insights(run: dict[str, Any], stage_figures: Any, comm: Table, peaks: Table,
             stage_cycles: dict[int, float]) -> list[tuple[str, str, str, str]]:
    """``(severity, topic, finding, suggestion)`` rows in a PyTorch user's words."""
    rows: list[tuple[str, str, str, str]] = []
    stages = {int(s["stage"]): int(s["ipu"]) for s in run.get("stages") or []}
    ranks = rank_numbers(run, max(stages.values(), default=0) + 1)
    pipe = pipeline(run)
    f = stage_figures
    if len(stages) > 1 and np.isfinite(f.imbalance) and f.imbalance >= 1.1 and f.bottleneck_stage in stages:
        s = f.bottleneck_stage
        neighbours = [n for n in (s - 1, s + 1) if n in stage_cycles]
        lighter = min(neighbours, key=lambda n: stage_cycles[n]) if neighbours else None
        move = (f"move some of its layers to stage {lighter} (rank {ranks[stages[lighter]]}), the lighter of its "
                f"neighbours" if lighter is not None else "split its layers over more stages")
        rows.append(("warning", "stages", f"stage {s} (rank {ranks[stages[s]]}) is the bottleneck: {f.imbalance:.1f}x "
                     f"the mean stage time per micro-batch", f"{move}."))
    if pipe.ideal_bubble_pct > 0 and np.isfinite(f.bubble_pct):
        more = ("more micro-batches or Interleaved1F1B (more stages per rank)" if pipe.stages_per_rank == 1
                else "more micro-batches, or more stages per rank")
        severity = "warning" if f.bubble_pct > pipe.ideal_bubble_pct + 5 else "info"
        rows.append((severity, "bubble",
                     f"the bubble is {f.bubble_pct:.0f}% against {pipe.ideal_bubble_pct:.0f}% ideal "
                     f"for {pipe.schedule} with {pipe.ranks} ranks x {pipe.stages_per_rank} stage(s) and "
                     f"{pipe.micro_batches} micro-batches",
                     f"{more}; the rest of the excess is the stages' imbalance."))
    if len(comm):
        worst = int(np.argmax(comm["exposed_comm_pct"]))
        share = float(comm["exposed_comm_pct"][worst])
        if share >= 10:
            rows.append(("warning", "communication",
                         f"rank {int(comm['rank'][worst])} spends {share:.0f}% of its time in "
                         f"exposed communication; {float(comm['hidden_comm_pct'][worst]):.0f}% of its communication "
                         f"is hidden behind compute", "overlap it with compute (bucketed all-reduce, prefetching "
                         "FSDP's all-gathers, asynchronous sends), or send less."))
    if not memory_recorded(run):
        rows.append(("info", "memory", "not recorded: the traces hold no [memory] events",
                     "record it with torch.profiler.profile(profile_memory=True)."))
    elif len(peaks):
        top = int(np.argmax(peaks["total_bytes"]))
        rows.append(("info", "memory", f"rank {int(ranks[int(peaks['ipu'][top])])} peaks at "
                     f"{int(peaks['total_bytes'][top]) / 2**20:,.1f} MiB allocated, in {peaks['name'][top]}", ""))
    if not rows:
        rows.append(("info", "summary", "no problem found: the stages are balanced and communication is hidden", ""))
    return rows


def receiving(ipu: np.ndarray, step: np.ndarray, programs: pa.Table) -> np.ndarray:
    """Whether each trace row (``ipu``, ``step``) runs a program whose name holds "recv" (False for a row
    of no program, an idle row). The names are matched once each, as Arrow strings, and the rows find
    their program by a sorted key: no Python string per row (an imported trace's millions of programs
    held as Python strings, then as a fixed-width NumPy array for the match, took gigabytes)."""
    import pyarrow.compute as pc

    name = programs["name"].combine_chunks()
    if pa.types.is_dictionary(name.type):
        hits = pc.match_substring(name.dictionary, "recv").to_numpy(zero_copy_only=False)[name.indices.to_numpy()]
    else:
        hits = pc.match_substring(name, "recv").to_numpy(zero_copy_only=False)
    keys = _program_key(programs["ipu"].to_numpy(), programs["step"].to_numpy())
    order = np.argsort(keys, kind="stable")
    keys, hits = keys[order], hits[order]
    wanted = _program_key(ipu, step)
    if not len(keys):
        return np.zeros(len(wanted), bool)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return (keys[at] == wanted) & hits[at]


def _program_key(ipu: np.ndarray, step: np.ndarray) -> np.ndarray:
    """One int64 per (ipu, step): the IPU in the high 32 bits, the step (as unsigned) in the low."""
    return (ipu.astype(np.int64) << 32) | (step.astype(np.int64) & 0xFFFFFFFF)
