"""Opening profile.pop: every check ``open_profile`` makes, without decoding a table or importing pyarrow.

``ProfileFile(path)`` opens the file, checks the ZIP directory and the manifest, and reads each
table's Parquet footer to check its schema, its row counts and its statistics against the
manifest's bounds, and what its tables would decode to; ``reader.Profile`` builds on it to decode.
A command that only needs the footers and the members' bytes (`popvision sql`, whose DuckDB reads
the members itself) opens a ``ProfileFile``: small footers are parsed by ``footer.parse_footer``,
so such a command never imports pyarrow (docs/performance.md, "`popvision sql` without pyarrow").

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

import contextlib
import json
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from popvision_py.errors import (ColumnTypeError, CorruptProfileError, EmptyProfileError, ManifestError,
                                 MemberSizeError, MissingColumnError, MissingTableError, NewerSchemaError,
                                 NotAProfileError, ProfileChangedError, ProfileError, UnexpectedMemberError,
                                 UnknownFormatError, first_line)
from popvision_py.format import schema as S
from popvision_py.format.expansion import check_expansion, check_key_rows
from popvision_py.format.footer import FooterError, parse_footer
from popvision_py.format.span import Container, MemberFile
from popvision_py.format.values import (bounds, check_declared, check_manifest, check_manifest_sizes,
                                        check_statistics, statistics_violation)

if TYPE_CHECKING:
    from typing import Self



MAX_MANIFEST_BYTES = 16 << 20
MAX_MANIFEST_DEPTH = 32  # objects and lists nested in the manifest (ours: 4)
# A profile written before the manifest carried footer checksums has its members checked against
# the ZIP's CRC-32 instead, whole, up to this size; a larger member's footer is not verified.
WHOLE_MEMBER_CRC_BYTES = 64 << 20
CRC_READ_BYTES = 8 << 20  # such a member is read in pieces this large to check it
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
# Footers longer than this are parsed by pyarrow: below it footer.parse_footer is faster than
# importing pyarrow (47 ms); a billion-row trace's 1.35 MB footer takes pyarrow 14 ms.
OWN_PARSER_BYTES = 256 << 10
T = TypeVar("T")


@dataclass(frozen=True)
class Member:
    """Where one member's bytes lie in the file."""

    name: str
    offset: int
    size: int
    crc: int



def _types_match(actual: str, expected: str) -> bool:
    """Whether a stored column of Arrow type ``actual`` (as pyarrow prints it) holds the schema's type ``expected``
    (``Column.type_name``)."""
    if actual == S.ARROW_TEXT[expected]:
        return True
    # Another writer may store categories as plain strings, or with other index widths.
    if expected == S.CATEGORY:
        return actual in ("string", "large_string") or actual.startswith(
            ("dictionary<values=string,", "dictionary<values=large_string,"))
    return False


