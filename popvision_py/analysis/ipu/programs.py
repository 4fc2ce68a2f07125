"""The program tree: each IPU's control program as Poplar and PopART lay it out, from the profile's tables.

A Poplar program is a tree of ``Repeat``, ``Sequence`` and the steps that do the work
(``Execute(ComputeSet)``, ``Copy``, ``Sync``, exchanges). PopART builds it for a run as: a host
call per run, ``Repeat(device iterations)`` of one iteration, in which a training run repeats its
micro-batches (``Repeat(gradient accumulation)``: for a pipeline the ramp-up, the main cycle and
the ramp-down) and then updates the weights. The profile keeps the leaves (``programs``: every
step in program order with its stage and pass) and how often each ran (the trace, folded into
``Aggregates.executions[ipu, step]``); the tree is put back together from them:

* the **root** of each IPU (``program``) holds a ``Repeat`` of the **runs** (host calls);
* a run holds the **host call** (the steps of no stage and pass that are not syncs: the call's
  latency, the wait for the data loaders), the **device iterations** ``Repeat``, and the
  **superstep sync** (the barrier that ends every superstep, run once per superstep);
* a **segment** is a run of consecutive steps of one stage and pass (the weight update: of the
  update pass) that ran equally often: a stage's forward or backward, or the weight update. It
  goes under the node whose executions it matches: the **gradient accumulation** ``Repeat`` (one
  micro-batch's work), the device iterations (once per iteration: the update; a phase's weight
  load), or the run;
* in a segment, an **op** node is a run of consecutive steps of one op pass (one op and the
  label of its pass: the op's name and the next part of the step's name, ``layer1/conv/fwd``); a
  step whose name does not go on from its op's is a step of the segment itself;
* the **leaves** are the programs rows, each once.

Columns (``COLUMNS``), one row per node in pre-order (a parent before its children, children in
program order): ``executions`` how often the node ran over the trace (a leaf: its count in the
trace; a segment or op: its steps'; runs, iterations and micro-batches: the trace's own counts),
``repeats`` its executions per execution of its parent, ``total_cycles`` the sum of its leaves'
``cycles x executions`` (so a node's total is its children's), ``cycles`` one execution's
(``total_cycles / executions``; a leaf: its ``programs.cycles``), ``phase`` the trace phase of a
leaf, or the phase with most of a group's cycles (the execution trace's colours), ``ops`` the
distinct ops below the node, ``op`` the op's name (op nodes and their steps). Columnar: the tree
is built from each step's chain of ancestors, a NumPy array per level, with no loop over steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popvision_py.analysis.common.tables import PHASES, Columns, Table, lookup
from popvision_py.format.schedule import run_schedule

# An imported trace's one line instead of the tree.
NO_PROGRAM = ("An imported trace has no compiled program: a rank runs the kernels and collectives PyTorch "
              "launched, which the execution trace shows in time.")
COLUMNS = ["node", "parent", "depth", "ipu", "kind", "name", "step", "stage", "pass", "phase", "op", "ops",
           "repeats", "executions", "cycles", "total_cycles", "share_pct", "detail"]

# Each program step type's phase in the trace (the engine's scheduler writes the same).
PHASE_OF_TYPE = {"compute_set": "compute", "exchange": "exchange", "global_exchange": "exchange",
                 "all_reduce": "exchange", "sync": "sync", "stream_copy": "stream", "remote_buffer_copy": "stream"}
# The levels of the tree: a step's ancestors, one column each (absent ones are -1).
LEVELS = ("program", "runs", "iterations", "micro_batches", "segment", "op", "step")
ROOT, RUNS, ITERATIONS, MICRO_BATCHES, SEGMENT, OP, STEP = range(len(LEVELS))
# Where a step goes at the level below the run: the host call, or the device iterations.
HOST, DEVICE = 0, 1


@dataclass(frozen=True)
class Counts:
    """How often the loops ran over the whole trace: runs (host calls), iterations, micro-batches."""

    runs: int
    iterations: int
    micro_batches: int
    training: bool
    gradient_accumulation: int
    device_iterations: int


def counts(run: dict, iterations: int, run_slots: int) -> Counts:
    """The loop counts: runs and iterations from the trace (``Aggregates``), micro-batches = iterations x GA."""
    training = run.get("mode", "training") != "inference"
    ga = max(int(run.get("gradient_accumulation", 1) or 1), 1) if training else 1
    runs = run_slots or int(run.get("runs", 1) or 1)
    return Counts(runs, iterations, iterations * ga, training, ga, max(int(run.get("device_iterations", 1) or 1), 1))


def loop_details(run: dict, c: Counts) -> tuple[str, str]:
    """What the device-iterations and gradient-accumulation loops say of the schedule (from the manifest)."""
    strategy = str(run.get("strategy", ""))
    depth = run_schedule(run).pipeline_depth
    di = f"{_plural(c.device_iterations, 'iteration')} per host call"
    ga = f"{_plural(c.gradient_accumulation, 'micro-batch')} per weight update"
    if strategy == "pipelined" and depth > 1:
        if c.training:
            edge = 2 * depth - 2
            ga += (f"; pipelined over {depth} IPUs: ramp-up {edge}, main {max(c.gradient_accumulation - edge, 0)}, "
                   f"ramp-down {edge} pipeline cycles")
        else:
            di += (f"; pipelined over {depth} IPUs: ramp-up {depth - 1}, "
                   f"main {max(c.device_iterations - depth + 1, 0)}, ramp-down {depth - 1} pipeline cycles")
    elif strategy == "sharded":
        if c.training:
            ga += "; sharded: one stage's pass at a time"
        else:
            di += "; sharded: one stage at a time"
    elif strategy:
        ga += f"; {strategy}"
    return di, ga


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith("h") else "s")


def op_names(ops: Columns) -> dict[int, str]:
    """op_id -> name, from the ops table (a row per op and pass: the first row of each op)."""
    ids, first = np.unique(np.asarray(ops["op_id"], np.int64), return_index=True)
    return dict(zip(ids.tolist(), ops.strings("name", first).tolist()))


def op_labels(names: np.ndarray, op_names: np.ndarray) -> np.ndarray:
    """Each step's op pass label: its op's name and the next part of the step's name (``layer1/conv`` +
    ``fwd``); "" where the step's name does not go on from its op's (a copy the op only pays for, such
    as a stage's gradients streamed out: a step of its segment, not of an op pass)."""
    if not _STRING_SLICE:
        return _op_labels_code_points(names, op_names)
    S = np.dtypes.StringDType()
    s, o = names.astype(S), op_names.astype(S)
    prefix = np.strings.add(o, "/")
    rest = np.strings.slice(s, np.strings.str_len(prefix), np.iinfo(np.int32).max)
    head = np.strings.partition(rest, np.array("/", dtype=S))[0]
    inside = np.strings.startswith(s, prefix) & (np.strings.str_len(head) > 0) & (np.strings.str_len(o) > 0)
    return np.where(inside, np.strings.add(prefix, head), "").astype(object)


# np.strings.slice (and the variable-width StringDType op_labels uses) arrived in NumPy 2.3; before,
# op_labels works on the names' code points, a fixed-width array (a row per step, a column per character).
_STRING_SLICE = hasattr(getattr(np, "strings", None), "slice")


def _op_labels_code_points(names: np.ndarray, op_names: np.ndarray) -> np.ndarray:
    """op_labels on any NumPy: the label is the step's name up to the first "/" after its op's name and
    "/", which the rows' code points give column-wise."""
    s, o = np.asarray(names).astype(str), np.asarray(op_names).astype(str)
    width = max(s.dtype.itemsize, o.dtype.itemsize) // 4 + 1  # a column past the longest op's "/"
    u = f"<U{width}"
    name = np.ascontiguousarray(s.astype(u)).view(np.uint32).reshape(len(s), width)
    op = np.ascontiguousarray(o.astype(u)).view(np.uint32).reshape(len(o), width)
    name_len, op_len = np.char.str_len(s), np.char.str_len(o)
    column = np.arange(width)
    # the name starts with the op's name and "/"
    after_op = column >= op_len[:, None]
    starts = np.all((name == op) | after_op, axis=1) & (name[np.arange(len(s)), op_len] == ord("/"))
    # the part after the prefix ends at the next "/" or with the name
    slash = (name == ord("/")) & (column > op_len[:, None])
    end = np.where(slash.any(axis=1), slash.argmax(axis=1), name_len)
    inside = starts & (end > op_len + 1) & (op_len > 0)
    label = np.where(column < end[:, None], name, np.uint32(0)).view(u).reshape(len(s))
    return np.where(inside, label, "").astype(object)


def tree(programs: Columns, op_names: dict[int, str], executions: np.ndarray, c: Counts,
         details: tuple[str, str] = ("", "")) -> Table:
    """The program tree of every IPU (``COLUMNS``; see the module's docstring).

    ``programs``: the table's columns; ``op_names``: op_id -> name; ``executions``: the trace's
    ``Aggregates.executions[ipu, step]``; ``c``: the loop counts; ``details``: the device iterations'
    and the gradient accumulation's words (``loop_details``)."""
    ipu = np.asarray(programs["ipu"], np.int64)
    order = np.lexsort((np.asarray(programs["step"], np.int64), ipu))
    ipu = ipu[order]
    n = len(order)
    if n == 0:
        return Table.empty({c_: object for c_ in COLUMNS})
    step = np.asarray(programs["step"], np.int64)[order]
    stage = np.asarray(programs["stage"], np.int64)[order]
    op_id = np.asarray(programs["op_id"], np.int64)[order]
    cycles = np.asarray(programs["cycles"], np.int64)[order]
    types = programs.strings("type")[order]
    names = programs.strings("name")[order]
    pass_ = programs.strings("pass")[order]
    runs = lookup(executions, ipu, step).astype(np.int64) if executions.size else np.zeros(n, np.int64)
    kinds, kind_of_step = np.unique(types, return_inverse=True)  # a few types: their phases, then each step's
    phase = np.array([PHASES.index(PHASE_OF_TYPE.get(t, "compute")) for t in kinds])[kind_of_step]

    # Segments: consecutive steps of one stage and pass (the update: of the pass) that ran as often.
    in_stage = (stage >= 0) & np.isin(pass_, ("forward", "backward"))
    segment = in_stage | (pass_ == "update")
    seg_stage = np.where(pass_ == "update", -1, stage)
    new = np.r_[True, (ipu[1:] != ipu[:-1]) | (pass_[1:] != pass_[:-1]) | (seg_stage[1:] != seg_stage[:-1])
                | (runs[1:] != runs[:-1]) | ~segment[:-1]]
    seg_id = np.where(segment, np.cumsum(new & segment) - 1, -1)
    # Op passes inside a segment.
    known = np.array([op_names.get(int(i), f"op {i}") for i in np.unique(op_id)], dtype=object)
    step_op = np.where(op_id >= 0, known[np.searchsorted(np.unique(op_id), op_id)], "")
    label = np.where((op_id >= 0) & segment, op_labels(names, step_op), "")
    in_op = (op_id >= 0) & segment & (label != "")
    new_op = np.r_[True, (seg_id[1:] != seg_id[:-1]) | (op_id[1:] != op_id[:-1]) | (label[1:] != label[:-1])
                   | ~in_op[:-1]]
    op_group = np.where(in_op, np.cumsum(new_op & in_op) - 1, -1)

    # Where each segment goes: the micro-batch loop, the iteration loop or the run.
    seg_runs = np.where(segment, runs, -1)
    under_mb = in_stage & c.training & (seg_runs == c.micro_batches)
    under_it = segment & ~under_mb & (seg_runs == c.iterations)
    host = ~segment & (np.asarray(types) != "sync")

    ipus, ipu_index = np.unique(ipu, return_inverse=True)
    chain = np.full((n, len(LEVELS)), -1, np.int64)
    chain[:, ROOT] = ipu_index
    chain[:, RUNS] = ipu_index
    chain[:, ITERATIONS] = np.where(host, ipu_index * 2 + HOST,
                                    np.where(under_mb | under_it, ipu_index * 2 + DEVICE, -1))
    chain[:, MICRO_BATCHES] = np.where(under_mb, ipu_index, -1)
    chain[:, SEGMENT] = seg_id
    chain[:, OP] = op_group
    chain[:, STEP] = np.arange(n)

    total = cycles * runs
    # One node per distinct (level, id), numbered level by level; then put in pre-order.
    keys = [np.unique(chain[chain[:, level] >= 0, level]) for level in range(len(LEVELS))]
    offsets = np.cumsum([0] + [len(k) for k in keys])
    m = int(offsets[-1])
    level_of = np.repeat(np.arange(len(LEVELS)), np.diff(offsets))
    key_of = np.concatenate(keys)
    numbered = np.full((n, len(LEVELS)), -1, np.int64)  # each step's ancestor at each level
    first = np.full(m, n, np.int64)  # each node's first step
    for level in range(len(LEVELS)):
        rows = np.flatnonzero(chain[:, level] >= 0)
        numbered[rows, level] = offsets[level] + np.searchsorted(keys[level], chain[rows, level])
        np.minimum.at(first, numbered[rows, level], rows)
    # A node's path: the first step of its ancestor at each level down to its own (a level it skips
    # takes the next one's), -1 below: sorted, a parent comes before its children, siblings in program order.
    path = np.full((m, len(LEVELS)), -1, np.int64)
    for level in reversed(range(len(LEVELS))):
        ancestor = numbered[first, level]
        value = np.where(ancestor >= 0, first[np.maximum(ancestor, 0)],
                         path[:, level + 1] if level + 1 < len(LEVELS) else -1)
        path[:, level] = np.where(level_of >= level, value, -1)
    order = np.lexsort([path[:, k] for k in reversed(range(len(LEVELS)))])
    rank = np.empty(m, np.int64)
    rank[order] = np.arange(m)
    level_of, key_of, first_step = level_of[order], key_of[order], first[order]
    ids = np.where(numbered >= 0, rank[np.maximum(numbered, 0)], -1)
    # Each node's parent: the nearest ancestor above its level on its first step's chain.
    parent = np.full(m, -1, np.int64)
    depth = np.zeros(m, np.int64)
    for level in range(1, len(LEVELS)):
        here = np.flatnonzero(level_of == level)
        above = ids[first_step[here], :level]
        present = above >= 0
        depth[here] = present.sum(axis=1)
        parent[here] = above[np.arange(len(here)), np.where(present, np.arange(level), -1).max(axis=1)]

    # Figures summed up the tree from the steps: total cycles, cycles per phase, distinct ops.
    totals = np.zeros(m, np.int64)
    by_phase = np.zeros((m, len(PHASES)), np.int64)
    ops = np.zeros(m, np.int64)
    for level in range(len(LEVELS)):
        rows = ids[:, level] >= 0
        np.add.at(totals, ids[rows, level], total[rows])
        np.add.at(by_phase, (ids[rows, level], phase[rows]), total[rows])
        pairs = np.unique(np.stack([ids[rows, level], op_id[rows]])[:, op_id[rows] >= 0], axis=1)
        np.add.at(ops, pairs[0], 1)

    # Executions: a step's from the trace; a segment's or op's, its steps' most; the loops, the trace's counts.
    done = np.zeros(m, np.int64)
    for level in (SEGMENT, OP, STEP, ITERATIONS):
        rows = ids[:, level] >= 0
        np.maximum.at(done, ids[rows, level], runs[rows])
    done[level_of == ROOT] = 1
    done[level_of == RUNS] = c.runs
    device = (level_of == ITERATIONS) & (key_of % 2 == DEVICE)
    done[device] = c.iterations
    host_node = (level_of == ITERATIONS) & (key_of % 2 == HOST)
    done[level_of == MICRO_BATCHES] = c.micro_batches
    parent_done = np.where(parent >= 0, done[np.maximum(parent, 0)], 1)
    repeats = np.where(parent_done > 0, done // np.maximum(parent_done, 1), 0)
    leaf = level_of == STEP
    row = first_step
    one = np.where(leaf, cycles[row], np.where(done > 0, totals // np.maximum(done, 1), 0))
    root_total = totals[np.flatnonzero(level_of == ROOT)][ipu_index[row]]
    share = np.where(root_total > 0, 100.0 * totals / np.maximum(root_total, 1), 0.0)

    # Words: a node's kind and name.
    kind = np.full(m, "sequence", dtype=object)
    kind[level_of == ROOT] = "program"
    kind[(level_of == RUNS) | device | (level_of == MICRO_BATCHES)] = "repeat"
    kind[leaf] = types[row[leaf]]
    name = np.empty(m, dtype=object)
    node_ipu = ipus[ipu_index[row]]
    name[level_of == ROOT] = np.char.add("IPU ", node_ipu[level_of == ROOT].astype(str)).astype(object)
    name[level_of == RUNS] = "runs (host calls)"
    name[host_node] = "host call"
    name[device] = "device iterations"
    name[level_of == MICRO_BATCHES] = "gradient accumulation"
    seg = level_of == SEGMENT
    seg_name = np.where(pass_[row[seg]] == "update", "weight update",
                        np.char.add(np.char.add("stage ", stage[row[seg]].astype(str)), " ").astype(object)
                        + pass_[row[seg]])
    name[seg] = seg_name
    opn = level_of == OP
    name[opn] = label[row[opn]]
    name[leaf] = names[row[leaf]]
    detail = np.full(m, "", dtype=object)
    detail[device] = details[0]
    detail[level_of == MICRO_BATCHES] = details[1]
    detail[level_of == RUNS] = _plural(c.runs, "host call")
    structural = level_of < SEGMENT
    node_phase = np.where(leaf, phase[row], np.argmax(by_phase, axis=1))
    return Table({
        "node": np.arange(m, dtype=np.int64),
        "parent": parent,
        "depth": depth,
        "ipu": node_ipu.astype(np.int64),
        "kind": kind,
        "name": name,
        "step": np.where(leaf, step[row], -1),
        "stage": np.where(structural | (seg & (pass_[row] == "update")), -1, stage[row]),
        "pass": np.where(structural, "", pass_[row]).astype(object),
        "phase": np.asarray(PHASES, dtype=object)[node_phase],
        "op": np.where((level_of >= OP), step_op[row], "").astype(object),
        "ops": ops,
        "repeats": repeats,
        "executions": done,
        "cycles": one,
        "total_cycles": totals,
        "share_pct": share,
        "detail": detail,
    })


def matches(table: Table, text: str) -> np.ndarray:
    """The nodes whose own name or op contains ``text`` (case-insensitive): a mask."""
    words = text.strip().lower()
    names = np.char.lower(np.asarray(table["name"], dtype=str))
    ops = np.char.lower(np.asarray(table["op"], dtype=str))
    return (np.char.find(names, words) >= 0) | (np.char.find(ops, words) >= 0)


def search(table: Table, text: str) -> np.ndarray:
    """The nodes whose name or op contains ``text`` (case-insensitive), with all their ancestors: a mask."""
    if not text.strip():
        return np.ones(len(table), bool)
    keep = matches(table, text)
    parent = np.asarray(table["parent"], np.int64)
    up = np.flatnonzero(keep)
    while len(up):  # one pass per level of the tree (seven at most)
        up = parent[up]
        up = np.unique(up[up >= 0])
        up = up[~keep[up]]
        keep[up] = True
    return keep
