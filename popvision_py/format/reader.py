"""Reading profile.pop without reading it all.

``open_profile(path)`` opens the file, checks the ZIP directory and the manifest, and reads each
table's Parquet footer to check its schema: the data itself stays on disk until a table (or some of
its columns) is asked for, and then pyarrow decodes it from the column chunks it reads.

The file is read with ``pread`` through one handle, never memory-mapped: a file another process
truncates or rewrites in place (``cp other.pop profile.pop``) would kill a process reading a map of
it with SIGBUS. Each read is followed by an ``fstat`` of the handle; a size or modification time
other than at open raises ``ProfileChangedError`` ("changed while it was being read"), so what was
read never mixes two files. A profile replaced by a rename (as the writer publishes one) leaves the
open handle on the old file, which is read whole and unchanged.

Every way a file can be wrong raises one of the ``ProfileError`` classes with one sentence; sizes
are checked against the file before anything is allocated.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.errors import (ColumnTypeError, CorruptProfileError, EmptyProfileError, ManifestError,
                                 MemberSizeError, MissingColumnError, MissingTableError, NewerSchemaError,
                                 NotAProfileError, ProfileChangedError, ProfileError, UnexpectedMemberError,
                                 UnknownFormatError, first_line)
from popvision_py.format import schema as S
from popvision_py.format.expansion import check_expansion, check_key_rows, dictionary_columns
from popvision_py.format.span import Container, MemberFile, read_whole
from popvision_py.format.values import (bounds, check_arrays, check_declared, check_manifest, check_manifest_sizes,
                                        check_statistics, check_values, extremes, statistics,
                                        statistics_violation)

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for: `popvision info` stays fast
    import pandas as pd

MAX_MANIFEST_BYTES = 16 << 20
MAX_MANIFEST_DEPTH = 32  # objects and lists nested in the manifest (ours: 4)
# A profile written before the manifest carried footer checksums has its members checked against
# the ZIP's CRC-32 instead, whole, up to this size; a larger member's footer is not verified.
WHOLE_MEMBER_CRC_BYTES = 64 << 20
CRC_READ_BYTES = 8 << 20  # such a member is read in pieces this large to check it
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"


@dataclass(frozen=True)
class Member:
    """Where one member's bytes lie in the file."""

    name: str
    offset: int
    size: int
    crc: int


def _types_match(actual: pa.DataType, expected: pa.DataType) -> bool:
    if actual == expected:
        return True
    # Another writer may store categories as plain strings, or with other index widths.
    if pa.types.is_dictionary(expected):
        value = actual.value_type if pa.types.is_dictionary(actual) else actual
        return pa.types.is_string(value) or pa.types.is_large_string(value)
    return False