class ProfileFile:
    """An open profile.pop, checked as ``open_profile`` checks one, whose tables are not decoded
    here: ``reader.Profile`` decodes them. Its footers are parsed by ``footer.parse_footer`` where
    they are small (a Parquet footer a few kilobytes long parses in less time than pyarrow takes
    to import), by pyarrow where they are large.

    Attributes: ``path``, ``manifest`` (the parsed manifest.json), ``target`` and ``run``.
    """

    # what the open's checks may raise for a file that is not a readable profile (the reader adds pyarrow's)
    _READ_ERRORS: tuple[type[BaseException], ...] = (ProfileError, OSError, ValueError)

    def __init__(self, path: str | os.PathLike[str],
                 decoder: Callable[[Path], AbstractContextManager[Any]] | None = None) -> None:
        # ``decoder``: opens the reader on a path, for the few errors whose sentence needs rows decoded
        self._decoder = decoder
        self.path = Path(path)
        self._check_file()
        self._file = self._open_file()
        try:
            self._size, self._stamp = self._stat()
            self._members = self._read_directory()
            self.manifest = self._read_manifest()
            self.target: dict[str, Any] = self.manifest["target"]
            self.run: dict[str, Any] = self.manifest["run"]
            self._footers: dict[str, Any] = {}  # each table's parsed Parquet footer, kept from open
            self._footer_lengths: dict[str, int] = {}  # each footer's bytes, without its length and magic
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
        except self._READ_ERRORS:
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
        except (OSError, ValueError) as exc:
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
                except (OSError, ValueError, EOFError, struct.error, NotImplementedError) as exc:
                    # NotImplementedError: a damaged directory asking for a ZIP version zipfile does not read
                    raise CorruptProfileError(f"{name} has a corrupt ZIP directory ({exc}).") from None
                # closed here, not by its finaliser: a Ctrl-C that lands in a finaliser is printed as a traceback
                # ("Exception ignored in ZipFile.__del__"), where here it is the command's "Interrupted."
                with archive:
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
        if len(header) != _LOCAL_HEADER.size:  # the file ended before its size said: rewritten as it was read
            raise MemberSizeError(f"Member {info.filename} of {name} ends inside its header (truncated?).")
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

    def _check_table(self, table: str) -> list[str]:
        """The table's stored column names, its footer parsed and checked against the schema."""
        spec = S.TABLES[table]
        if spec.member not in self._members:
            raise MissingTableError(f"{self.path} has no {table} table.")
        declared = self.manifest["tables"].get(table, {})
        # before the footer is parsed: a damaged footer can abort the process inside pyarrow's parser
        self._verified[table] = self._check_footer(table, declared if isinstance(declared, dict) else {})
        member = self._members[spec.member]
        length = self._footer_lengths[table] = int.from_bytes(self.read_at(member.offset + member.size - 8, 4),
                                                              "little")
        footer, stored = self._read_footer(table, length)
        self._footers[table] = footer
        rows = footer.num_rows
        if isinstance(declared, dict) and "rows" in declared and declared["rows"] != rows:
            raise CorruptProfileError(f"Table {table} of {self.path} holds {rows} rows but the manifest says "
                                      f"{declared['rows']}.")
        for column in spec.columns:
            actual = stored.get(column.name)
            if actual is None and column.since > self.manifest["schema_version"]:
                continue  # added by a later schema version than the profile's: has_column says so
            if actual is None:
                raise MissingColumnError(f"Table {table} of {self.path} has no column {column.name}.")
            if not _types_match(actual, column.type_name):
                raise ColumnTypeError(f"Column {table}.{column.name} of {self.path} is {actual}, "
                                      f"expected {S.ARROW_TEXT[column.type_name]}.")
        return list(stored)

    def _read_footer(self, table: str, length: int) -> tuple[Any, dict[str, str]]:
        """The table's parsed footer (``length`` bytes before its length and magic), and its columns' Arrow
        types as pyarrow prints them, by name."""
        member = self._members[S.TABLES[table].member]
        if length > OWN_PARSER_BYTES or length + 12 > member.size:  # pyarrow's sentence for a length that lies
            return self._arrow_footer(table)
        try:
            footer = parse_footer(self.read_at(member.offset + member.size - 8 - length, length))
        except FooterError as exc:
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt ({exc}).") from None
        schema = footer.schema
        return footer, {schema.column(i).name: schema.arrow_type(i) for i in range(len(schema))}

    def _arrow_footer(self, table: str) -> tuple[Any, dict[str, str]]:
        """``_read_footer``'s answer from pyarrow's parser (a ``pq.FileMetaData``, and the stored Arrow schema)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        member = self._members[S.TABLES[table].member]
        try:
            parquet = pq.ParquetFile(pa.PythonFile(MemberFile(self.read_at, member.name, member.offset, member.size),
                                                   mode="r"), pre_buffer=False)
            stored, footer = parquet.schema_arrow, parquet.metadata
        except (pa.ArrowException, OSError) as exc:
            self._unchanged()
            raise CorruptProfileError(f"Table {table} of {self.path} is corrupt "
                                      f"({first_line(exc, type(exc).__name__)}).") from None
        return footer, {field.name: str(field.type) for field in stored}

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

    @property
    def tables(self) -> list[str]:
        """The tables the profile holds, in schema order (an older profile lacks a later version's)."""
        return list(self._schemas)

    def has_column(self, table: str, column: str) -> bool:
        """Whether the table holds ``column`` (an older profile lacks a later version's: ``Column.since``)."""
        return column in self._schemas[self._known(table)]

    def num_rows(self, table: str) -> int:  # from its Parquet footer
        return self._footers[self._known(table)].num_rows

    def metadata(self, table: str) -> Any:
        """The table's Parquet footer (parsed at open): row groups and their column statistics, as
        ``pq.FileMetaData`` gives them (``footer.Footer`` has the same names)."""
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
        return self._footer_lengths[self._known(table)] + 8

    def verify_chunk(self, table: str, row_group: int, column: str) -> None:
        """Decode one column chunk with its page checksums and values checked (``reader.Profile.verify_chunk``),
        where this was opened with a ``decoder``; else nothing (the open's statistics check says what is wrong)."""
        if self._decoder is not None:
            with self.decoder() as profile:
                profile.verify_chunk(table, row_group, column)

    @contextlib.contextmanager
    def decoder(self) -> Iterator[Any]:
        """The profile as a ``reader.Profile``, which decodes its tables (imports pyarrow), for as long as the
        ``with`` lasts: the ``decoder`` this was opened with, on the same path (``format.open_profile_file``)."""
        if self._decoder is None:
            raise TypeError(f"{self!r} was opened without a decoder")
        with self._decoder(self.path) as profile:
            yield profile

    def _known(self, table: str) -> str:
        if table not in S.TABLES:
            raise MissingTableError(f"There is no table named {table!r}; the tables are {', '.join(S.TABLES)}.")
        if table not in self._schemas:  # a table of a later schema version than the profile's
            raise MissingTableError(f"{self.path} has no {table} table (schema version "
                                    f"{S.TABLES[table].since} added it).")
        return table

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


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


def opened(opener: Callable[[], T], path: str | os.PathLike[str], errors: tuple[type[BaseException], ...]) -> T:
    """``opener()`` (a ``ProfileFile`` or reader being opened on ``path``), any of ``errors`` it raises
    (its class's ``_READ_ERRORS``) that is not a ProfileError made one sentence: the common end of
    ``open_profile`` and ``open_profile_file``."""
    try:
        return opener()
    except ProfileError:
        raise
    except errors as exc:
        raise CorruptProfileError(f"{path} cannot be read as a profile "
                                  f"({first_line(exc, type(exc).__name__)}).") from None
