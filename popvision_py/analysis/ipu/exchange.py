"""Exchange: time by phase, bytes and cycles by kind, the IPU-to-IPU matrix, bandwidth, costliest steps.

Inputs: the trace (phase totals, step executions), ``exchanges``, ``programs`` and the target.
Formulas in docs/reports.md, "Exchange". Bandwidth peaks come from optional target keys; a
missing key gives NaN, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import PHASE, Columns, StepIndex, StepPieces, Table, lookup, sum_by
from popvision_py.analysis.trace.scan import Aggregates, aggregates
from popvision_py.format.schema import EXCHANGE_KINDS

BY_KIND_COLUMNS = ["kind", "executions", "bytes", "cycles", "exposed_cycles", "hidden_cycles", "time_pct", "hidden_pct"]
MATRIX_COLUMNS = ["src_ipu", "dst_ipu", "bytes", "cycles"]
BANDWIDTH_COLUMNS = ["kind", "bytes", "cycles", "achieved_bytes_per_s", "peak_bytes_per_s", "efficiency_pct"]
COSTLIEST_COLUMNS = ["ipu", "step", "name", "kind", "src_ipu", "dst_ipu", "bytes", "cycles", "executions",
                     "total_cycles"]


@dataclass(frozen=True)
class ExchangeFigures:
    """IPU-cycles by phase over the whole trace (summed over IPUs), and each as a share of the total."""

    total_cycles: int
    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int
    stream_cycles: int
    idle_cycles: int
    compute_pct: float
    exchange_pct: float
    sync_pct: float
    stream_pct: float
    idle_pct: float


def figures(trace: Aggregates) -> ExchangeFigures:
    """Cycles in each phase summed over IPUs; ``_pct`` = 100 x phase / total."""
    by_phase = aggregates(trace).cube.total().sum(axis=0)  # per phase code (the last: unknown words)
    get = lambda p: int(by_phase[PHASE[p]]) if len(by_phase) else 0  # noqa: E731
    total = int(by_phase[: len(PHASE)].sum())
    pct = lambda v: 100.0 * v / total if total else float("nan")  # noqa: E731
    c, e, s, st, i = get("compute"), get("exchange"), get("sync"), get("stream"), get("idle")
    return ExchangeFigures(total, c, e, s, st, i, pct(c), pct(e), pct(s), pct(st), pct(i))


@dataclass(frozen=True)
class Executed:
    """Each ``exchanges`` row with how often its step ran and its totals over the trace (arrays, row order).

    ``total_cycles`` is the transfer's time; ``exposed_cycles`` the part of it the trace shows as
    its program step's time, the rest being hidden behind other work (weights streamed while the
    previous phase computes).
    """

    exchanges: Columns
    executions: np.ndarray
    total_bytes: np.ndarray
    total_cycles: np.ndarray
    exposed_cycles: np.ndarray


def executed(exchanges: Columns, trace: Aggregates, programs: Columns | StepPieces) -> Executed:
    """Each exchange row joined with its step's executions and cycles (dense (ipu, step) lookups, no merge).

    A step's cycles are shared by its exchange rows in proportion to their transfer cycles, and no
    row is exposed longer than its transfer: exposed = min(cycles, step cycles x cycles / the step's
    cycles of transfers). ``programs``: the whole table, or its ``ipu``, ``step`` and ``cycles`` a piece at a
    time (only the steps of exchanges are looked up).
    """
    runs = lookup(aggregates(trace).executions, exchanges["ipu"], exchanges["step"]).astype(np.int64, copy=False)
    cycles = exchanges["cycles"].astype(np.int64, copy=False)
    ipu, step = exchanges["ipu"], exchanges["step"]
    width, height = int(step.max(initial=-1)) + 1, int(ipu.max(initial=-1)) + 1
    # each figure of a row made in place and let go once used: a 10 GB import's 556,800 rows make arrays of 4 MiB,
    # and a dozen of them were this section's peak
    key = np.multiply(ipu, width, dtype=np.int64)
    key += step
    step_cycles = np.zeros(height * width, np.int64)  # each exchange step's cycles: the grid of the exchanges' steps
    for _, part in programs.pieces() if isinstance(programs, StepPieces) else [(0, programs)]:
        mine = np.flatnonzero((part["ipu"] < height) & (part["step"] < width))
        step_cycles[np.multiply(part["ipu"][mine], width, dtype=np.int64) + part["step"][mine]] = part["cycles"][mine]
    in_step = sum_by(key, cycles, height * width)[key] if len(key) else np.zeros(0, np.int64)
    share = cycles / np.where(in_step > 0, in_step, 1)  # the step's cycles x (cycles / the step's cycles of transfers)
    share *= step_cycles[key]
    del key, step_cycles
    share[in_step <= 0] = 0
    del in_step
    exposed = np.minimum(cycles, np.rint(share, out=share).astype(np.int64))
    del share
    return Executed(exchanges, runs, exchanges["bytes"] * runs, cycles * runs, exposed * runs)


def by_kind(done: Executed, total_cycles: int) -> Table:
    """Every exchange kind (all five, zeros included): BY_KIND_COLUMNS in the schema's kind order.

    ``time_pct`` is the exposed share of the run's IPU-cycles (what the time line shows as exchange
    and streaming), ``hidden_pct`` the share of transfers overlapped with other work.
    """
    kinds = list(EXCHANGE_KINDS) + sorted(set(done.exchanges.used_words("kind")) - set(EXCHANGE_KINDS))
    code = done.exchanges.codes_in("kind", tuple(kinds))
    n = len(kinds) + 1
    cycles = sum_by(code, done.total_cycles, n)[:-1]
    exposed = sum_by(code, done.exposed_cycles, n)[:-1]
    share = (lambda v: 100.0 * v / total_cycles) if total_cycles else (lambda v: np.full(len(kinds), np.nan))
    return Table({
        "kind": np.array(kinds, dtype=object),
        "executions": sum_by(code, done.executions, n)[:-1],
        "bytes": sum_by(code, done.total_bytes, n)[:-1],
        "cycles": cycles,
        "exposed_cycles": exposed,
        "hidden_cycles": cycles - exposed,
        "time_pct": share(exposed),
        "hidden_pct": share(cycles - exposed),
    })


def matrix(done: Executed) -> Table:
    """Bytes and cycles moved from each source to each destination (-1 host, -2 streaming memory)."""
    src, dst = done.exchanges["src_ipu"], done.exchanges["dst_ipu"]
    if not len(src):
        return Table.empty({c: np.int64 for c in MATRIX_COLUMNS})
    # -2 (streaming memory) is the smallest id: shift by 2 for a dense (src, dst) grid; the key made in place, in
    # int64, from the columns' own integers (a 10 GB import's 556,800 transfers: 4 MiB, not 17)
    width = int(max(src.max(), dst.max())) + 3
    key = np.add(src, 2, dtype=np.int64)
    key *= width
    key += dst
    key += 2
    # the pairs that occur, where the grid would be larger than the rows: 4,096 ranks make 16.8 M cells of a few
    # thousand pairs
    cells, key = np.unique(key, return_inverse=True) if width * width > max(len(key), 1 << 16) else (None, key)
    size = width * width if cells is None else len(cells)
    nbytes, cycles = sum_by(key, done.total_bytes, size), sum_by(key, done.total_cycles, size)
    cell = np.flatnonzero((nbytes > 0) | (cycles > 0))  # row-major: sorted by src, then dst
    at = cell if cells is None else cells[cell]
    return Table({"src_ipu": at // width - 2, "dst_ipu": at % width - 2, "bytes": nbytes[cell],
                  "cycles": cycles[cell]})


def peak_bytes_per_s(target: dict[str, Any]) -> dict[str, float]:
    """Peak bandwidth per exchange kind from the target's optional keys (NaN where unknown)."""
    def num(key: str) -> float:
        value = target.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else np.nan

    internal = num("exchange_bytes_per_cycle_per_tile") * num("tiles_per_ipu") * num("clock_hz")
    link = num("ipu_link_bytes_per_s")
    return {"internal": internal, "inter_ipu": link, "host": num("host_link_bytes_per_s"),
            "remote_buffer": num("streaming_memory_bytes_per_s"), "all_reduce": link}


