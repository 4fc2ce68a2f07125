"""Columnar building blocks the analyzers share: the trace as NumPy arrays, and small helpers.

The trace may hold tens of millions of rows, so it is kept as one NumPy array per column with its
categorical columns (``pass``, ``phase``) turned into fixed codes (indexes into ``schema.PASSES`` /
``schema.PHASES``) whatever dictionary the file used. Aggregations over it use ``np.bincount`` on
small dense keys: no sort, no Python loop over rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.format import schema as S

PHASES: tuple[str, ...] = S.PHASES
PASSES: tuple[str, ...] = S.PASSES
PHASE = {name: i for i, name in enumerate(PHASES)}
PASS = {name: i for i, name in enumerate(PASSES)}

# The trace columns every report reads (the speed benchmark reads the same list).
TRACE_COLUMNS: tuple[str, ...] = (
    "run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase", "start_cycle", "end_cycle",
)


def codes(column: pa.ChunkedArray | pa.Array, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Codes of a string/dictionary column as indexes into ``vocabulary``; unknown values get ``len(vocabulary)``."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    unknown = len(vocabulary)
    out = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            words = chunk.dictionary.to_pylist()
            lut = np.array([vocabulary.index(w) if w in vocabulary else unknown for w in words] or [unknown], np.int8)
            out.append(lut[chunk.indices.to_numpy(zero_copy_only=False)])
        else:
            index = pc.index_in(chunk, value_set=pa.array(vocabulary, pa.string()))
            out.append(pc.fill_null(index, unknown).to_numpy(zero_copy_only=False).astype(np.int8))
    return np.concatenate(out) if out else np.zeros(0, np.int8)


def numbers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric column as one NumPy array (zero-copy where Arrow allows)."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0).to_numpy(zero_copy_only=False)
        if column.num_chunks == 0:
            return np.zeros(0, column.type.to_pandas_dtype())
    return column.to_numpy()


@dataclass
class TraceArrays:
    """The trace, one NumPy array per column; ``pass_`` and ``phase`` are codes into PASSES / PHASES."""

    run: np.ndarray
    iteration: np.ndarray
    micro_batch: np.ndarray
    ipu: np.ndarray
    stage: np.ndarray
    pass_: np.ndarray
    step: np.ndarray
    phase: np.ndarray
    start: np.ndarray
    end: np.ndarray
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_arrow(cls, table: pa.Table) -> "TraceArrays":
        return cls(
            run=numbers(table["run"]),
            iteration=numbers(table["iteration"]),
            micro_batch=numbers(table["micro_batch"]),
            ipu=numbers(table["ipu"]),
            stage=numbers(table["stage"]),
            pass_=codes(table["pass"], PASSES),
            step=numbers(table["step"]),
            phase=codes(table["phase"], PHASES),
            start=numbers(table["start_cycle"]),
            end=numbers(table["end_cycle"]),
        )

    def __len__(self) -> int:
        return len(self.start)

    @property
    def duration(self) -> np.ndarray:
        if "duration" not in self._cache:
            self._cache["duration"] = self.end - self.start
        return self._cache["duration"]

    @property
    def num_ipus(self) -> int:
        return int(self.ipu.max()) + 1 if len(self) else 0


def global_iteration(trace: TraceArrays) -> np.ndarray:
    """Iteration index over the whole trace: ``run * iterations_per_run + iteration``."""
    if not len(trace):
        return np.zeros(0, np.int64)
    per_run = int(trace.iteration.max()) + 1
    return trace.run.astype(np.int64) * per_run + trace.iteration


def iterations_traced(trace: TraceArrays, run: dict) -> int:
    """Iterations the trace covers: distinct (run, iteration) pairs, else the manifest's runs x device_iterations."""
    if len(trace):
        g = global_iteration(trace)
        seen = np.zeros(int(g.max()) + 1, bool)
        seen[g] = True
        return int(seen.sum())
    return int(run.get("runs", 1) or 1) * int(run.get("device_iterations", 1) or 1)


def sum_by(keys: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """``np.bincount`` returning int64 sums (exact for cycles and bytes)."""
    if weights is None:
        return np.bincount(keys, minlength=size).astype(np.int64)
    if len(keys) == 0:
        return np.zeros(size, np.int64)
    # bincount sums in float64; exact for sums below 2**53 cycles, plenty for traces.
    return np.rint(np.bincount(keys, weights=weights, minlength=size)).astype(np.int64)


def executions(trace: TraceArrays) -> pd.DataFrame:
    """How many times each program step ran: ``[ipu, step, executions]``, sorted by ipu, step."""
    cached = trace._cache.get("executions")
    if cached is not None:
        return cached
    mask = trace.step >= 0
    ipu, step = trace.ipu[mask].astype(np.int64), trace.step[mask].astype(np.int64)
    if len(step) == 0:
        frame = pd.DataFrame({"ipu": pd.Series([], dtype="int64"), "step": pd.Series([], dtype="int64"),
                              "executions": pd.Series([], dtype="int64")})
    else:
        width = int(step.max()) + 1
        counts = np.bincount(ipu * width + step)
        nz = np.flatnonzero(counts)
        frame = pd.DataFrame({"ipu": nz // width, "step": nz % width, "executions": counts[nz].astype(np.int64)})
    trace._cache["executions"] = frame
    return frame


def phase_cycles(trace: TraceArrays) -> pd.DataFrame:
    """Cycles per IPU and phase: ``[ipu, phase, cycles]`` for every IPU in the trace and every phase."""
    n_ipus, n_phases = trace.num_ipus, len(PHASES) + 1
    sums = sum_by(trace.ipu.astype(np.int64) * n_phases + trace.phase, trace.duration, n_ipus * n_phases)
    sums = sums.reshape(n_ipus, n_phases)[:, : len(PHASES)]
    return pd.DataFrame({
        "ipu": np.repeat(np.arange(n_ipus), len(PHASES)),
        "phase": np.tile(np.array(PHASES, dtype=object), n_ipus),
        "cycles": sums.ravel(),
    })


def category(values, categories) -> pd.Categorical:
    """A pandas categorical with a fixed category order."""
    return pd.Categorical(values, categories=list(categories))


def empty(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with typed columns."""
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in columns.items()})


def finish(frame: pd.DataFrame, columns: list[str], sort: list[str] | None = None,
           ascending: bool | list[bool] = True) -> pd.DataFrame:
    """Select ``columns`` in order, sort stably, and give a fresh RangeIndex."""
    if sort:
        frame = frame.sort_values(sort, ascending=ascending, kind="stable")
    return frame.loc[:, columns].reset_index(drop=True)


def as_str(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Categorical columns to plain strings (object), so frames merge and compare simply."""
    for column in columns:
        if column in frame:
            frame[column] = frame[column].astype(str)
    return frame