class Profile:
    """An open profile.pop. Cheap to open; tables are decoded on request.

    Attributes: ``path``, ``manifest`` (the parsed manifest.json), ``target`` and ``run``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._check_file()
        self._file = self._open_file()
        try:
            self._size, self._stamp = self._stat()
            self._members = self._read_directory()
            self.manifest = self._read_manifest()
            self.target: dict[str, Any] = self.manifest["target"]
            self.run: dict[str, Any] = self.manifest["run"]
            self._footers: dict[str, pq.FileMetaData] = {}  # each table's parsed Parquet footer, kept from open
            self._row_starts: dict[str, np.ndarray] = {}  # each table's row groups' first rows (_group_starts)
            # (table, row group, column) chunks decoded with their page checksums and checked, once per process
            self._checked: set[tuple[str, int, str]] = set()
            self._verified: dict[str, bool] = {}  # whether each footer was checked against a checksum
            self._schemas = {name: self._check_table(name) for name, spec in S.TABLES.items()
                             if spec.member in self._members or spec.since <= self.manifest["schema_version"]}
            # every id that sizes an array is bounded by the manifest, whose counts are bounded by the
            # file: checked here on the footers' statistics, before any reader sizes anything from them
            self._declared = bounds(self.target, self.run, {t: f.num_rows for t, f in self._footers.items()})
            check_declared(self._declared, self._footers["trace"].num_rows, f"the manifest of {self.path}",
                           ManifestError)
            # what the tables would decode to, from their footers, before any page is decoded
            check_key_rows(self._footers, self._declared, str(self.path))
            check_expansion(self._footers, self._size, str(self.path))
            for name, spec in ((n, S.TABLES[n]) for n in self._schemas):
                bad = statistics_violation(spec, self._footers[name], self._declared)
                if bad is not None:
                    self.verify_chunk(name, bad[0], bad[1])  # the row and its value, in one sentence
                    check_statistics(spec, self._footers[name], self._declared, str(self.path))  # pages agree
        except (ProfileError, OSError, ValueError, pa.ArrowException):
            try:
                self._unchanged()  # what looked broken may be a file rewritten while it was opened
            finally:
                self._file.close()
            raise
        except BaseException:
            self._file.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _check_file(self) -> int:
        name = self.path
        try:
            info = name.stat()
        except FileNotFoundError:
            raise NotAProfileError(f"{name} does not exist.") from None
        except OSError as exc:
            raise NotAProfileError(f"{name} cannot be read: {exc.strerror}.") from None
        if stat.S_ISDIR(info.st_mode):
            raise NotAProfileError(f"{name} is a directory, not a profile.pop file.")
        if not stat.S_ISREG(info.st_mode):
            raise NotAProfileError(f"{name} is not a regular file, so it cannot be a profile.pop.")
        if not os.access(name, os.R_OK):
            raise NotAProfileError(f"{name} cannot be read: permission denied.")
        if info.st_size == 0:
            raise EmptyProfileError(f"{name} is empty (0 bytes).")
        return info.st_size

    def _open_file(self) -> Container:
        name = self.path
        try:
            # O_NONBLOCK: a FIFO swapped in since the check above opens at once (and is refused below)
            handle = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise NotAProfileError(f"{name} does not exist.") from None
        except OSError as exc:
            raise NotAProfileError(f"{name} cannot be read: {exc.strerror}.") from None
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise NotAProfileError(f"{name} is not a regular file, so it cannot be a profile.pop.")
        return Container(handle)  # owns the descriptor from here on

    def _stat(self) -> tuple[int, tuple[int, int]]:
        """The open file's size, and what tells whether it changed since: (size, mtime in ns)."""
        info = os.fstat(self._file.fileno())
        return info.st_size, (info.st_size, info.st_mtime_ns)

    def _unchanged(self) -> None:
        """Raise ProfileChangedError if the open file's size or modification time is not what it
        was at open (a rewrite in place, e.g. `cp` over it, changes both; reads may mix the two)."""
        if self._file.closed:
            return
        if self._stat()[1] != self._stamp:
            raise ProfileChangedError(f"The profile {self.path} changed while it was being read; open it again.")

    def read_at(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` of the container from ``offset`` on, read with ``pread`` (never mapped).

        Raises ProfileChangedError if the file changed since it was opened (checked after the
        read, so bytes returned were read before any change), CorruptProfileError if the file
        ends before ``offset + nbytes``.
        """
        try:
            data = self._file.read_at(nbytes, offset)
        except (OSError, ValueError, pa.ArrowException) as exc:
            self._unchanged()
            raise CorruptProfileError(f"{self.path} cannot be read ({first_line(exc, type(exc).__name__)}).") from None
        self._unchanged()
        if len(data) != nbytes:
            raise CorruptProfileError(f"{self.path} ends before byte {offset + nbytes} (truncated?).")
        return data

    def _read_directory(self) -> dict[str, Member]:
        name = self.path
        try:
            # the handle opened above (its position is zipfile's alone: every other read is a pread)
            with open(self._file.fileno(), "rb", closefd=False) as handle:
                head = handle.read(4)
                try:
                    archive = zipfile.ZipFile(handle)
                except zipfile.BadZipFile:
                    if head == _LOCAL_SIGNATURE:
                        raise EmptyProfileError(
                            f"{name} is truncated: its ZIP directory is missing (was the write interrupted?)."
                        ) from None
                    raise NotAProfileError(f"{name} is not a profile.pop (not a ZIP container).") from None
                except (OSError, ValueError, EOFError, struct.error) as exc:
                    raise CorruptProfileError(f"{name} has a corrupt ZIP directory ({exc}).") from None
                members: dict[str, Member] = {}
                for info in archive.infolist():
                    if info.filename in members:
                        raise UnexpectedMemberError(f"{name} holds member {info.filename!r} more than once.")
                    members[info.filename] = self._locate(handle, info)
        except PermissionError:
            raise NotAProfileError(f"{name} cannot be read: permission denied.") from None
        return members

    def _locate(self, handle: Any, info: zipfile.ZipInfo) -> Member:
        name = self.path
        known = {S.MANIFEST_MEMBER} | {t.member for t in S.TABLES.values()}
        if info.filename not in known:
            raise UnexpectedMemberError(
                f"{name} holds an unexpected member {info.filename!r}; a profile holds only "
                f"{S.MANIFEST_MEMBER} and the schema's tables."
            )
        if info.compress_type != zipfile.ZIP_STORED:
            raise CorruptProfileError(f"Member {info.filename} of {name} is ZIP-compressed; profile.pop members "
                                      f"must be stored.")
        if info.file_size != info.compress_size or info.header_offset + _LOCAL_HEADER.size > self._size:
            raise MemberSizeError(f"Member {info.filename} of {name} declares a size that does not fit the file.")
        handle.seek(info.header_offset)
        header = handle.read(_LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(header)
        if fields[0] != _LOCAL_SIGNATURE:
            raise CorruptProfileError(f"Member {info.filename} of {name} has a corrupt header.")
        offset = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if offset + info.file_size > self._size:
            raise MemberSizeError(
                f"Member {info.filename} of {name} declares {info.file_size} bytes but the file ends "
                f"{max(self._size - offset, 0)} bytes after its start (truncated?)."
            )
        return Member(info.filename, offset, info.file_size, info.CRC)

    def _read_manifest(self) -> dict[str, Any]:
        name = self.path
        member = self._members.get(S.MANIFEST_MEMBER)
        if member is None:
            raise NotAProfileError(f"{name} is not a profile.pop: it has no {S.MANIFEST_MEMBER}.")
        if member.size > MAX_MANIFEST_BYTES:
            raise MemberSizeError(f"The manifest of {name} declares {member.size} bytes, more than a manifest can be.")
        raw = self.read_at(member.offset, member.size)
        if zlib.crc32(raw) != member.crc:
            raise CorruptProfileError(f"The manifest of {name} is corrupt (its checksum does not match).")
        try:
            manifest = json.loads(raw, parse_constant=_no_constant)
        except ValueError as exc:  # not UTF-8, not JSON, or NaN or Infinity, which JSON does not have
            raise ManifestError(f"The manifest of {name} is not valid JSON ({exc}).") from None
        except RecursionError:
            manifest = None
        if manifest is None or _depth(manifest) > MAX_MANIFEST_DEPTH:
            raise ManifestError(f"The manifest of {name} nests objects more than {MAX_MANIFEST_DEPTH} levels deep.")
        if not isinstance(manifest, dict):
            raise ManifestError(f"The manifest of {name} is not a JSON object.")
        if "format" in manifest and manifest["format"] != S.FORMAT_NAME:
            raise UnknownFormatError(f"{name} is in format {manifest['format']!r}, not {S.FORMAT_NAME!r}.")
        version = manifest.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > S.SCHEMA_VERSION:
            raise NewerSchemaError(
                f"{name} uses schema version {version}, newer than version {S.SCHEMA_VERSION} that this "
                f"popvision_py reads; upgrade popvision_py to read it."
            )
        check_manifest(manifest, f"The manifest of {name}", ManifestError)
        if version < 1:
            raise ManifestError(f"The manifest of {name} has an invalid schema version {version}.")
        check_manifest_sizes(manifest["target"], manifest["run"], f"the manifest of {name}", ManifestError)
        return manifest

    def _check_table(self, table: str) -> pa.Schema:
        spec = S.TABLES[table]
        if spec.member not in self._members:
            raise MissingTableError(f"{self.path} has no {table} table.")
        declared = self.manifest["tables"].get(table, {})
        # before pyarrow parses the footer: a damaged footer can abort the process inside it
        self._verified[table] = self._check_footer(table, declared if isinstance(declared, dict) else {})
        try:
            parquet = self._parquet(table)
            stored = parquet.schema_arrow
            footer = parquet.metadata
        except (pa.ArrowException, OSError) as exc:
            self._unchanged()
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt "
                                      f"({first_line(exc, type(exc).__name__)}).") from None
        self._footers[table] = footer
        rows = footer.num_rows
        if isinstance(declared, dict) and "rows" in declared and declared["rows"] != rows:
            raise CorruptProfileError(f"Table {table} of {self.path} holds {rows} rows but the manifest says "
                                      f"{declared['rows']}.")
        for column in spec.columns:
            index = stored.get_field_index(column.name)
            if index < 0 and column.since > self.manifest["schema_version"]:
                continue  # added by a later schema version than the profile's: has_column says so
            if index < 0:
                raise MissingColumnError(f"Table {table} of {self.path} has no column {column.name}.")
            actual = stored.field(index).type
            if not _types_match(actual, column.type):
                raise ColumnTypeError(
                    f"Column {table}.{column.name} of {self.path} is {actual}, expected {column.type}."
                )
        return stored

    def _check_footer(self, table: str, declared: dict[str, Any]) -> bool:
        """Check the table's footer against the manifest's ``footer_crc32`` (or, in a profile
        written before it had one, the whole member against the ZIP's CRC-32 when it is small
        enough); True if it was checked."""
        member = self._members[S.TABLES[table].member]
        corrupt = f"Table {table} of {self.path} is corrupt"
        if member.size < 12:
            raise CorruptProfileError(f"{corrupt} ({member.size} bytes is too short for a Parquet file).")
        expected = declared.get("footer_crc32")
        if expected is None:
            if member.size > WHOLE_MEMBER_CRC_BYTES:
                return False
            crc = 0
            for start in range(0, member.size, CRC_READ_BYTES):
                crc = zlib.crc32(self.read_at(member.offset + start, min(CRC_READ_BYTES, member.size - start)), crc)
            if crc != member.crc:
                raise CorruptProfileError(f"{corrupt} (its checksum does not match).")
            return True
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise ManifestError(f"The manifest of {self.path} has a footer_crc32 of table {table} that is "
                                f"not an integer.")
        length = int.from_bytes(self.read_at(member.offset + member.size - 8, 4), "little")
        # the length is checked against the member (itself checked against the file) before it is read
        if length + 12 > member.size or zlib.crc32(
                self.read_at(member.offset + member.size - 8 - length, length + 8)) != expected:
            raise CorruptProfileError(f"{corrupt} (its footer does not match the checksum in the manifest).")
        return True

    @property
    def declared(self) -> dict[str, int]:
        """The manifest's figures the schema's bounds name (``values.bounds``), checked at open."""
        return dict(self._declared)

    def footer_verified(self, table: str) -> bool:
        """Whether the table's footer (its row counts and column statistics) was checked against a
        checksum at open. Figures may come from footer statistics only if it was."""
        return self._verified[self._known(table)]

    # -- reading ---------------------------------------------------------------------------

    def _member_file(self, table: str) -> pa.PythonFile:
        """The table's member as a file pyarrow reads: each read a pread of the container, followed
        by the check that the file has not changed (ProfileChangedError, which pyarrow passes on)."""
        member = self._members[S.TABLES[table].member]
        return pa.PythonFile(MemberFile(self.read_at, member.name, member.offset, member.size), mode="r")

    def _parquet(self, table: str, verify: bool = False) -> pq.ParquetFile:
        # The footer parsed at open is passed back in (not parsed per read); a fresh ParquetFile per read keeps
        # concurrent reads independent. No pre-buffering: reads happen within each call, never on pyarrow's
        # I/O threads after the caller has stopped (they would call into Python while the interpreter exits).
        # Strings decode as dictionaries, as check_expansion counts them: never a copy of a value per row.
        footer = self._footers.get(table)
        return pq.ParquetFile(self._member_file(table), metadata=footer, page_checksum_verification=verify,
                              pre_buffer=False, read_dictionary=dictionary_columns(footer) if footer else None)

    @property
    def tables(self) -> list[str]:
        """The tables the profile holds, in schema order (an older profile lacks a later version's)."""
        return list(self._schemas)

    def has_column(self, table: str, column: str) -> bool:
        """Whether the table holds ``column`` (an older profile lacks a later version's: ``Column.since``)."""
        return column in self._schemas[self._known(table)].names

    def num_rows(self, table: str) -> int:  # from its Parquet footer
        return self._footers[self._known(table)].num_rows

    def metadata(self, table: str) -> pq.FileMetaData:
        """The table's Parquet footer (parsed at open): row groups and their column statistics."""
        return self._footers[self._known(table)]

    def member_bytes(self, table: str) -> int:
        """Bytes the table occupies in the file."""
        return self._members[S.TABLES[self._known(table)].member].size

    def member_span(self, table: str) -> tuple[int, int]:
        """Where the table's Parquet file lies in the container: (offset, bytes), checked at open."""
        member = self._members[S.TABLES[self._known(table)].member]
        return member.offset, member.size

    def footer_bytes(self, table: str) -> int:
        """Bytes of the table's Parquet footer, with its length and closing magic (checked at open)."""
        offset, size = self.member_span(table)
        return int.from_bytes(self.read_at(offset + size - 8, 4), "little") + 8

    def verify_chunk(self, table: str, row_group: int, column: str) -> None:
        """Decode one column chunk with its page checksums checked (CorruptProfileError if one
        fails) and its values checked against the schema (ValueRangeError): for readers, such as
        DuckDB's, that skip both.

        The columns ordered with ``column`` (``start_cycle`` with ``end_cycle``) are decoded with
        it, so that a row ending before it starts is refused too.
        """
        spec = S.TABLES[self._known(table)]
        partners = [b if a == column else a for a, b in spec.ordered if column in (a, b)]
        try:
            decoded = self._parquet(table, verify=True).read_row_group(row_group, columns=[column, *partners])
            check_arrays(decoded)
            expected = self._footers[table].row_group(row_group).num_rows
            if decoded.num_rows != expected:
                raise CorruptProfileError(
                    f"Table {table} of {self.path} is corrupt (column {column} of row group {row_group} decodes "
                    f"to {decoded.num_rows} rows, its footer says {expected})."
                )
        except (pa.ArrowException, OSError) as exc:
            self._unchanged()
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt "
                                      f"({first_line(exc, type(exc).__name__)}).") from None
        footer = self._footers[table]
        first_row = sum(footer.row_group(g).num_rows for g in range(row_group))
        known = extremes(decoded)
        self._check_stated(table, row_group, decoded, first_row, known)
        check_values(spec, decoded, self._declared, str(self.path), first_row=first_row, known=known)
        self._checked.update((table, row_group, c) for c in decoded.schema.names)

    def read_table(self, table: str, columns: Sequence[str] | None = None, *, filters: Any = None) -> pa.Table:
        """Decode a table, or only ``columns`` of it, as a pyarrow Table.

        ``filters`` takes pyarrow's filter syntax, e.g. ``[("ipu", "=", 0)]``: only the rows that
        pass are returned (the whole table is decoded first).
        """
        self._known(table)
        wanted = list(columns) if columns is not None else None
        if wanted is not None:
            unknown = [c for c in wanted if c not in self._schemas[table].names]
            if unknown:
                raise MissingColumnError(f"Table {table} has no column {', '.join(unknown)}.")
        try:
            # With the footer already parsed, ParquetFile.read decodes the same columns (in
            # parallel too) without pq.read_table's dataset set-up: 2-4x faster on small tables, no
            # slower on a 50M-row trace (pyarrow 26; docs/performance.md). Filters are applied to
            # the decoded table, not through pq.read_table's dataset scan: its reads run on
            # pyarrow's I/O threads, which call into Python even after a failed scan, as the
            # interpreter exits.
            decoded = read_whole(self._parquet(table, verify=True), wanted if filters is None else None)
            if decoded.num_rows != self._footers[table].num_rows:
                raise CorruptProfileError(
                    f"Table {table} of {self.path} is corrupt (it decodes to {decoded.num_rows} rows, "
                    f"its footer says {self._footers[table].num_rows})."
                )
            if filters is not None:
                decoded = decoded.filter(pq.filters_to_expression(filters))
                if wanted is not None:
                    decoded = decoded.select(wanted)
            # a damaged page header can leave dictionary indices past the dictionary's end
            check_arrays(decoded)
        except (pa.ArrowException, OSError) as exc:
            self._unchanged()
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt "
                                      f"({first_line(exc, type(exc).__name__)}).") from None
        known = None
        if filters is None:
            first, groups = 0, []
            for group in range(self._footers[table].num_row_groups):
                rows = self._footers[table].row_group(group).num_rows
                groups.append(extremes(decoded.slice(first, rows)))
                self._check_stated(table, group, decoded.slice(first, rows), first, groups[-1])
                first += rows
            # the whole table's extremes from its row groups': each column's values are read once
            known = {name: (min(g[name][0] for g in groups if name in g), max(g[name][1] for g in groups if name in g))
                     for name in set().union(*groups)}
            self._checked.update((table, g, c) for g in range(len(groups)) for c in decoded.schema.names)
        check_values(S.TABLES[table], decoded, self._declared, str(self.path), whole=filters is None, known=known)
        return decoded

    def _check_stated(self, table: str, group: int, decoded: pa.Table | pa.RecordBatch, first_row: int,
                      known: dict[str, tuple[int, int]]) -> None:
        """CorruptProfileError if the decoded rows of row group ``group`` hold an integer outside the
        (min, max) its footer's statistics state: readers size arrays from those statistics.
        ``known``: the decoded integer columns' (min, max) (``values.extremes``)."""
        footer = self._footers[table]
        for column in decoded.schema.names:
            stated = statistics(footer, group, column)
            if stated is None or column not in known:
                continue
            least, most = known[column]
            if least < stated[0] or most > stated[1]:
                raise CorruptProfileError(
                    f"Table {table} of {self.path} is corrupt (column {column} of row group {group} holds values "
                    f"from {least:,} to {most:,}, outside the {stated[0]:,} to {stated[1]:,} "
                    f"its footer's statistics state)."
                )

    def read_pandas(self, table: str, columns: Sequence[str] | None = None, *, filters: Any = None) -> pd.DataFrame:
        """Like ``read_table``, as a pandas DataFrame (categorical columns become categoricals)."""
        return self.read_table(table, columns, filters=filters).to_pandas()

    def iter_batches(self, table: str, columns: Sequence[str] | None = None, batch_size: int = 1 << 20,
                     row_groups: Sequence[int] | None = None, use_threads: bool = True):
        """Yield the table as pyarrow RecordBatches, for tables too large to decode at once.

        ``row_groups``: only these row groups (say, those whose footer statistics can hold the rows
        a caller wants). ``use_threads``: pyarrow's pool decodes a batch's columns (else this thread).
        Nothing is mapped: each column chunk's bytes are read, decoded and freed (a flat resident size).
        """
        wanted = list(columns) if columns is not None else None
        try:
            footer = self._footers[self._known(table)]
            groups = list(range(footer.num_row_groups) if row_groups is None else row_groups)
            names = wanted if wanted is not None else self._schemas[table].names
            # chunks this process decoded and checked already (the dashboard's second pass) are
            # decoded again without the checks; the row count is still checked
            checked = all((table, g, c) in self._checked for g in groups for c in names)
            parquet = self._parquet(table, verify=not checked)
            starts = self._group_starts(table)
            expected = int(np.diff(starts)[groups].sum())
            decoded = 0
            spec, where = S.TABLES[table], str(self.path)
            # A damaged page header can end a column early without an error: the batches then stop
            # short of the footer's row count (checked at the end) or hold invalid dictionary
            # indices (checked per batch).
            # row group by row group, so each batch is checked against its group's statistics
            for group in groups:
                row = int(starts[group])
                for batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group], columns=wanted,
                                                  use_threads=use_threads):
                    if not checked:
                        check_arrays(batch)
                        known = extremes(batch)
                        self._check_stated(table, group, batch, row, known)
                        check_values(spec, batch, self._declared, where, first_row=row, known=known)
                    decoded += batch.num_rows
                    row += batch.num_rows
                    yield batch
                if row - int(starts[group]) == int(starts[group + 1] - starts[group]):
                    self._checked.update((table, group, c) for c in names)
            if decoded != expected:
                raise CorruptProfileError(
                    f"Table {table} of {self.path} is corrupt (it decodes to {decoded} rows, its footer "
                    f"says {expected})."
                )
        except (pa.ArrowException, OSError) as exc:
            self._unchanged()
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt "
                                      f"({first_line(exc, type(exc).__name__)}).") from None

    def _group_starts(self, table: str) -> np.ndarray:
        """Each row group's first row, then the table's rows (from the footer, once per table: a
        billion-row trace is read a row group per call, and its 1,421 row groups' metadata each time
        cost 0.2 ms a call)."""
        starts = self._row_starts.get(table)
        if starts is None:
            footer = self._footers[table]
            starts = np.cumsum([0] + [footer.row_group(g).num_rows for g in range(footer.num_row_groups)])
            self._row_starts[table] = starts
        return starts

    def _known(self, table: str) -> str:
        if table not in S.TABLES:
            raise MissingTableError(f"There is no table named {table!r}; the tables are {', '.join(S.TABLES)}.")
        if table not in self._schemas:  # a table of a later schema version than the profile's
            raise MissingTableError(f"{self.path} has no {table} table (schema version "
                                    f"{S.TABLES[table].since} added it).")
        return table

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Profile({str(self.path)!r})"


def _no_constant(text: str) -> None:
    raise ValueError(f"{text} is not a JSON number")


def _depth(value: Any) -> int:
    """How deeply objects and lists nest in ``value``, without recursing (a hostile file may nest deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_MANIFEST_DEPTH:
                return deepest
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def open_profile(path: str | os.PathLike[str]) -> Profile:
    """Open a profile.pop for reading; raises a ProfileError subclass if it cannot be read."""
    try:
        return Profile(path)
    except ProfileError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorruptProfileError(f"{path} cannot be read as a profile "
                                  f"({first_line(exc, type(exc).__name__)}).") from None