def bandwidth(kinds: Table, target: dict[str, Any], sizes_recorded: bool = True) -> Table:
    """Achieved = bytes / (cycles / clock_hz); efficiency = 100 x achieved / peak: BANDWIDTH_COLUMNS. Without
    ``sizes_recorded`` (an imported trace, whose transfers have a size only where the trace records one), a kind
    of no bytes has no achieved bandwidth (NaN), not 0."""
    clock = float(target.get("clock_hz") or np.nan)
    kind, nbytes, cycles = list(kinds["kind"]), np.asarray(kinds["bytes"]), np.asarray(kinds["cycles"])
    seconds = cycles.astype(float) / clock
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where((seconds > 0) & ((nbytes > 0) | sizes_recorded), nbytes.astype(float) / seconds, np.nan)
    peaks = peak_bytes_per_s(target)
    peak = np.array([peaks.get(k, np.nan) for k in kind], float)
    return Table({"kind": np.array(kind, dtype=object), "bytes": nbytes, "cycles": cycles,
                  "achieved_bytes_per_s": achieved, "peak_bytes_per_s": peak,
                  "efficiency_pct": 100.0 * achieved / peak})


def costliest(done: Executed, index: StepIndex | StepPieces, n: int = 10) -> Table:
    """The ``n`` exchange steps with the most cycles over the trace (cycles x executions): COSTLIEST_COLUMNS.
    ``index``: the steps' names (``Report.step_names``)."""
    x, total = done.exchanges, done.total_cycles
    # only the rows as costly as the n-th costliest or more are sorted (a 10 GB import's 556,800 sorted were 13 MiB)
    some = np.flatnonzero(total >= np.partition(total, len(total) - n)[len(total) - n]) if 0 < n < len(total) else \
        np.arange(len(total))
    rows = some[np.lexsort((x["step"][some], x["ipu"][some], -total[some]))][:n]
    return Table({
        "ipu": x["ipu"][rows], "step": x["step"][rows],
        "name": index.names_at(x["ipu"][rows], x["step"][rows]),
        "kind": x.strings("kind", rows), "src_ipu": x["src_ipu"][rows], "dst_ipu": x["dst_ipu"][rows],
        "bytes": x["bytes"][rows], "cycles": x["cycles"][rows], "executions": done.executions[rows],
        "total_cycles": done.total_cycles[rows],
    })
