"""The system timeline's events as columns (``Events``): each process's files read and checked, their strings made
codes, one *row* per (process, thread), the events sorted by row and start. ``system`` answers the report's System
section and the dashboard's System page from them.

The files are gathered a run of them at a time (``_Gathered``): each run's events sorted in its own rows and kept as
columns, the runs' columns put in the rows' order at the end, a column at a time. Holding every file's table at once
and sorting all of their events together took the 10 GB import's System page (765,600 events in 4 ranks) 115 MiB
above the process for 43 MiB of events.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from popvision_py.analysis.common.tables import numbered
from popvision_py.format import system as S

_TRAILING_NUMBER = re.compile(r"[#\s]*\d+$")
FILES_AT_ONCE = 256  # files (or pieces of one) read, then joined into one table, at a time: ~17 KB each apart
SMALL_TABLE_ROWS = 1 << 16  # tables of fewer rows than this on average are joined into one chunk (``_joined``)
RUN_ROWS = 1 << 17  # a run of files is sorted once it holds this many events (or FILES_AT_ONCE files); a
# file of more is read in pieces of whole processes of about this many (``format.system.read_system_pieces``)
# each column's type: the codes as narrow as they can be (765,600 events of a 10 GB import: 14 MiB less than int64);
# arithmetic on them that could pass 2**31 is done in int64 (``SystemIndex``'s keys, say)
TYPES = {"row": np.int32, "name": np.int32, "channel": np.int32, "kind": np.int8, "start": np.int64,
         "end": np.int64, "value": np.float64}


def family(name: str) -> str:
    """``name`` without a trailing number: ``ProfilerStep#3`` -> ``ProfilerStep``, ``Forward 2`` -> ``Forward``."""
    return _TRAILING_NUMBER.sub("", name) or name


def natural(text: str) -> tuple:
    """A sort key that puts ``instance-2`` before ``instance-10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


@dataclass(frozen=True)
class Events:
    """Every file's rows as columns, sorted by row, then start (the longer span first at a tie).

    A *row* is one (process, thread); ``rows[r]`` is its (process code, thread). Processes are in
    natural order of their names, threads too (the main thread first).
    """

    processes: tuple[str, ...]
    pids: np.ndarray  # per process
    rows: tuple[tuple[int, str], ...]
    names: tuple[str, ...]
    families: tuple[str, ...]
    family_of: np.ndarray  # per name: its family's code
    channels: tuple[str, ...]
    row: np.ndarray  # per event, int32 codes from here on (``TYPES``)
    name: np.ndarray  # int32
    channel: np.ndarray  # int32
    kind: np.ndarray  # int8
    start: np.ndarray  # ns since 1970
    end: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @property
    def process(self) -> np.ndarray:
        """Each event's process code."""
        return self.row_process[self.row]

    @property
    def row_process(self) -> np.ndarray:
        return np.array([p for p, _ in self.rows], np.int64)

    def label(self, row: int) -> str:
        """``instance-0 · MainThread``: how a row is named on the page."""
        process, thread = self.rows[row]
        return f"{self.processes[process]} · {thread}"

    def words_only(self) -> Events:
        """These events' processes, rows and words without a single event (every column empty): what a holder of
        their columns in an order of its own keeps of them (``system.SystemIndex``)."""
        return replace(self, **{column: np.zeros(0, kind) for column, kind in TYPES.items()})

    @property
    def extent(self) -> tuple[int, int]:
        """(first start, last end) in ns; (0, 0) without events."""
        return (int(self.start.min()), int(self.end.max())) if len(self) else (0, 0)


