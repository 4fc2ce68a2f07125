"""Columnar building blocks the analyzers share: the trace as NumPy arrays, and small helpers.

The trace may hold tens of millions of rows, so it is kept as one NumPy array per column with its
categorical columns (``pass``, ``phase``) turned into fixed codes (indexes into ``schema.PASSES`` /
``schema.PHASES``) whatever dictionary the file used. Aggregations over it use ``np.bincount`` on
small dense keys: no sort, no Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from popvision_py.analysis.common.answer import Table as Table  # re-exported: where the analyzers import it
from popvision_py.format import schema as S
from popvision_py.format.arrays import arrow, numbers

if TYPE_CHECKING:  # pandas is imported where a frame is built: `export-trace` and `sql` use these arrays without it
    import pandas as pd

PHASES: tuple[str, ...] = S.PHASES
PASSES: tuple[str, ...] = S.PASSES
PHASE = {name: i for i, name in enumerate(PHASES)}
PASS = {name: i for i, name in enumerate(PASSES)}

# The trace columns every report reads (the speed benchmark reads the same list).
TRACE_COLUMNS: tuple[str, ...] = (
    "run", "iteration", "micro_batch", "ipu", "stage", "pass", "step", "phase", "start_cycle", "end_cycle",
)

# The columns the reports read from each table, each decoded once per Report (``Report.columns``).
# ops: its bytes and tiles feed no report. programs is read whole for ``trace.steps``.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "ops": ("op_id", "name", "kind", "block", "stage", "ipu", "pass", "flops"),
    "programs": ("ipu", "step", "type", "name", "op_id", "stage", "pass", "tiles", "bytes", "cycles"),
    "tile_memory": ("ipu", "tile", "category", "always_live", "bytes"),
    "variables": ("var_id", "name", "ipu", "category", "always_live", "bytes", "start_tile", "tiles",
                  "live_from_step", "live_to_step", "op_id", "dtype"),  # dtype: schema 2 on
    "liveness": ("ipu", "step", "always_live_bytes", "not_always_live_bytes", "worst_tile", "worst_tile_bytes"),
    "exchanges": ("ipu", "step", "kind", "src_ipu", "dst_ipu", "bytes", "cycles"),
    "tile_cycles": ("ipu", "step", "tile", "cycles", "vertices"),  # vertices: schema 2 on
    "kernels": ("ipu", "stream", "kind", "name", "start_cycle", "end_cycle", "correlation", "launch_start_cycle",
                "launch_end_cycle", "launch_name", "bytes", "group", "op", "module"),  # schema 5 on
    "trace": TRACE_COLUMNS,
}


def codes(column: pa.ChunkedArray | pa.Array, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Codes of a string/dictionary column as indexes into ``vocabulary``; unknown values get ``len(vocabulary)``."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    unknown = len(vocabulary)
    out = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            words = chunk.dictionary.to_pylist()
            lut = np.array([vocabulary.index(w) if w in vocabulary else unknown for w in words] or [unknown], np.int8)
            out.append(lut[numbers(chunk.indices)])
        else:
            import pyarrow.compute as pc  # here: `sql` renders its result with this module, and never needs it

            index = pc.index_in(chunk, value_set=arrow(list(vocabulary)))
            out.append(numbers(index, missing=unknown).astype(np.int8))
    return np.concatenate(out) if out else np.zeros(0, np.int8)


class Columns:
    """One small table as NumPy columns, each converted once: ``t["bytes"]`` is an array.

    Category columns (Arrow dictionaries) stay as codes plus their words: ``codes(name)`` and
    ``words(name)``; ``strings(name, rows)`` decodes only the rows an answer shows. Going through
    pandas would cost more than the analysis itself on these small tables (a categorical per
    name column, an index per frame), so the analyzers join and group on these arrays and build
    one DataFrame per answer. ``frame()`` gives the pandas view for the few answers that return
    the table's own columns (``trace.steps``).
    """

    def __init__(self, table: pa.Table) -> None:
        if any(column.num_chunks > 1 for column in table.columns):  # several row groups: one array per column
            table = table.unify_dictionaries().combine_chunks()
        self._table = table
        self._arrays: dict[str, np.ndarray] = {}
        self._frame: pd.DataFrame | None = None

    def let_go(self) -> None:
        """Let go of the arrays made from the table (each made again, from it, when asked), keeping the table."""
        self._arrays = {}
        self._frame = None

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Columns:
        return cls(pa.Table.from_pandas(frame, preserve_index=False))

    def __len__(self) -> int:
        return self._table.num_rows

    def __contains__(self, name: str) -> bool:
        return name in self._table.column_names

    def _column(self, name: str) -> pa.Array:
        column = self._table[name]
        if column.num_chunks == 0:
            return pa.nulls(0, column.type)
        return column.chunk(0)

    def __getitem__(self, name: str) -> np.ndarray:
        """A numeric or boolean column as a NumPy array; a category column as its strings."""
        if name not in self._arrays:
            column = self._column(name)
            if pa.types.is_dictionary(column.type) or pa.types.is_string(column.type):
                self._arrays[name] = self.strings(name)
            else:
                self._arrays[name] = numbers(column)
        return self._arrays[name]

    def codes(self, name: str) -> np.ndarray:
        """Indexes into ``words(name)``, one per row."""
        key = "codes:" + name
        if key not in self._arrays:
            column = self._column(name)
            if not self.coded(name):
                column = column.dictionary_encode()
                self._arrays["words:" + name] = np.asarray(column.dictionary.to_pylist(), dtype=object)
            self._arrays[key] = numbers(column.indices).astype(np.int64)
        return self._arrays[key]

    def coded(self, name: str) -> bool:
        """Whether a column is stored as an Arrow dictionary: its codes index the words of every slice
        (``rows``) of the table, not only of the slice whose codes they are."""
        return pa.types.is_dictionary(self._column(name).type)

    def words(self, name: str) -> np.ndarray:
        """The distinct strings of a category column (object array), in its dictionary's order."""
        key = "words:" + name
        if key not in self._arrays:
            if self.coded(name):
                self._arrays[key] = np.asarray(self._column(name).dictionary.to_pylist(), dtype=object)
            else:
                self.codes(name)
        return self._arrays[key]

    def strings(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """A category column's values as strings (object array), only at ``rows`` if given (their codes taken in
        Arrow where the column's are not made yet: not a whole column of codes made for a few rows)."""
        return self.words(name)[self.codes(name) if rows is None else self.codes_at(name, rows)]

    def codes_at(self, name: str, rows: np.ndarray) -> np.ndarray:
        """``codes(name)[rows]``, taken in Arrow where the column's codes are not made yet (a coded column, rows an
        index of rows >= 0)."""
        at = np.asarray(rows)
        if (at.ndim == 1 and at.dtype.kind in "iu" and (not len(at) or int(at.min()) >= 0)
                and "codes:" + name not in self._arrays and self.coded(name)):
            taken = self._column(name).indices.take(pa.array(at.astype(np.int64, copy=False), pa.int64()))
            return numbers(taken).astype(np.int64)
        return self.codes(name)[at]

    def rows(self, start: int, stop: int) -> Columns:
        """Rows ``start`` to ``stop`` as Columns of their own, a view of the table: its arrays made as they are asked
        for and let go with it, a category's codes (where ``coded``) indexes into this table's ``words``."""
        return Columns(self._table.slice(start, stop - start))

    def text(self, name: str, rows: np.ndarray) -> pd.api.extensions.ExtensionArray:
        """A string column's values at ``rows`` as pandas' ``str`` array, taken and decoded in Arrow.

        What a DataFrame makes of the same strings as an object array, without converting each
        Python string back to Arrow (3,570 step names: ~60 us against ~250 us). Only the rows taken are
        decoded: the whole column decoded and kept was 37 MiB of a 10 GB import's program names, for the
        ten the costliest exchanges name.
        """
        import pandas as pd

        taken = self._column(name).take(pa.array(np.asarray(rows, np.int64)))
        return pd.array(taken.dictionary_decode() if pa.types.is_dictionary(taken.type) else taken, dtype="str")

    def codes_in(self, name: str, vocabulary: tuple[str, ...]) -> np.ndarray:
        """A category column as indexes into a fixed ``vocabulary`` (``len(vocabulary)`` if not in it)."""
        key = ("fixed", name, vocabulary)
        if key not in self._arrays:
            words = self.words(name)
            lut = np.array([vocabulary.index(w) if w in vocabulary else len(vocabulary) for w in words] or [0],
                           np.int64)
            self._arrays[key] = lut[self._own_codes(name)]  # type: ignore[index]
        return self._arrays[key]  # type: ignore[index]

    def _own_codes(self, name: str) -> np.ndarray:
        """``codes(name)`` where they are made already or the column is not coded, else its dictionary's indices as
        they are (a view, not an int64 copy made and kept for every row): for an answer that only looks them up."""
        if "codes:" + name in self._arrays or not self.coded(name):
            return self.codes(name)
        return numbers(self._column(name).indices)

    def used_words(self, name: str) -> np.ndarray:
        """The words of a category column that some row holds, in ``words(name)``'s order."""
        return self.words(name)[np.unique(self._own_codes(name))]

    def frame(self) -> pd.DataFrame:
        """The table as pandas (categorical columns as categoricals), converted once."""
        if self._frame is None:
            self._frame = self._table.to_pandas()
        return self._frame


def lookup(grid: np.ndarray, i: np.ndarray, j: np.ndarray, missing: int = 0) -> np.ndarray:
    """``grid[i, j]`` for each pair, ``missing`` where the pair lies outside the grid (a join on dense keys)."""
    i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
    inside = (i >= 0) & (j >= 0) & (i < grid.shape[0]) & (j < grid.shape[1])
    if inside.all():
        return grid[i, j]
    out = np.full(len(i), missing, grid.dtype)
    out[inside] = grid[i[inside], j[inside]]
    return out


class StepIndex:
    """Program steps by (ipu, step): both are small dense integers, so a join is array indexing."""

    def __init__(self, programs: Columns) -> None:
        self.programs = programs
        ipu, step = programs["ipu"], programs["step"]  # (their own integers: indexes as they are, not copied)
        shape = (int(ipu.max()) + 1, int(step.max()) + 1) if len(programs) else (0, 0)
        self.grid = np.full(shape, -1, np.int64)
        self.grid[ipu, step] = np.arange(len(programs))

    def rows(self, ipu: np.ndarray, step: np.ndarray) -> np.ndarray:
        """The programs row of each (ipu, step), -1 where the program has no such step."""
        return lookup(self.grid, ipu, step, -1)

    def names(self, rows: np.ndarray) -> np.ndarray:
        """Step names of programs ``rows`` (object array), "" where a row is -1."""
        if not len(self.programs):
            return np.full(len(rows), "", dtype=object)
        names = self.programs.strings("name", np.maximum(rows, 0))
        return np.where(rows >= 0, names, "") if (rows < 0).any() else names

    def categories_at(self, ipu: np.ndarray, step: np.ndarray) -> pd.Categorical:
        """The names of the steps (``ipu``, ``step``) as a pandas Categorical, "" where the program has no such step:
        each distinct name held once, each row a code (a long run's 348,000 steps a rank: 32 MiB of names as
        strings, 1.3 MiB as codes, where the same few names repeat)."""
        import pandas as pd

        rows = self.rows(ipu, step)
        if not len(self.programs) or not self.programs.coded("name"):
            return pd.Categorical(self.names(rows))
        words = self.programs.words("name")
        codes = self.programs.codes_at("name", np.maximum(rows, 0))
        if (rows < 0).any():  # no such step: ""
            empty = np.flatnonzero(words == "")
            if not len(empty):
                words, empty = np.append(words, ""), [len(words)]
            codes[rows < 0] = empty[0]
        return pd.Categorical.from_codes(codes, categories=pd.Index(words, dtype=object))

    def names_at(self, ipu: np.ndarray, step: np.ndarray) -> Any:
        """The names of the steps (``ipu``, ``step``): ``name_array`` of their rows."""
        return self.name_array(self.rows(ipu, step))

    def name_array(self, rows: np.ndarray) -> Any:
        """``names(rows)`` as a pandas ``str`` array (decoded in Arrow), for a frame's column."""
        if not len(self.programs) or (rows < 0).any():
            return self.names(rows)
        return self.programs.text("name", rows)


STEP_PIECE_ROWS = 1 << 16  # program steps a piece of ``StepPieces`` holds, by default


class WordNumbers:
    """One numbering of the words of a category column over pieces that each have a dictionary of their own (row
    groups of a file): a word's number is its place among the words met so far. ``of(part, name)``: the number of
    each word of ``part``'s dictionary (looked up once a dictionary: slices of one table share theirs)."""

    def __init__(self) -> None:
        self.numbered: dict[str, int] = {}
        self._words: np.ndarray | None = None
        self._number = np.zeros(0, np.int64)

    def of(self, part: Columns, name: str) -> np.ndarray:
        words = part.words(name)
        if self._words is None or not np.array_equal(words, self._words):
            self._words = words
            self._number = np.fromiter((self.numbered.setdefault(w, len(self.numbered)) for w in words.tolist()),
                                       np.int64, len(words))
        return self._number


@dataclass(frozen=True)
class StepPieces:
    """A table of steps (the programs, the exchanges) a piece of rows at a time, for an answer that needs none of it
    whole: ``pieces()`` yields each piece's first row and its rows (``Columns``), in row order; ``rows`` counts them
    all; ``ipus`` is more than any step's IPU."""

    pieces: Callable[[], Iterator[tuple[int, Columns]]]
    rows: int
    ipus: int

    @classmethod
    def of(cls, programs: Columns, at_once: int = STEP_PIECE_ROWS) -> StepPieces:
        """The rows of a table decoded whole already, sliced (``Columns.rows``)."""
        whole = len(programs)
        return cls(lambda: ((a, programs.rows(a, min(a + at_once, whole))) for a in range(0, whole, at_once)), whole,
                   int(programs["ipu"].max(initial=-1)) + 1)

    @classmethod
    def read(cls, profile: Any, columns: tuple[str, ...], at_once: int = STEP_PIECE_ROWS,
             table: str = "programs") -> StepPieces:
        """``columns`` of a profile's programs table (or another of steps: ``exchanges``), decoded a piece at a time
        as each pass asks, each checked as it is read (``Profile.iter_batches``): no piece outlives its turn. Its
        IPUs are below the manifest's ``num_ipus`` (checked on each piece where it declares one)."""
        def pieces() -> Iterator[tuple[int, Columns]]:
            start = 0
            for batch in profile.iter_batches(table, list(columns), batch_size=at_once):
                yield start, Columns(pa.Table.from_batches([batch]))
                start += batch.num_rows

        # (IPUs are int16: 2**15 bounds them where a manifest declares no count)
        return cls(pieces, profile.num_rows(table), int(profile.declared.get("num_ipus") or 1 << 15))

    def names_at(self, ipu: np.ndarray, step: np.ndarray) -> Any:
        """The names of the steps (``ipu``, ``step``) as a pandas ``str`` array, "" where the program has no such
        step: one pass over the pieces, each one's rows found among the few asked for (``StepIndex.names_at``
        without the whole table)."""
        import pandas as pd

        keys = (np.asarray(ipu, np.int64) << 32) | np.asarray(step, np.int64)
        wanted, back = np.unique(keys, return_inverse=True)
        found = np.full(len(wanted), "", dtype=object)
        for _, part in self.pieces() if len(wanted) else ():
            have = (part["ipu"].astype(np.int64) << 32) | part["step"]
            at = np.minimum(np.searchsorted(wanted, have), len(wanted) - 1)
            rows = np.flatnonzero(wanted[at] == have)
            found[at[rows]] = part.strings("name", rows)
        return pd.array(found[back.reshape(-1)], dtype="str")

    def categories_at(self, ipu: np.ndarray, step: np.ndarray) -> pd.Categorical:
        """``names_at(ipu, step)`` as a pandas Categorical (``StepIndex.categories_at`` without the whole table): one
        pass over the pieces, each step's name numbered among the names of every piece (``WordNumbers``), ""
        where the program has no such step."""
        import pandas as pd

        keys = (np.asarray(ipu, np.int64) << 32) | np.asarray(step, np.int64)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        codes = np.full(len(keys), -1, np.int64)
        numbers = WordNumbers()
        for _, part in self.pieces() if len(keys) else ():
            have = (part["ipu"].astype(np.int64) << 32) | part["step"]
            first = np.searchsorted(keys, have)  # every row of a step asked for more than once
            last = np.searchsorted(keys, have, "right")
            rows = np.flatnonzero(last > first)
            if not len(rows):
                continue
            found = numbers.of(part, "name")[part.codes_at("name", rows)]
            counts = last[rows] - first[rows]
            at = np.repeat(first[rows] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
            codes[order[at]] = np.repeat(found, counts)
        words = list(numbers.numbered)
        if (codes < 0).any():
            codes[codes < 0] = numbers.numbered[""] if "" in numbers.numbered else len(words)
            words += [] if "" in numbers.numbered else [""]
        return pd.Categorical.from_codes(codes, categories=pd.Index(words, dtype=object))


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
    def from_arrow(cls, table: pa.Table) -> TraceArrays:
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

    def columns(self) -> dict[str, np.ndarray]:
        """The arrays under the trace's column names (``pass`` and ``phase`` as fixed codes)."""
        return {"run": self.run, "iteration": self.iteration, "micro_batch": self.micro_batch, "ipu": self.ipu,
                "stage": self.stage, "pass": self.pass_, "step": self.step, "phase": self.phase,
                "start_cycle": self.start, "end_cycle": self.end}

    @property
    def duration(self) -> np.ndarray:
        if "duration" not in self._cache:
            self._cache["duration"] = self.end - self.start
        return self._cache["duration"]

    @property
    def num_ipus(self) -> int:
        return int(self.ipu.max()) + 1 if len(self) else 0


def frame_of(data: dict[str, Any], columns: list[str]) -> pd.DataFrame:
    """``pd.DataFrame(data, columns=columns)``; without ``columns=`` when the dict is already in that
    order, which pandas 3 builds faster (~115 us against ~200 us for 9 columns: no reindexing)."""
    import pandas as pd

    if list(data) == list(columns):
        return pd.DataFrame(data)
    return pd.DataFrame(data, columns=columns)


def present(ids: np.ndarray) -> np.ndarray:
    """The distinct values of a column of small ids, sorted: a bincount (linear) where ids are >= 0, else a sort."""
    if len(ids):
        lo, hi = int(ids.min()), int(ids.max())
        if hi - lo < 32:  # a few IPUs: one comparison each beats widening the column for bincount
            return np.array([v for v in range(lo, hi + 1) if v in (lo, hi) or (ids == v).any()], np.int64)
        if lo >= 0:
            return np.flatnonzero(np.bincount(ids)).astype(np.int64)
    return np.unique(ids).astype(np.int64)


def numbered(key: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` of keys in ``[0, cells)``: the distinct keys, sorted, and each key's
    number among them. By a grid of the cells where it is no larger than a few times the keys (a few names or
    threads a rank: neither a sort nor a copy of the keys), else, or for a key outside the cells, by a sort."""
    if cells <= 4 * len(key) + 1024 and (not len(key) or (int(key.min()) >= 0 and int(key.max()) < cells)):
        seen = np.zeros(cells, bool)
        seen[key] = True
        return np.flatnonzero(seen), (np.cumsum(seen) - 1)[key]
    distinct, number = np.unique(key, return_inverse=True)
    return distinct, number.astype(np.int64).reshape(-1)


def sorted_words(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values.astype(str), return_inverse=True)`` of an object column, without a fixed-width string a row
    (4 bytes a character of the longest: 24,576 ops' layers at 4,096 ranks, 7.4 MiB, three times in the sort): the
    distinct objects found by hashing (``pandas.factorize``; a missing one, None or NaN, made a word apart), their
    words sorted, and each row's word's place among them."""
    import pandas as pd

    values = np.asarray(values, dtype=object)
    codes, distinct = pd.factorize(values)
    missing = np.flatnonzero(codes < 0)
    codes[missing] = len(distinct) + np.arange(len(missing))
    texts = [str(v) for v in distinct] + [str(v) for v in values[missing]]
    words, place = np.unique(np.array(texts, dtype=object).astype(str), return_inverse=True)
    return words, place.reshape(-1).astype(np.int64)[codes]


def alphabetical(words: np.ndarray) -> np.ndarray:
    """Each word's rank in alphabetical order, to sort rows by a category's name with integer keys."""
    ranks = np.empty(len(words), np.int64)
    ranks[np.argsort(words.astype(str), kind="stable")] = np.arange(len(words))
    return ranks


def group_median(values: np.ndarray, at: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Each group's median, as ``np.median`` gives it (the middle value, or the mean of the two middle ones), of
    ``values`` sorted by group then value, group ``g``'s ``n[g]`` values from ``at[g]``; NaN for a group of none."""
    has = n > 0
    lo, hi = np.where(has, at + (n - 1) // 2, 0), np.where(has, at + n // 2, 0)
    v = values if len(values) else np.zeros(1, values.dtype)
    return np.where(has, (v[lo].astype(np.float64) + v[hi]) / 2, np.nan)


def group_percentile(values: np.ndarray, at: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """Each group's ``q``-th percentile, as ``np.percentile``'s default (linear) gives it, in its arithmetic
    (``_lerp``): ``values`` sorted by group then value as ``group_median``'s; NaN for a group of none."""
    has = n > 0
    v = values if len(values) else np.zeros(1, values.dtype)
    last = np.minimum(at + np.maximum(n - 1, 0), len(v) - 1)
    with np.errstate(invalid="ignore"):
        virtual = (n - 1) * (q / 100)
        before = np.floor(virtual)
        top = virtual >= n - 1  # past the last value: the last value
        lo = np.where(top | ~has, last, at + np.where(has, before, 0).astype(np.int64))
        hi = np.where(top | ~has, last, lo + 1)
        a, b = v[lo], v[hi]
        gamma = virtual - np.where(top, -1, before.astype(np.int64))
        diff = b - a
        found = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return np.where(has, found, np.nan)


def sum_by(keys: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """``np.bincount`` returning int64 sums (exact for cycles and bytes)."""
    if weights is None:
        return np.bincount(keys, minlength=size).astype(np.int64)
    if len(keys) == 0:
        return np.zeros(size, np.int64)
    # bincount sums in float64; exact for sums below 2**53 cycles, plenty for traces.
    return np.rint(np.bincount(keys, weights=weights, minlength=size)).astype(np.int64)


def bin_edges(start: int, end: int, max_bins: int) -> np.ndarray:
    """The edges of at most ``max_bins`` bins of whole units (cycles, nanoseconds) from ``start`` to ``end``
    (``end > start``), as equal as whole units allow: the zoomable timelines' level of detail."""
    bins = max(min(int(max_bins), int(end) - int(start)), 1)
    return int(start) + ((int(end) - int(start)) * np.arange(bins + 1, dtype=np.int64)) // bins


@dataclass(frozen=True)
class SpanUnion:
    """Spans merged into sorted disjoint intervals, with the running length of their union: the time
    they cover before any instant is one ``np.searchsorted`` (``before``), so a bin's covered time is
    the difference at its edges, whatever the number of spans. The zoomable timelines' busy time
    (the System page's events, a GPU's kernels per stream)."""

    start: np.ndarray
    end: np.ndarray
    covered: np.ndarray  # 0, then the running length of the union: covered[k] is intervals 0 .. k-1's

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> SpanUnion:
        """The union of spans sorted by start: the spans themselves (the same arrays) where they are disjoint."""
        if len(start):
            reach = np.maximum.accumulate(end)
            new = np.ones(len(start), bool)
            new[1:] = start[1:] > reach[:-1]
            if not new.all():
                first = np.flatnonzero(new)
                start, end = start[first], reach[np.append(first[1:] - 1, len(start) - 1)]
        covered = np.zeros(len(start) + 1, np.int64)
        np.cumsum(end - start, out=covered[1:])
        return cls(np.asarray(start, np.int64), np.asarray(end, np.int64), covered)

    def before(self, x: np.ndarray) -> np.ndarray:
        """The time covered before each instant in ``x``: whole intervals, less the part of the last one
        begun that lies after ``x``."""
        k = np.searchsorted(self.start, x, "right")
        last = np.maximum(k - 1, 0)
        over = np.where(k > 0, np.maximum(self.end[last] - x, 0), 0) if len(self.end) else 0
        return self.covered[k] - over


def busy_by_row(row: np.ndarray, start: np.ndarray, end: np.ndarray, rows: int, edges: np.ndarray) -> np.ndarray:
    """``[rows, len(edges) - 1]``: the time each row has any of its spans open in each bin between ``edges``
    (sorted), its spans merged (``SpanUnion``): each row's spans, cut to the edges, laid on one axis a row after
    another so that one union and one search answer every row and bin at once (a heat map of ranks over time)."""
    edges = np.asarray(edges, np.int64)
    t0, t1 = int(edges[0]), int(edges[-1])
    width = t1 - t0 + 1  # a row's stretch of the axis, one more than the window: rows never touch
    row = np.asarray(row, np.int64)
    a, b = np.clip(start, t0, t1) - t0 + row * width, np.clip(end, t0, t1) - t0 + row * width
    keep = b > a
    order = np.argsort(a[keep], kind="stable")
    union = SpanUnion.of(a[keep][order], b[keep][order])
    at = (edges - t0)[None, :] + (np.arange(rows, dtype=np.int64) * width)[:, None]
    return np.diff(union.before(at.ravel()).reshape(rows, len(edges)), axis=1)


def category(values, categories) -> pd.Categorical:
    """A pandas categorical with a fixed category order."""
    import pandas as pd

    return pd.Categorical(values, categories=list(categories))


def empty(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with typed columns."""
    import pandas as pd

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
