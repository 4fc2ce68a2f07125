"""Exchange: time by phase, bytes and cycles by kind, the IPU-to-IPU matrix, bandwidth, costliest steps.

Inputs: the trace (phase totals, step executions), ``exchanges``, ``programs`` and the target.
Formulas in docs/reports.md, "Exchange". Bandwidth peaks come from optional target keys; a
missing key gives NaN, never an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import PHASE, Columns, StepIndex, StepPieces, Table, sum_by
from popvision_py.analysis.trace.scan import Aggregates, aggregates
from popvision_py.format.schema import EXCHANGE_KINDS, TABLES

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
    time (only the steps that ran are looked up).
    """
    return StepGrids.of(StepPieces.of(exchanges), trace, programs).executed(exchanges)


@dataclass(frozen=True)
class StepGrids:
    """What ``executed`` looks each exchange row's step up in, over the (ipu, step) grid of the steps the trace ran
    (``aggregates(trace).executions``): how often it ran, its cycles, and the cycles of its transfers summed over
    every exchange row (``in_step``; a step's rows may lie in two pieces). A row of a step that never ran is
    executed 0 times: every total of it is 0."""

    runs: np.ndarray
    step_cycles: np.ndarray
    in_step: np.ndarray

    @classmethod
    def of(cls, exchanges: StepPieces, trace: Aggregates, programs: Columns | StepPieces) -> StepGrids:
        runs = aggregates(trace).executions
        height, width = runs.shape
        step_cycles = np.zeros(height * width, np.int64)
        for _, part in programs.pieces() if isinstance(programs, StepPieces) else [(0, programs)]:
            mine, key = _cells(part, height, width)
            step_cycles[key] = part["cycles"][mine]
        in_step = np.zeros(height * width, np.int64)
        for _, part in exchanges.pieces():
            mine, key = _cells(part, height, width)
            np.add.at(in_step, key, part["cycles"][mine].astype(np.int64, copy=False))
        return cls(runs, step_cycles, in_step)

    def executed(self, exchanges: Columns) -> Executed:
        """``exchanges``' rows (the whole table or a piece of it) joined with their steps."""
        mine, key = _cells(exchanges, *self.runs.shape)
        cycles = exchanges["cycles"].astype(np.int64, copy=False)
        runs, exposed = np.zeros(len(cycles), np.int64), np.zeros(len(cycles), np.int64)
        runs[mine] = self.runs.ravel()[key]
        in_step = self.in_step[key]
        # the step's cycles x (cycles / the step's cycles of transfers), each array let go once used
        share = cycles[mine] / np.where(in_step > 0, in_step, 1)
        share *= self.step_cycles[key]
        share[in_step <= 0] = 0
        del in_step, key
        exposed[mine] = np.minimum(cycles[mine], np.rint(share, out=share).astype(np.int64))
        del share
        return Executed(exchanges, runs, exchanges["bytes"] * runs, cycles * runs, exposed * runs)


def _cells(rows: Columns, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose (ipu, step) lies in a grid of ``height`` IPUs and ``width`` steps, and their cells."""
    ipu, step = rows["ipu"], rows["step"]
    mine = np.flatnonzero((ipu >= 0) & (ipu < height) & (step >= 0) & (step < width))
    key = np.multiply(ipu[mine], width, dtype=np.int64)
    key += step[mine]
    return mine, key


COSTLIEST_TOP = 20  # the costliest rows ``totals`` keeps by default: the report's ten and the dashboard's fifteen


@dataclass(frozen=True)
class Totals:
    """``executed``'s figures of every exchange row summed, made a piece of rows at a time (``totals``): by kind
    (``kinds``: the schema's, then any other a row holds, sorted; ``by_kind``: a row of each kind's executions,
    bytes, cycles and exposed cycles), by (source, destination) (``pairs``, sorted, each ``(src + 2) << 32 |
    (dst + 2)``, with ``pair_bytes`` and ``pair_cycles``), and each piece's ``top`` costliest rows (``candidates``:
    COSTLIEST_COLUMNS but the name, in row order; every row where ``top`` is 0), of which ``costliest`` takes its
    ``n``."""

    kinds: list[str]
    by_kind: np.ndarray
    pairs: np.ndarray
    pair_bytes: np.ndarray
    pair_cycles: np.ndarray
    top: int
    candidates: Table

    @classmethod
    def of(cls, done: Executed | Iterable[Executed], top: int = COSTLIEST_TOP) -> Totals:
        """The totals of one ``Executed`` (a table, or a piece of one), or of pieces' as they come, in row order."""
        sums: dict[str, np.ndarray] = {}
        pairs, costly = [], []
        for part in [done] if isinstance(done, Executed) else done:
            words = part.exchanges.used_words("kind").tolist()
            code = part.exchanges.codes_in("kind", tuple(words))
            figures = np.array([sum_by(code, v, len(words) + 1)[:-1] for v in (
                part.executions, part.total_bytes, part.total_cycles, part.exposed_cycles)], np.int64)
            for word, column in zip(words, figures.T):
                sums[word] = sums.get(word, 0) + column
            pairs.append(_pairs(part))
            costly.append(_costly(part, top))
            del part
        kinds = list(EXCHANGE_KINDS) + sorted(set(sums) - set(EXCHANGE_KINDS))
        by_kind = np.array([sums.get(k, np.zeros(4, np.int64)) for k in kinds], np.int64).T.reshape(4, len(kinds))
        if not costly:  # no row: the columns' own types
            none = Executed(Columns(TABLES["exchanges"].schema.empty_table()), *[np.zeros(0, np.int64)] * 4)
            pairs, costly = [_pairs(none)], [_costly(none, top)]
        cells, at = np.unique(np.concatenate([k for k, _, _ in pairs]), return_inverse=True)
        nbytes = sum_by(at.ravel(), np.concatenate([b for _, b, _ in pairs]), len(cells))
        cycles = sum_by(at.ravel(), np.concatenate([c for _, _, c in pairs]), len(cells))
        candidates = Table({c: np.concatenate([t[c] for t in costly]) for c in costly[0].names})
        return cls(kinds, by_kind, cells, nbytes, cycles, top, candidates)