def _dictionary(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A dictionary column (its chunks' dictionaries unified) as (codes, words)."""
    if column.num_chunks == 0:
        return np.zeros(0, np.int64), []
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not pa.types.is_dictionary(chunk.type):
        chunk = chunk.dictionary_encode()
    return chunk.indices.to_numpy(zero_copy_only=False).astype(np.int64), chunk.dictionary.to_pylist()


def _thread_order(thread: str) -> tuple:
    """Threads in a row's order: the main thread first, then the others in natural order."""
    return thread != "MainThread", natural(thread)


def _ranked(codes: np.ndarray, words: list[str], key) -> tuple[np.ndarray, list[str]]:
    """Codes renumbered so that the words are in ``key`` order (unused words dropped)."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(words))) if len(codes) else np.zeros(0, np.int64)
    order = sorted(used.tolist(), key=lambda c: key(words[c]))
    lut = np.full(len(words) + 1, -1, np.int64)
    lut[order] = np.arange(len(order))
    return lut[codes], [words[c] for c in order]


def load_files(paths: Sequence[str | os.PathLike[str]], keep: dict[str, Callable[[str], bool]] | None = None) -> Events:
    """The rows of the files at ``paths`` (each read and checked by ``format.system.read_system_pieces``, a large
    file in pieces of whole processes) as ``Events``, gathered a run of pieces at a time (``FILES_AT_ONCE`` pieces,
    or fewer holding ``RUN_ROWS`` events): at 4,096 ranks' files, 4,096 small tables held together were 68 MB, and
    the import's one file of 4,096 ranks, read whole and sorted at once, took the dashboard's warm-up after a 10 GB
    import to 1.37x its figure in 4 ranks. With ``keep`` (a string column's name: a test of its words), only the
    rows where the word of one of those columns passes its test, each piece let go of the rest as it is read: what a
    view that reads a few of the rows holds (a 10 GB import's GPU figures take its steps and annotations)."""
    gathered, run, rows = _Gathered(), [], 0
    for path in paths:
        for piece in S.read_system_pieces(path, RUN_ROWS):
            run.append(piece.filter(kept_rows(piece, keep)) if keep is not None else piece)
            del piece  # the run holds the only reference: ``add`` lets each column go
            rows += run[-1].num_rows
            if len(run) == FILES_AT_ONCE or rows >= RUN_ROWS:
                gathered.add(run)
                rows = 0
                pa.default_memory_pool().release_unused()  # the run's table and its sorting
    if run:
        gathered.add(run)
    events = gathered.events()
    pa.default_memory_pool().release_unused()  # the files' rows and their sorting, let go
    return events


def kept_rows(table: pa.Table, keep: dict[str, Callable[[str], bool]]) -> np.ndarray:
    """Whether each row of ``table`` has a word in one of ``keep``'s columns that passes that column's test: each
    column's distinct words tested once, its rows by their codes."""
    found = np.zeros(table.num_rows, bool)
    for name, test in keep.items():
        codes, words = _dictionary(table.select([name]).unify_dictionaries().combine_chunks()[name])
        found |= np.array([bool(test(w)) for w in words] + [False], bool)[codes]
    return found


def load(files: Sequence[S.SystemFile]) -> Events:
    """The rows of ``files`` (each read and checked by ``format.system.read_system``) as ``Events``."""
    return load_tables([f.table.replace_schema_metadata(None) for f in files])


def _joined(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table, their dictionaries unified. Small tables' rows are copied into one chunk (each chunk
    costs its own buffers: 4,096 small files' apart were 68 MB); large ones keep their chunks, which ``_Gathered.add``
    joins a column at a time as it takes it, not all copied beside them (10 GB in 4 ranks: 42 MiB)."""
    if not tables:
        return S.SCHEMA.empty_table()
    joined = pa.concat_tables(tables).unify_dictionaries()
    return joined.combine_chunks() if joined.num_rows < SMALL_TABLE_ROWS * len(tables) else joined


def load_tables(tables: list[pa.Table]) -> Events:
    """The rows of system timeline tables (without their schema's metadata) as ``Events``, sorted together.
    ``tables`` is emptied: the joined table is then the only one, so each column goes as it is taken."""
    gathered = _Gathered()
    gathered.add(tables)
    return gathered.events()


class _Gathered:
    """Runs of a system timeline's rows gathered into ``Events``. Each run (``add``) is sorted in its own (process,
    thread) rows, by start, the longer span first at a tie (a stable sort: the files' order after that), and kept as
    columns, its strings as codes of words numbered in the order the runs first give them (as one table's dictionaries
    unified would number them). ``events`` puts the runs' blocks of rows in the rows' order (processes in natural
    order, threads the main thread first), a column at a time: the order one sort of every event gives."""

    COLUMNS = ("name", "channel", "kind", "start", "end", "value")

    def __init__(self) -> None:
        self.words: dict[str, dict[str, int]] = {"name": {}, "channel": {}}
        self.pids: dict[str, int] = {}  # each process's pid: its first row's
        self.columns: dict[str, list[np.ndarray]] = {c: [] for c in self.COLUMNS}
        self.blocks: list[tuple[list[str], list[str], np.ndarray]] = []  # each run's rows: process, thread, events

    def add(self, tables: list[pa.Table]) -> None:
        """One run's rows (``tables``, emptied: joined, each column let go as it is taken), sorted in its rows and
        kept as columns."""
        table = _joined(tables)
        tables.clear()
        process, processes = _ranked(*_dictionary(table["process"]), natural)  # the rows' order within the run
        thread, threads = _ranked(*_dictionary(table["thread"]), _thread_order)
        present, first = np.unique(process, return_index=True) if len(process) else (np.zeros(0, np.int64),) * 2
        pid = table["pid"].to_numpy()
        for code, at in zip(present.tolist(), first.tolist()):
            self.pids.setdefault(processes[code], int(pid[at]))
        del pid
        table = table.drop_columns(["process", "thread", "pid"])
        width = max(len(threads), 1)
        key = process * width + thread
        del process, thread
        start, end = table["start_ns"].to_numpy(), table["end_ns"].to_numpy()
        order = np.lexsort((-end, start, key))
        del start, end
        rows, row = numbered(key[order], len(processes) * width)
        del key
        self.blocks.append(([processes[int(r) // width] for r in rows], [threads[int(r) % width] for r in rows],
                            np.bincount(row, minlength=len(rows))))
        del row
        for column in ("name", "channel"):
            codes, words = _dictionary(table[column])
            mine = self.words[column]
            lut = np.array([mine.setdefault(w, len(mine)) for w in words] + [-1], TYPES[column])
            self.columns[column].append(lut[codes[order]])
            table = table.drop_columns([column])
        codes, kinds = _dictionary(table["kind"])
        self.columns["kind"].append(np.array([S.KINDS.index(k) for k in kinds] + [0], TYPES["kind"])[codes[order]])
        for column, field in (("start", "start_ns"), ("end", "end_ns"), ("value", "value")):
            self.columns[column].append(table[field].to_numpy()[order])
            table = table.drop_columns([field])

    def events(self) -> Events:
        process_words = sorted({p for ps, _, _ in self.blocks for p in ps}, key=natural)
        thread_words = sorted({t for _, ts, _ in self.blocks for t in ts}, key=_thread_order)
        width = max(len(thread_words), 1)
        p_code = {p: k for k, p in enumerate(process_words)}
        t_code = {t: k for k, t in enumerate(thread_words)}
        block_key = np.array([p_code[p] * width + t_code[t] for ps, ts, _ in self.blocks for p, t in zip(ps, ts)],
                             np.int64)
        sizes = np.concatenate([n for _, _, n in self.blocks]) if self.blocks else np.zeros(0, np.int64)
        keys, block_row = numbered(block_key, len(process_words) * width)
        total = int(sizes.sum())
        by_row = np.argsort(block_row, kind="stable")
        dest = None  # where each of the runs' events goes, unless they are in order already (one run: always)
        block_row = block_row.astype(TYPES["row"])
        if (np.diff(block_row) > 0).all():
            row = np.repeat(block_row, sizes)
        elif (np.diff(block_row[by_row]) > 0).all():  # each row's events in one run: its block moves
            size = sizes[by_row]
            place = np.empty(len(sizes), np.int64)  # each block's place in the rows' order, less its in the runs'
            place[by_row] = np.cumsum(size) - size
            place -= np.cumsum(sizes) - sizes
            dest = np.repeat(place, sizes) + np.arange(total)
            row = np.repeat(block_row[by_row], size)
            del place, size
        else:  # a row in two runs (a process's files apart): one sort of every event, as one table's
            start, end = self._joined("start"), self._joined("end")
            row = np.repeat(block_row, sizes)
            order = np.lexsort((-end, start, row))
            self.columns["start"], self.columns["end"] = [start], [end]
            del start, end
            row = row[order]
            dest = np.empty(total, np.int64)
            dest[order] = np.arange(total)
            del order
        ordered = {}
        for column in self.COLUMNS:  # each run's piece put in its place and let go: never a column twice over
            parts = self.columns[column]
            if dest is None and len(parts) == 1:
                ordered[column] = parts.pop()
                continue
            out = np.empty(total, TYPES[column])
            at = 0
            while parts:
                part = parts.pop(0)
                out[dest[at:at + len(part)] if dest is not None else slice(at, at + len(part))] = part
                at += len(part)
                del part
            ordered[column] = out
            pa.default_memory_pool().release_unused()  # the pieces' pages (glibc's, where Arrow's pool is the
            # system's, as the CLI sets it), not left for the next column to grow beside (10 GB in 4 ranks: 30 MiB)
        del dest
        names, channels = list(self.words["name"]), list(self.words["channel"])
        families = sorted({family(n) for n in names}, key=natural)
        code = {f: k for k, f in enumerate(families)}
        return Events(
            processes=tuple(process_words), pids=np.array([self.pids[p] for p in process_words], np.int64),
            rows=tuple((int(k) // width, thread_words[int(k) % width]) for k in keys), names=tuple(names),
            families=tuple(families), family_of=np.array([code[family(n)] for n in names], np.int64),
            channels=tuple(channels), row=row, **ordered)

    def _joined(self, column: str) -> np.ndarray:
        parts = self.columns[column]
        if not parts:
            return np.zeros(0, TYPES[column])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
