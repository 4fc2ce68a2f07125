"""Writing profile.pop: Parquet tables plus a JSON manifest in one stored ZIP, atomically.

Usage::

    with ProfileWriter("profile/profile.pop", target=..., run=...) as writer:
        writer.write_table("ops", ops_df)
        with writer.table("trace") as trace:      # a large table, in row batches
            for batch in batches:
                trace.write(batch)

Each table is spooled to its own anonymous temporary file as Parquet while it is written, so
several tables may be open at once and none has to sit in memory whole. Row groups are encoded
and compressed on one encoder thread (pyarrow releases the GIL while it encodes), in the order
they were written, while the caller builds the next batch: two cores at work, at most
``PENDING_ROW_GROUPS`` row groups of a table waiting, and the same bytes as encoding in line. On close the members are
laid out in one ZIP (manifest first, then the tables in schema order) inside an anonymous file
that replaces the destination only once it is complete (see ``atomic.py``). Tables never written
are stored empty, so every profile holds every table of its schema version. The trace's levels of
detail (``trace_levels``, ``levels.LevelFold``) are folded from its row groups on the encoder thread
as they are written, and stored on close.
"""

from __future__ import annotations

import concurrent.futures as _futures
import contextlib
import datetime as _dt
import inspect
import json
import os
import shutil
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from popvision_py.version import __version__
from popvision_py.errors import ProfileWriteError
from popvision_py.format import schema as S
from popvision_py.format.atomic import atomic_output, folder_lock, write_error
from popvision_py.format.levels import LevelFold
from popvision_py.format.arrays import check_values, to_arrow
from popvision_py.format.values import bounds, check_declared, check_manifest, check_manifest_sizes, check_statistics

if TYPE_CHECKING:
    import pandas as pd

# Rows buffered before a Parquet row group is written: big enough for good compression and fast
# scans, small enough to keep the writer's memory bounded (about 40 MB for the trace).
ROW_GROUP_ROWS = 1 << 20
# Page checksums let a reader tell flipped bytes from data instead of decoding garbage.
# zstd level 3: with the trace's cycles delta-encoded, levels 1 to 3 cost the same time and 3 writes
# the fewest bytes; 5 and 7 save 4-5% more for 18-32% more time (docs/performance.md, "Issue 26: writing").
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 3, "write_page_checksum": True}
# A data page holds up to a row group's rows (pyarrow's default is 20,000): pages are then bounded by
# their bytes (1 MiB before compression) alone. The 50M-row trace has 17x fewer pages (25,968 -> 1,482), each compressed
# and delta-encoded as a whole: 49.1 MB -> 8.9 MB, pyarrow decodes its cycles 5x faster, and `sql`
# checks 17x fewer page headers (docs/performance.md, "Issue 26: the last three rows"). A pyarrow
# without the option writes its default pages.
if "max_rows_per_page" in inspect.signature(pq.ParquetWriter).parameters:
    PARQUET_OPTIONS["max_rows_per_page"] = ROW_GROUP_ROWS
# Columns written with a Parquet encoding of their own, without a dictionary: the trace's cycles are
# all distinct (a dictionary is built for each row group and thrown away) and rise along each IPU,
# so their deltas pack into a few bits (the trace's bytes a third, encoding and decoding faster);
# a compute set's tiles are consecutive and their cycles alike (tile_cycles 19x smaller).
ENCODINGS: dict[str, dict[str, str]] = {
    "trace": {"start_cycle": "DELTA_BINARY_PACKED", "end_cycle": "DELTA_BINARY_PACKED"},
    "tile_cycles": {"tile": "DELTA_BINARY_PACKED", "cycles": "DELTA_BINARY_PACKED"},
    # a GPU's kernels by start, rank by rank: their times and launches' rise, and so do the correlation ids
    "kernels": {c: "DELTA_BINARY_PACKED" for c in ("start_cycle", "end_cycle", "correlation", "launch_start_cycle",
                                                  "launch_end_cycle")},
}
# Row groups of one table handed to the encoder thread and not yet written: the writer's memory
# stays a few row groups whatever the table's length.
PENDING_ROW_GROUPS = 2


def parquet_options(spec: S.TableSchema) -> dict[str, Any]:
    """The Parquet writer's options for table ``spec``: PARQUET_OPTIONS and the table's ENCODINGS."""
    encodings = ENCODINGS.get(spec.name, {})
    if not encodings:
        return dict(PARQUET_OPTIONS)
    return {**PARQUET_OPTIONS, "column_encoding": dict(encodings),
            "use_dictionary": [c.name for c in spec.columns if c.name not in encodings]}


