"""SQL over a profile's tables with DuckDB: ``run_query``, what `popvision sql PROFILE "SELECT ..."` runs.

The profile may also be a tune result (`popvision tune -o tune.parquet`): its candidates are then the
one table ``tune``, under the same lock-down.

Every table (ops, programs, tile_cycles, tile_memory, variables, liveness, trace, exchanges) is a
view under its schema name over its member, which DuckDB's own Parquet reader scans in place
through popvision_py.format.memberfs: a query reads only the columns it uses, and a table it does
not name costs nothing. Each column of a view stops the query at a value the schema forbids
(values.sql_checked), and each column chunk's pages are checked as DuckDB reads them.

The query may read those tables and nothing else: DuckDB runs with external access off (only the
eight members are allowed, by path), no extension installed or loaded, nothing spilled to disk,
a memory limit, and its configuration locked, so no SET can undo any of it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import stat
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from popvision_py.errors import PopvisionError, first_line

if TYPE_CHECKING:
    from popvision_py.format.memberfs import MemberFileSystem
from popvision_py.format import schema as S


class QueryError(PopvisionError):
    """The query is empty, not text, or DuckDB could not run it."""


def checked_query(query: str, table: str = "trace") -> str:
    """The query, if it holds a statement and is text; else a QueryError saying what is wrong.

    A shell hands Python the bytes of an argument; bytes that are not UTF-8 arrive as lone
    surrogates (PEP 383), which DuckDB cannot take.
    """
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(query[exc.start])
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, escaped (PEP 383)
            position = len(query[: exc.start].encode("utf-8")) + 1
            raise QueryError(
                f"The query is not UTF-8 text: byte 0x{code - 0xDC00:02x} at byte {position} is not a character."
            ) from None
        raise QueryError(
            f"The query is not text: character {exc.start + 1} is a lone surrogate (U+{code:04X})."
        ) from None
    if not query.strip():
        raise QueryError(f'The query is empty; give a SQL statement, e.g. "SELECT count(*) FROM {table}".')
    return query


MEMORY_LIMIT = "2GB"
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


def memory_bytes(limit: str) -> int:
    """The bytes a size such as "2GB", "512MiB" or "1000000" stands for; a QueryError if it is none."""
    match = _SIZE.fullmatch(limit)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise QueryError(f"--memory-limit {limit!r} is not a size; give one such as 2GB, 512MB or 4GiB.")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 2**20:
        raise QueryError(f"--memory-limit {limit!r} is below 1 MiB; DuckDB cannot run a query in less.")
    if size > 2**60:
        raise QueryError(f"--memory-limit {limit!r} is above 1 EiB; give a size this machine could hold.")
    return size


def _refusal(exc: Exception, memory_limit: str, tables: tuple[str, ...] = ()) -> QueryError:
    """One sentence for a DuckDB error, saying plainly when it is the lock-down that refused the query, and
    naming ``tables`` (the ones a query may read) when it named another."""
    import duckdb

    first = first_line(exc, type(exc).__name__)
    unknown = re.search(r"Table with name (\S+) does not exist", first)
    if isinstance(exc, duckdb.CatalogException) and unknown and tables:
        import difflib

        close = difflib.get_close_matches(unknown.group(1).lower(), tables, n=1)
        return QueryError(f"There is no table {unknown.group(1)}: the tables are {', '.join(tables)}"
                          + (f" (did you mean {close[0]}?)." if close else "."))
    if isinstance(exc, duckdb.OutOfMemoryException):
        return QueryError(f"The query needs more than the memory limit of {memory_limit} (DuckDB: {first}); "
                          "raise it with --memory-limit.")
    if isinstance(exc, duckdb.PermissionException):
        reason = first.removeprefix("Permission Error: ").removesuffix(
            " - file system operations are disabled by configuration")
        return QueryError("The query was refused: popvision sql reads the profile's tables and touches no other "
                          f"file, extension or network address ({reason[:1].lower()}{reason[1:]}).")
    locked = re.search(r'option "+([^"]+)"+ - the configuration has been locked', first)
    if locked:
        return QueryError(f"The query was refused: settings are fixed ({locked.group(1)}); "
                          "give --memory-limit or --timeout on the command line instead.")
    return QueryError(f"The query failed: {first}")


def _connection(memory_limit: str):
    """A DuckDB connection with no extension, secret, spill file or scan of Python objects in scope."""
    import duckdb

    return duckdb.connect(config={
        "memory_limit": f"{memory_bytes(memory_limit)}B",
        "temp_directory": "",
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "allow_persistent_secrets": False,
        # only the profile's tables: no scans of whatever Python objects happen to be in scope
        "python_enable_replacements": False,
    })


@functools.cache
def _pragmas_pass_the_lock() -> bool:
    """Whether this DuckDB runs a PRAGMA of a setting (``PRAGMA disable_optimizer``, ``enable_profiling``)
    on a locked configuration, as DuckDB before 2.0 does; asked of DuckDB itself, once per process."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET lock_configuration = true")
        con.execute("PRAGMA disable_optimizer")
    except duckdb.Error:
        return False
    finally:
        con.close()
    return True


