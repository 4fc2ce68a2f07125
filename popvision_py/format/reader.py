"""Reading profile.pop without reading it all.

``open_profile(path)`` opens the file and checks it as ``opening.ProfileFile`` does (the ZIP
directory, the manifest, each table's Parquet footer, here always parsed by pyarrow, which decodes
with it): the data itself stays on disk until a table (or some of its columns) is asked for, and then
pyarrow decodes it from the column chunks it reads, with their page checksums, and its values are
checked against the schema (``arrays``).

Every way a file can be wrong raises one of the ``ProfileError`` classes with one sentence.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.errors import CorruptProfileError, MissingColumnError, first_line
from popvision_py.format import schema as S
from popvision_py.format.arrays import check_arrays, check_values, extremes
from popvision_py.format.expansion import dictionary_columns
from popvision_py.format.opening import ProfileFile, opened
from popvision_py.format.span import MemberFile, read_whole
from popvision_py.format.values import statistics

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for: `popvision info` stays fast
    import pandas as pd


class Profile(ProfileFile):
    """An open profile.pop. Cheap to open; tables are decoded on request.

    Attributes: ``path``, ``manifest`` (the parsed manifest.json), ``target`` and ``run``.
    """

    _READ_ERRORS = (*ProfileFile._READ_ERRORS, pa.ArrowException)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._row_starts: dict[str, np.ndarray] = {}  # each table's row groups' first rows (_group_starts)
        # (table, row group, column) chunks decoded with their page checksums and checked, once per process:
        # set before the open's checks, which may decode one (verify_chunk)
        self._checked: set[tuple[str, int, str]] = set()
        super().__init__(path)

    def _read_footer(self, table: str, length: int) -> tuple[pq.FileMetaData, dict[str, str]]:
        # pyarrow's own footer, whatever its size: a ParquetFile is handed it back on every read
        return self._arrow_footer(table)

    @contextlib.contextmanager
    def decoder(self) -> Iterator[Profile]:
        yield self

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
            unknown = [c for c in wanted if c not in self._schemas[table]]
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
        ``known``: the decoded integer columns' (min, max) (``arrays.extremes``)."""
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
            names = wanted if wanted is not None else self._schemas[table]
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


def open_profile(path: str | os.PathLike[str]) -> Profile:
    """Open a profile.pop for reading; raises a ProfileError subclass if it cannot be read."""
    return opened(lambda: Profile(path), path, Profile._READ_ERRORS)