def conform(data: pa.Table | pa.RecordBatch | pd.DataFrame | Mapping[str, Any], spec: S.TableSchema) -> pa.Table:
    """Cast ``data`` to the table's schema: every column present, typed, in schema order.

    Raises ProfileWriteError naming the table and column on a missing column, an extra column,
    a null, or a value that does not fit the column's type.
    """
    # Only a caller that imported pandas can pass pandas objects: no need to import it here.
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        columns = {name: data[name] for name in data.columns}
    elif isinstance(data, (pa.Table, pa.RecordBatch)):
        columns = {name: data.column(name) for name in data.schema.names}
    else:
        columns = dict(data)
    expected = [c.name for c in spec.columns]
    missing = [n for n in expected if n not in columns]
    extra = [n for n in columns if n not in expected]
    if missing or extra:
        what = f"lacks column(s) {', '.join(missing)}" if missing else f"has unknown column(s) {', '.join(extra)}"
        raise ProfileWriteError(f"Table {spec.name} {what}.")
    arrays = [_cast(columns[column.name], column, spec.name) for column in spec.columns]
    return pa.Table.from_arrays(arrays, schema=spec.schema)


def _cast(values: Any, column: S.Column, table: str) -> pa.ChunkedArray | pa.Array:
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(values, pd.Series):
        if isinstance(values.dtype, pd.CategoricalDtype):
            values = pa.DictionaryArray.from_pandas(values)
        else:
            values = pa.array(values.to_numpy())
    else:
        values = to_arrow(values)
    if values.null_count:
        raise ProfileWriteError(f"Column {table}.{column.name} holds {values.null_count} null value(s).")
    try:
        if pa.types.is_dictionary(column.type):
            if not pa.types.is_dictionary(values.type):
                values = pc.dictionary_encode(values.cast(pa.string()))
            return values.cast(column.type)
        return values.cast(column.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ProfileWriteError(f"Column {table}.{column.name} cannot hold {values.type} values: {exc}.") from exc


def footer_crc32(parquet: BinaryIO, size: int) -> int:
    """CRC-32 of a Parquet file's footer: its Thrift metadata, their length and the closing magic.

    Page checksums cover the pages' data but not the footer, whose statistics and offsets a
    reader trusts; the manifest (itself under the ZIP's CRC) carries this one so a reader can
    check the footer before parsing it.
    """
    parquet.seek(size - 8)
    tail = parquet.read(8)
    length = int.from_bytes(tail[:4], "little")
    parquet.seek(size - 8 - length)
    return zlib.crc32(parquet.read(length) + tail)


class TableWriter:
    """Appends row batches to one table; a row group is written every ``row_group_rows`` rows
    (ROW_GROUP_ROWS by default), on ``encoder`` (a one-thread executor) if given, else in line."""

    def __init__(self, spec: S.TableSchema, spool: BinaryIO, destination: Path,
                 declared: Mapping[str, int] | None = None,
                 encoder: _futures.ThreadPoolExecutor | None = None, fold: LevelFold | None = None,
                 row_group_rows: int | None = None) -> None:
        self.spec = spec
        self.row_group_rows = max(int(row_group_rows or ROW_GROUP_ROWS), 1)
        self.fold = fold  # the trace's levels of detail, folded from each row group as it is encoded
        self.destination = destination
        self._declared = declared
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._parquet = pq.ParquetWriter(spool, spec.schema, **parquet_options(spec))
        self._encoder = encoder
        self._encoding: list[_futures.Future[None]] = []  # row groups handed to the encoder, oldest first
        self.closed = False

    def write(self, batch: pa.Table | pa.RecordBatch | pd.DataFrame | Mapping[str, Any]) -> None:
        """Append rows; columns are cast to the schema (see ``conform``)."""
        if self.closed:
            raise ProfileWriteError(f"Table {self.spec.name} was already closed.")
        rows = conform(batch, self.spec)
        if self._declared is not None:
            # the reader's checks, so nothing written here is refused on open (those against other
            # tables' rows, unknown here, when the profile is closed)
            check_values(self.spec, rows, self._declared, "the profile being written", first_row=self.rows,
                         whole=self.rows == 0, error=ProfileWriteError)
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self.rows += rows.num_rows
        if self._pending_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            group = pa.concat_tables(self._pending)
            self._pending, self._pending_rows = [], 0
            if self._encoder is None:
                self._encode(group)
                return
            while len(self._encoding) >= PENDING_ROW_GROUPS:
                self._wait(self._encoding[0])  # listed until done: a Ctrl-C here leaves abandon() to wait for it
                self._encoding.pop(0)
            self._encoding.append(self._encoder.submit(self._encode, group))

    def _encode(self, group: pa.Table) -> None:
        if self.fold is not None:
            self.fold.add_table(group)
        try:
            self._parquet.write_table(group, row_group_size=self.row_group_rows)
        except OSError as exc:  # the spool's disk is full, say
            raise write_error(self.destination, exc) from exc

    @staticmethod
    def _wait(future: _futures.Future[None]) -> None:
        future.result()  # the encoder's error, raised here

    def _drain(self) -> None:
        """Wait until the encoder has nothing of this table's left to run. A row group handed to it
        but never listed (a Ctrl-C between ``submit`` and ``append``) is unknown here, so an empty
        task is queued behind everything: the one encoder thread runs its queue in order, so once
        that task has run, so has every row group before it, and the Parquet writer may be closed.
        Called once the table is closed or abandoned (nothing more is encoded): it lets the encoder go."""
        if self._encoder is not None:
            self._encoder.submit(_nothing).result()
            self._encoder = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._flush()
            while self._encoding:
                self._wait(self._encoding[0])
                self._encoding.pop(0)
            self._drain()
            try:
                self._parquet.close()
            except OSError as exc:
                raise write_error(self.destination, exc) from exc

    def abandon(self) -> None:
        """Stop writing without completing the table (the profile is thrown away): the Parquet writer is
        closed now, while its spool is open, so that it never closes later, from the garbage collector,
        into a closed file (Python would print that failure's traceback, say after a Ctrl-C).

        This holds for a table whose ``close`` was cut short too (a Ctrl-C while its last row group was
        written): ``closed`` is set then, but the Parquet writer is still open. Row groups waiting for
        the encoder are dropped and the one being encoded is let finish, so that nothing writes to
        the spool once it is closed."""
        self.closed = True
        for future in self._encoding:
            future.cancel()
        self._drain()
        self._encoding = []
        if self._parquet.is_open:  # pyarrow's own flag: its __del__ closes only an open writer
            with contextlib.suppress(OSError, ValueError, pa.ArrowException):  # a full disk, a write cut short
                self._parquet.close()
            self._parquet.is_open = False

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # a failed or interrupted write: nothing more is encoded, the profile is thrown away
            self.abandon()


def _nothing() -> None:
    """The encoder's empty task (``TableWriter._drain``)."""


def _encoder() -> _futures.ThreadPoolExecutor:
    """The one-thread executor that encodes row groups, its thread already running.

    The executor starts its thread in the first ``submit``, and ``Thread.start`` waits for the thread
    to begin: a Ctrl-C in that wait leaves a running thread the executor never recorded, which its
    ``shutdown`` would not wait for and a later ``submit`` would double with a second (two threads
    writing one Parquet file at once: a segmentation fault). Started here, by an empty task waited
    for, before any row group is handed over, a Ctrl-C can only cost an idle thread; the executor
    is dropped with it and no table's row group is ever given to it."""
    encoder = _futures.ThreadPoolExecutor(1, thread_name_prefix="popvision-encode")
    encoder.submit(_nothing).result()
    return encoder


class ProfileWriter:
    """Writes one profile.pop; see the module docstring. Use as a context manager."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        target: Mapping[str, Any],
        run: Mapping[str, Any],
        generator: Mapping[str, Any] | None = None,
        row_group_rows: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.row_group_rows = row_group_rows  # each table's row groups: a writer holds a few of them
        for what, given, required in (("target", target, S.REQUIRED_TARGET_KEYS), ("run", run, S.REQUIRED_RUN_KEYS)):
            missing = [k for k in required if k not in given]
            if missing:
                raise ProfileWriteError(f"The {what} configuration lacks {', '.join(missing)}.")
        check_manifest_sizes(target, run, "the profile being written", ProfileWriteError)
        self._manifest: dict[str, Any] = {
            "format": S.FORMAT_NAME,
            "schema_version": S.SCHEMA_VERSION,
            "generator": dict(generator or {"name": "popvision_py", "version": __version__}),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "target": dict(target),
            "run": dict(run),
            "tables": {},
        }
        check_manifest(self._manifest, "The profile being written", ProfileWriteError)
        self._spools: dict[str, BinaryIO] = {}
        self._writers: dict[str, TableWriter] = {}
        self._encoder: _futures.ThreadPoolExecutor | None = None
        if self.path.is_dir():
            raise ProfileWriteError(f"Cannot write {self.path}: it is a directory.")
        # One writer per folder at a time: a second waits (see atomic.folder_lock).
        self._lock = folder_lock(self.path.parent)
        self._lock.__enter__()

    def table(self, name: str, row_group_rows: int | None = None) -> TableWriter:
        """A writer for table ``name``, to fill in row batches. Each table is written once; ``row_group_rows``:
        its row groups' rows, where they are not the writer's (a table of wide rows, held in fewer)."""
        if name not in S.TABLES:
            raise ProfileWriteError(f"There is no table named {name!r} in schema version {S.SCHEMA_VERSION}.")
        if name in self._writers:
            raise ProfileWriteError(f"Table {name} was already written.")
        try:
            spool = tempfile.TemporaryFile(dir=self.path.parent)
        except OSError as exc:
            raise write_error(self.path, exc) from exc
        self._spools[name] = spool
        if self._encoder is None:
            self._encoder = _encoder()
        self._writers[name] = TableWriter(S.TABLES[name], spool, self.path,
                                          bounds(self._manifest["target"], self._manifest["run"], {}), self._encoder,
                                          LevelFold() if name == "trace" else None,
                                          row_group_rows or self.row_group_rows)
        return self._writers[name]

    def set_run(self, key: str, value: Any) -> None:
        """Add ``key`` to the manifest's run object before the profile is closed (a figure known only
        once the tables are written, say); checked as the rest of the manifest is."""
        run = {**self._manifest["run"], key: value}
        check_manifest({**self._manifest, "run": run}, "The profile being written", ProfileWriteError)
        check_manifest_sizes(self._manifest["target"], run, "the profile being written", ProfileWriteError)
        self._manifest["run"] = run

    def write_table(self, name: str, data: pa.Table | pd.DataFrame | Mapping[str, Any]) -> None:
        """Write a whole table at once."""
        with self.table(name) as writer:
            writer.write(data)

    def close(self) -> None:
        """Complete every table and publish the profile atomically."""
        trace = self._writers.get("trace")
        if "trace_levels" not in self._writers:  # folded from the trace's row groups as they were written
            fold = LevelFold()
            if trace is not None:
                trace.close()
                fold = trace.fold or fold
            levels = fold.result()
            with self.table("trace_levels") as writer:  # a row group at a time: cast and checked a slice at a time
                for at in range(0, max(levels.num_rows, 1), writer.row_group_rows):
                    writer.write(levels.slice(at, writer.row_group_rows))
            del levels
        for name in S.TABLES:
            if name not in self._writers:
                self.table(name)
        for writer in self._writers.values():
            writer.close()
        try:
            for name in S.TABLES:
                size = self._spools[name].seek(0, os.SEEK_END)  # a spool's last buffered bytes are written here
                self._manifest["tables"][name] = {
                    "rows": self._writers[name].rows,
                    "bytes": size,
                    "footer_crc32": footer_crc32(self._spools[name], size),
                }
        except OSError as exc:  # a full disk may show only now: a small profile's spools fit their buffers
            raise write_error(self.path, exc) from exc
        self._check_bounds()
        with atomic_output(self.path, streams=False) as out:
            with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
                manifest = zipfile.ZipInfo(S.MANIFEST_MEMBER, date_time=(1980, 1, 1, 0, 0, 0))
                archive.writestr(manifest, json.dumps(self._manifest, indent=2, sort_keys=True))
                for name, spec in S.TABLES.items():
                    spool = self._spools[name]
                    spool.seek(0)
                    info = zipfile.ZipInfo(spec.member, date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_STORED
                    with archive.open(info, "w", force_zip64=True) as member:
                        shutil.copyfileobj(spool, member, 1 << 22)
        self._discard()

    def _check_bounds(self) -> None:
        """The reader's checks that need every table's rows: each table's statistics against the
        rows of programs, ops and variables, and the run's counts against the trace."""
        rows = {name: entry["rows"] for name, entry in self._manifest["tables"].items()}
        declared = bounds(self._manifest["target"], self._manifest["run"], rows)
        where = "the profile being written"
        check_declared(declared, rows["trace"], where, ProfileWriteError)
        for name, spec in S.TABLES.items():
            self._spools[name].seek(0)
            check_statistics(spec, pq.ParquetFile(self._spools[name]).metadata, declared, where, ProfileWriteError)

    def _discard(self) -> None:
        for writer in self._writers.values():
            writer.abandon()  # its spool goes: nothing may write to it any more
        if self._encoder is not None:
            self._encoder.shutdown(wait=True)  # idle now: every table's row groups are written or dropped
            self._encoder = None
        for spool in self._spools.values():
            with contextlib.suppress(OSError):  # a full disk fails the flush of what is being thrown away
                spool.close()
        self._spools.clear()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)

    def __enter__(self) -> ProfileWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            try:
                self.close()
            finally:
                self._discard()
        else:
            self._discard()