def totals(exchanges: StepPieces, trace: Aggregates, programs: Columns | StepPieces,
           top: int = COSTLIEST_TOP) -> Totals:
    """Every exchange row's ``executed`` figures summed (``Totals``), the exchanges read a piece at a time as
    ``exchanges`` gives them, twice (once for each step's cycles of transfers): what a report holds is a piece's
    rows and the step grids, not every row's figures (a 10 GB import's 556,800 transfers: four arrays of 4 MiB beside
    the table's 16 MiB)."""
    grids = StepGrids.of(exchanges, trace, programs)
    # each piece summed as it comes: its rows and figures let go before the next is read
    return Totals.of((grids.executed(part) for _, part in exchanges.pieces()), top)


def _pairs(done: Executed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A piece's (source, destination) keys that moved something, sorted, and their bytes and cycles."""
    src, dst = done.exchanges["src_ipu"], done.exchanges["dst_ipu"]
    key = np.add(src, 2, dtype=np.int64) << 32
    key |= np.add(dst, 2, dtype=np.int64)
    cells, at = np.unique(key, return_inverse=True)
    nbytes, cycles = sum_by(at.ravel(), done.total_bytes, len(cells)), sum_by(at.ravel(), done.total_cycles, len(cells))
    keep = np.flatnonzero((nbytes > 0) | (cycles > 0))
    return cells[keep], nbytes[keep], cycles[keep]


def _costly(done: Executed, top: int) -> Table:
    """A piece's ``top`` costliest rows in ``costliest``'s order (every row where ``top`` is 0), in row order:
    COSTLIEST_COLUMNS but the name. The whole table's ``top`` costliest are among its pieces' (the order is a total
    one: ties in row order)."""
    x, total = done.exchanges, done.total_cycles
    # only the rows as costly as the top-th or more are sorted (a 10 GB import's 556,800 sorted were 13 MiB), and of
    # them the first top kept (a run of equal transfers ties at the top-th: most of a piece's rows)
    some = np.flatnonzero(total >= np.partition(total, len(total) - top)[len(total) - top]) \
        if 0 < top < len(total) else np.arange(len(total))
    if 0 < top < len(some):
        some = np.sort(some[np.lexsort((x["step"][some], x["ipu"][some], -total[some]))[:top]])
    return Table({"ipu": x["ipu"][some], "step": x["step"][some], "kind": x.strings("kind", some),
                  "src_ipu": x["src_ipu"][some], "dst_ipu": x["dst_ipu"][some], "bytes": x["bytes"][some],
                  "cycles": x["cycles"][some], "executions": done.executions[some], "total_cycles": total[some]})


def by_kind(done: Totals | Executed, total_cycles: int) -> Table:
    """Every exchange kind (all five, zeros included): BY_KIND_COLUMNS in the schema's kind order.

    ``time_pct`` is the exposed share of the run's IPU-cycles (what the time line shows as exchange
    and streaming), ``hidden_pct`` the share of transfers overlapped with other work.
    """
    done = done if isinstance(done, Totals) else Totals.of(done)
    executions, nbytes, cycles, exposed = done.by_kind
    share = (lambda v: 100.0 * v / total_cycles) if total_cycles else (lambda v: np.full(len(done.kinds), np.nan))
    return Table({
        "kind": np.array(done.kinds, dtype=object),
        "executions": executions,
        "bytes": nbytes,
        "cycles": cycles,
        "exposed_cycles": exposed,
        "hidden_cycles": cycles - exposed,
        "time_pct": share(exposed),
        "hidden_pct": share(cycles - exposed),
    })


def matrix(done: Totals | Executed) -> Table:
    """Bytes and cycles moved from each source to each destination (-1 host, -2 streaming memory), each pair that
    moved something, sorted by source, then destination."""
    done = done if isinstance(done, Totals) else Totals.of(done)
    return Table({"src_ipu": (done.pairs >> 32) - 2, "dst_ipu": (done.pairs & 0xFFFFFFFF) - 2,
                  "bytes": done.pair_bytes, "cycles": done.pair_cycles})


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


def costliest(done: Totals | Executed, index: StepIndex | StepPieces, n: int = 10) -> Table:
    """The ``n`` exchange steps with the most cycles over the trace (cycles x executions): COSTLIEST_COLUMNS, the most
    first, then by IPU, then step (ties in row order). ``index``: the steps' names (``Report.step_names``); ``done``:
    ``Totals`` of ``n`` rows at least (``top``)."""
    if n < 0:
        raise ValueError(f"the costliest exchanges are a count of rows, 0 or more, not {n}")
    done = done if isinstance(done, Totals) else Totals.of(done, n)
    if n > done.top > 0:
        raise ValueError(f"the totals keep the {done.top} costliest rows, not {n}")
    x, total = done.candidates, done.candidates["total_cycles"]
    rows = np.lexsort((x["step"], x["ipu"], -total))[:n]
    return Table({
        "ipu": x["ipu"][rows], "step": x["step"][rows],
        "name": index.names_at(x["ipu"][rows], x["step"][rows]),
        "kind": x["kind"][rows], "src_ipu": x["src_ipu"][rows], "dst_ipu": x["dst_ipu"][rows],
        "bytes": x["bytes"][rows], "cycles": x["cycles"][rows], "executions": x["executions"][rows],
        "total_cycles": total[rows],
    })
