"""A profile's members as the files of a read-only fsspec file system, for readers that scan lazily.

profile.pop is a stored (uncompressed) ZIP: each table is a whole Parquet file lying at an offset
of the container. ``MemberFileSystem(profile)`` shows those byte ranges as files named after the
members (``trace.parquet``, ``ops.parquet``...), so a Parquet reader that takes an fsspec file
system, DuckDB's above all (``register_filesystem``), reads a member as it reads a file on disk:
the footer first, then only the column chunks a query needs. Nothing is decoded or copied up front.

DuckDB's Parquet reader checks neither Parquet page checksums nor values against the schema. So
the first read of a column chunk's bytes (anything before the footer, which the reader checked at
open) has that chunk's pages checked from the very bytes DuckDB is handed (``pages.check_chunk``:
checksums, sizes and counts against the footer, nothing decoded), once per chunk and process, each
chunk under its own lock so DuckDB's threads never wait on each other's chunks; and every table is
a view whose columns stop the query at a value the schema forbids (``view``, ``values.sql_checked``),
checked by DuckDB as it computes. A query over damaged pages or forbidden values is refused
(``MemberFileSystem.corrupt`` or ``refusal`` gives the reader's sentence) instead of answered from
them, and a chunk no query reads is never checked.

Reads are ``pread``s through the profile's own handle on the container (``ProfileFile.read_at``), never
a memory map: bytes read into a reader's buffers are freed once decoded (docs/performance.md:
`popvision sql` at 50M trace rows), and a profile overwritten in place while a query runs is
refused in one sentence (``ProfileChangedError``) instead of killing the process with SIGBUS.
"""

from __future__ import annotations

import functools
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import fsspec
import numpy as np

from popvision_py.errors import CorruptProfileError, ProfileError, ValueRangeError
from popvision_py.format import schema as S
from popvision_py.format.pages import PageError, check_chunk
from popvision_py.format.span import MemberFile
from popvision_py.format.values import SQL_REFUSAL, sql_checked

__all__ = ["MemberFile", "MemberFileSystem"]


if TYPE_CHECKING:
    from popvision_py.format.opening import ProfileFile