def _refuse_setting_pragmas(con: Any, query: str) -> None:
    """A QueryError for a PRAGMA of a setting where the lock would let it through. DuckDB's parser
    turns the PRAGMAs that read (``table_info``, ``show_tables``, ``version``) into SELECTs: only
    those that set something are left of type PRAGMA. DuckDB is asked whether the lock holds them
    only for a query that has one (asking opens a database of its own: 8-16 ms a process)."""
    import duckdb

    for statement in con.extract_statements(query):
        if statement.type == duckdb.StatementType.PRAGMA and _pragmas_pass_the_lock():
            raise QueryError(f"The query was refused: settings are fixed ({statement.query.strip()}); "
                             "give --memory-limit or --timeout on the command line instead.")


def _locked_connection(members: MemberFileSystem, memory_limit: str):
    """A DuckDB connection that sees the profile's tables and nothing else, its settings locked.

    External access is off (no file, extension or network reader, no COPY TO, ATTACH, INSTALL,
    EXPORT), except the eight members, allowed by path on the profile's own file system. Nothing
    spills to disk (no temporary directory), so the memory limit bounds the query.
    """
    import duckdb

    con = _connection(memory_limit)
    try:
        con.register_filesystem(members)
        # allowed_paths only takes once the database runs, and only before external access is off
        con.execute("SET allowed_paths = $1",
                    [[f"{members.protocol}://{S.TABLES[name].member}" for name in members.tables]])
        con.execute("SET enable_external_access = false")
        for name in members.tables:
            con.execute(f"CREATE VIEW {name} AS {members.view(name)}")
        # each member's footer parsed once (binding a view parses it; without the cache the query would again:
        # 27 ms for a billion-row trace's); settable only once a Parquet read has loaded the reader
        con.execute("SET parquet_metadata_cache = true")
        with contextlib.suppress(duckdb.CatalogException):  # a setting of DuckDB 2.0 on; 1.x reads as it always has
            # only the column chunks a query reads: no gap between two of them is read with them, so fewer
            # bytes pass through Python and fewer chunks are checked (a billion-row trace: 136 MB and 4,312
            # chunks against 173 MB and 9,976 for `GROUP BY ipu`)
            con.execute("SET parquet_prefetch_column_gap = 0")
        con.execute("SET lock_configuration = true")
    except BaseException as exc:
        con.close()
        if isinstance(exc, duckdb.Error) and members.corrupt is not None:
            # a column chunk failed its page checksums or value checks as the view read it
            raise members.corrupt from None
        raise
    return con


def run_query(profile_path: str, query: str, *, memory_limit: str = MEMORY_LIMIT, timeout: float | None = None,
              interrupted: Callable[[], bool] | None = None):
    """The query's result as a ``Table`` of NumPy columns (DuckDB's ``fetchnumpy``: a column holding
    nulls is a masked array; repeated names are made unique as ``a_1``), from a DuckDB that can read
    the profile's tables only. Neither this nor its rendering imports pandas.

    ``profile_path`` is a profile.pop, or a tune result (its one table ``tune``). ``memory_limit``
    bounds DuckDB's memory ("2GB", "512MiB"...); a query past ``timeout`` seconds is interrupted. Either
    is a QueryError, as is a query that is empty or not text, fails in DuckDB, or reaches for anything but
    the tables. ``interrupted``: polled while the query runs; when it returns True (a Ctrl-C the caller's
    signal handler noted, which DuckDB may have swallowed) the query stops with KeyboardInterrupt. A
    profile that cannot be read, or a column chunk that fails its checks as DuckDB reads it, raises the
    reader's ProfileError.
    """
    from popvision_py.format import open_profile_file
    from popvision_py.format.memberfs import MemberFileSystem

    tune = is_tune_result(profile_path)
    query = checked_query(query, "tune" if tune else "trace")
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise QueryError(f"--timeout {timeout:g} is not a number of seconds above 0.")
    memory_bytes(memory_limit)  # a bad size is refused before the profile is opened
    if tune:
        return _execute(_tune_connection(profile_path, memory_limit), query, memory_limit, timeout, None, "tune",
                        interrupted)
    with open_profile_file(profile_path) as profile, MemberFileSystem(profile) as members:
        return _execute(_locked_connection(members, memory_limit), query, memory_limit, timeout, members, "trace",
                        interrupted)