class MemberFileSystem(fsspec.AbstractFileSystem):
    """The tables of an open profile as files ``<table>.parquet``, under the protocol ``popvision``.

    Reads through the profile's handle on the container: the profile stays open while this is used.
    """

    protocol = "popvision"
    cachable = False  # one instance per open profile, never fsspec's shared one

    def __init__(self, profile: ProfileFile, **storage_options: Any) -> None:
        super().__init__(**storage_options)
        # The reader located and checked every member when it opened the profile.
        self.tables = profile.tables  # the schema's tables this profile holds (an older one lacks later tables)
        self._spans = {S.TABLES[name].member: profile.member_span(name) for name in self.tables}
        self._footer_starts = {S.TABLES[name].member: self._spans[S.TABLES[name].member][1] - profile.footer_bytes(name)
                               for name in self.tables}
        self._profile = profile
        self._checked: set[tuple[str, int]] = set()  # (member, column chunk) whose pages were checked
        self._chunk_spans: dict[str, tuple[np.ndarray, np.ndarray, list[tuple[int, str, Any]]]] = {}
        self._in_order: dict[str, bool] = {}  # whether each member's chunks lie one after another, as writers lay them
        self._check_lock = threading.Lock()  # guards _chunk_locks
        self._chunk_locks: dict[tuple[str, int], threading.Lock] = {}
        self.corrupt: ProfileError | None = None  # set when a read found a damaged member or a forbidden value
        self._modified = datetime.fromtimestamp(profile.path.stat().st_mtime, timezone.utc)

    def _entry(self, name: str) -> dict[str, Any]:
        return {"name": name, "size": self._spans[name][1], "type": "file"}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path).strip("/")
        names = sorted(self._spans) if path == "" else [path] if path in self._spans else None
        if names is None:
            raise FileNotFoundError(path)
        return [self._entry(n) for n in names] if detail else names

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path).strip("/")
        if path == "":
            return {"name": "", "size": 0, "type": "directory"}
        if path not in self._spans:
            raise FileNotFoundError(path)
        return self._entry(path)

    def modified(self, path: str) -> datetime:
        self.info(path)
        return self._modified

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> MemberFile:
        if mode != "rb":
            raise PermissionError(f"a profile's members are read-only (asked to open {path} with mode {mode!r})")
        path = self._strip_protocol(path).strip("/")
        if path not in self._spans:
            raise FileNotFoundError(path)
        offset, size = self._spans[path]
        return MemberFile(self._read_at, path, offset, size, functools.partial(self._verify, path),
                          self._footer_starts[path])

    def _read_at(self, offset: int, nbytes: int) -> bytes:
        """The profile's bytes; a profile changed since it was opened is kept in ``corrupt`` (DuckDB
        turns the OSError into its own error, and the caller reports ``corrupt``'s sentence)."""
        try:
            return self._profile.read_at(offset, nbytes)
        except CorruptProfileError as exc:
            self.corrupt = exc
            raise OSError(str(exc)) from None

    def _verify(self, member: str, first: int, data: bytes) -> None:
        """Check the pages of every column chunk that ``data`` (bytes ``first`` on of the member)
        touches, once each: from ``data`` itself where it holds the whole chunk, else from the
        chunk read whole. Each chunk has its own lock: threads reading other chunks go on."""
        starts, stops, chunks = self._chunks(member)
        stop = first + len(data)
        if self._in_order[member]:  # each chunk after the one before: the touched ones are a run, found by bisection
            touched = range(int(np.searchsorted(stops, first, "right")), int(np.searchsorted(starts, stop, "left")))
        else:
            touched = np.flatnonzero((starts < stop) & (stops > first)).tolist()
        table = member.removesuffix(S.TABLE_SUFFIX)
        for index in touched:
            key = (member, index)
            if key in self._checked:
                continue
            with self._check_lock:
                lock = self._chunk_locks.setdefault(key, threading.Lock())
            with lock:
                if key in self._checked:
                    continue
                group, column, meta = chunks[index]
                a, b = int(starts[index]), int(stops[index])
                if a >= first and b <= stop:
                    chunk = memoryview(data)[a - first: b - first]
                else:
                    chunk = self._read_at(self._spans[member][0] + a, b - a)
                try:
                    check_chunk(chunk, meta)
                except PageError as exc:
                    self.corrupt = CorruptProfileError(
                        f"Table {table} of {self._profile.path} is corrupt (column {column} of row group "
                        f"{group}: {exc}).")
                    raise OSError(str(self.corrupt)) from None
                self._checked.add(key)

    def view(self, table: str) -> str:
        """The SELECT of the view named ``table``: its member read by DuckDB's Parquet reader, each
        column checked against the schema as the query computes (``values.sql_checked``)."""
        names = self._profile.metadata(table).schema.names
        columns = sql_checked(S.TABLES[table], names, self._profile.declared)
        # the member's column chunks indexed now, before DuckDB reads: built in its first read instead, with
        # its other threads reading (each may build it), a billion-row trace's index cost 110 MiB and 0.6 s
        self._chunks(S.TABLES[table].member)
        return f"SELECT {', '.join(columns)} FROM read_parquet('{self.protocol}://{S.TABLES[table].member}')"

    def refusal(self, message: str) -> ProfileError | None:
        """The reader's sentence for a query a view stopped (``message``: DuckDB's error), or None if
        it was not a view's check: the column is read by the reader, which names its first bad row."""
        at = message.find(SQL_REFUSAL)
        if at < 0:
            return None
        table, _, column = message[at + len(SQL_REFUSAL):].split()[0].partition(".")
        if table not in S.TABLES:
            return None
        spec = S.TABLES[table]
        partners = [b if a == column else a for a, b in spec.ordered if column in (a, b)]
        try:
            with self._profile.decoder() as profile:
                for _ in profile.iter_batches(table, [column, *partners]):
                    pass
        except ProfileError as exc:
            return exc
        return ValueRangeError(f"Column {table}.{column} of {self._profile.path} holds a value its schema forbids.")

    def _chunks(self, member: str) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, Any]]]:
        if member not in self._chunk_spans:
            table = member.removesuffix(S.TABLE_SUFFIX)
            footer = self._profile.metadata(table)
            spans, chunks = [], []
            for g in range(footer.num_row_groups):
                group = footer.row_group(g)
                for c in range(group.num_columns):
                    meta = group.column(c)
                    first = meta.dictionary_page_offset  # None without a dictionary page
                    first = meta.data_page_offset if first is None else first
                    spans.append((first, first + meta.total_compressed_size))
                    chunks.append((g, meta.path_in_schema, meta))
            bounds = np.asarray(spans, np.int64).reshape(-1, 2)
            starts, stops = bounds[:, 0], bounds[:, 1]
            self._in_order[member] = bool((starts[1:] >= stops[:-1]).all() and (stops >= starts).all())
            self._chunk_spans[member] = (bounds[:, 0], bounds[:, 1], chunks)
        return self._chunk_spans[member]

    def close(self) -> None:
        """Nothing to release: the profile holds the handle (kept so this works in a ``with``)."""

    def __enter__(self) -> MemberFileSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