def is_tune_result(path: str) -> bool:
    """Whether ``path`` is a Parquet file (a tune result, if anything popvision reads) rather than a
    profile.pop (a ZIP).

    Only a regular file is opened here (a FIFO would block the open); anything else is left to
    open_profile, which says what is wrong with it, as it does with a file it cannot read.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(4) == b"PAR1"
    except OSError:
        return False


def _tune_connection(path: str, memory_limit: str):
    """A locked DuckDB connection whose one table, ``tune``, is the tune result's candidates (checked by read_tune)."""
    import pyarrow as pa

    from popvision_py.format.tunefile import read_tune

    rows, _ = read_tune(path)
    con = _connection(memory_limit)
    try:
        con.register("tune", pa.Table.from_pandas(rows, preserve_index=False))
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _execute(con: Any, query: str, memory_limit: str, timeout: float | None,
             members: MemberFileSystem | None, table: str, interrupted: Callable[[], bool] | None = None):
    """Run ``query`` on ``con`` (closed after), interrupted past ``timeout`` seconds; see run_query."""
    import duckdb

    # a column chunk that failed its page checksums or value checks as DuckDB read it
    def corrupt() -> Exception | None:
        return members.corrupt if members is not None else None

    timed_out = threading.Event()

    def interrupt() -> None:
        timed_out.set()
        with contextlib.suppress(duckdb.Error):  # the query may have just ended and closed
            con.interrupt()

    timer = threading.Timer(timeout, interrupt) if timeout is not None else None
    # A Ctrl-C is noted by the CLI's handler (which then ignores the next ones); should DuckDB have
    # swallowed its KeyboardInterrupt (raised in a callback of its own, say), the query is interrupted here
    interrupted = interrupted or (lambda: False)
    ended = threading.Event()

    def watch() -> None:
        while not ended.wait(0.05):
            if interrupted():
                with contextlib.suppress(duckdb.Error):
                    con.interrupt()
                return

    watcher = threading.Thread(target=watch, name="popvision-sql-ctrl-c", daemon=True)
    try:
        watcher.start()
        if interrupted():
            raise KeyboardInterrupt
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            _refuse_setting_pragmas(con, query)
            result = con.execute(query)
            if result is None:  # only comments or semicolons: no statement ran
                raise QueryError(f'The query holds no statement; give one, e.g. "SELECT count(*) FROM {table}".')
            return _table(result)
        except (duckdb.InterruptException, RuntimeError) as exc:
            if timed_out.is_set():
                raise QueryError(f"The query ran past --timeout {timeout:g} s and was interrupted.") from None
            if isinstance(exc, duckdb.InterruptException) or str(exc) == "Query interrupted":
                raise KeyboardInterrupt from None  # Ctrl-C, which DuckDB catches and reports as its own
            if corrupt() is not None:
                raise corrupt() from None
            raise
        except duckdb.Error as exc:
            if corrupt() is not None:
                raise corrupt() from None
            refused = members.refusal(str(exc)) if members is not None else None  # a view stopped at a forbidden value
            if refused is not None:
                raise refused from None
            raise _refusal(exc, memory_limit, ("tune",) if members is None else tuple(members.tables)) from None
    finally:
        ended.set()
        watcher.join()
        if timer is not None:
            timer.cancel()
            timer.join()
        con.close()


def _table(result: Any) -> Any:
    """DuckDB's result as a Table, its columns in the query's order."""
    from popvision_py.analysis.common.answer import Table

    return Table(result.fetchnumpy())
